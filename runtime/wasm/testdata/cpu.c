// CPU-bound C program for the metered-vs-native benchmark: built both
// natively and for wasm32-wasi by the benchmark itself (clang -O2), so the
// two differ only in where they run. No libc work in the hot loops (its own
// heap sort and sieve), so the C library does not skew the comparison.
// stdin: N (default 1000000); prints a line both builds must agree on.
#include <stdio.h>
#include <stdlib.h>

static void sift(unsigned *a, long root, long end) {
	while (2 * root + 1 <= end) {
		long child = 2 * root + 1, swap = root;
		if (a[swap] < a[child]) swap = child;
		if (child + 1 <= end && a[swap] < a[child + 1]) swap = child + 1;
		if (swap == root) return;
		unsigned t = a[root]; a[root] = a[swap]; a[swap] = t;
		root = swap;
	}
}

static void heapsort(unsigned *a, long n) {
	for (long start = (n - 2) / 2; start >= 0; start--) sift(a, start, n - 1);
	for (long end = n - 1; end > 0; end--) {
		unsigned t = a[end]; a[end] = a[0]; a[0] = t;
		sift(a, 0, end - 1);
	}
}

static unsigned primes(unsigned limit, unsigned char *sieve) {
	unsigned count = 0;
	for (unsigned i = 0; i < limit; i++) sieve[i] = 1;
	for (unsigned i = 2; i < limit; i++) {
		if (!sieve[i]) continue;
		count++;
		for (unsigned long j = 2UL * i; j < limit; j += i) sieve[j] = 0;
	}
	return count;
}

int main(void) {
	char line[64];
	long n = 1000000;
	if (fgets(line, sizeof line, stdin)) n = strtol(line, NULL, 10);
	if (n < 2) n = 2;
	unsigned *v = malloc(n * sizeof *v);
	unsigned char *sieve = malloc(n * 4);
	if (!v || !sieve) return 1;
	unsigned x = 2463534242u;
	for (long i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; v[i] = x; }
	heapsort(v, n);
	unsigned long long h = 0;
	for (long i = 0; i < n; i++) h = h * 31 + v[i];
	printf("n=%ld min=%u max=%u hash=%llu primes=%u\n", n, v[0], v[n - 1], h, primes((unsigned)(n * 4), sieve));
	return 0;
}
