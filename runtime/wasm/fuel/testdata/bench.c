// CPU-bound guest for the fuel benchmark and tests: no imports, one export.
// Rebuild:
//   clang --target=wasm32 -O2 -mbulk-memory -nostdlib -Wl,--no-entry \
//     -Wl,--export=run -o bench.wasm bench.c
// (-mbulk-memory turns memset into memory.fill, so no libc is needed.)
typedef unsigned int u32;
typedef unsigned long long u64;

#define N 4096
static unsigned char sieve[N];
static u32 arr[512];
static u32 ma[16][16], mb[16][16], mc[16][16];

static u32 primes(void) {
	u32 count = 0;
	for (u32 i = 0; i < N; i++) sieve[i] = 1;
	for (u32 i = 2; i < N; i++) {
		if (!sieve[i]) continue;
		count++;
		for (u32 j = i * 2; j < N; j += i) sieve[j] = 0;
	}
	return count;
}

static u32 sort(u32 seed) {
	u32 x = seed | 1;
	for (u32 i = 0; i < 512; i++) {
		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		arr[i] = x;
	}
	for (u32 i = 1; i < 512; i++) {
		u32 v = arr[i], j = i;
		while (j > 0 && arr[j - 1] > v) { arr[j] = arr[j - 1]; j--; }
		arr[j] = v;
	}
	return arr[0] ^ arr[511] ^ arr[256];
}

static u32 matmul(u32 seed) {
	for (u32 i = 0; i < 16; i++)
		for (u32 j = 0; j < 16; j++) {
			ma[i][j] = (i * 31 + j + seed) & 255;
			mb[i][j] = (j * 17 + i + seed) & 255;
		}
	u32 sum = 0;
	for (u32 i = 0; i < 16; i++)
		for (u32 j = 0; j < 16; j++) {
			u32 acc = 0;
			for (u32 k = 0; k < 16; k++) acc += ma[i][k] * mb[k][j];
			mc[i][j] = acc;
			sum += acc;
		}
	return sum;
}

static u64 collatz(u32 limit) {
	u64 steps = 0;
	for (u32 n = 1; n < limit; n++) {
		u64 x = n;
		while (x != 1) { x = (x & 1) ? 3 * x + 1 : x / 2; steps++; }
	}
	return steps;
}

u64 run(u32 n) {
	u64 h = 0;
	for (u32 i = 0; i < n; i++) {
		h = h * 1099511628211ULL + primes();
		h = h * 1099511628211ULL + sort(i + 1);
		h = h * 1099511628211ULL + matmul(i);
		h = h * 1099511628211ULL + collatz(200 + i);
	}
	return h;
}
