// WASI guest in C for the fuel tests: reads stdin, prints to stdout.
// Rebuild: clang --target=wasm32-wasi -O2 -Wl,--strip-all -o cwasi.wasm cwasi.c
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
	return (x > y) - (x < y);
}

int main(void) {
	char line[256];
	unsigned n = 1000;
	if (fgets(line, sizeof line, stdin)) n = (unsigned)strtoul(line, NULL, 10);
	unsigned *v = malloc(n * sizeof *v);
	unsigned x = 2463534242u;
	for (unsigned i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; v[i] = x; }
	qsort(v, n, sizeof *v, cmp);
	unsigned long long h = 0;
	for (unsigned i = 0; i < n; i++) h = h * 31 + v[i];
	printf("n=%u min=%u max=%u hash=%llu\n", n, v[0], v[n - 1], h);
	free(v);
	return 0;
}
