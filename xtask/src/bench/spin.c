/* cargo xtask bench overhead: a CPU-bound thread for the per-sample cost table (sample_cost.rs).
 * a() -> b() -> c() spin; every 250 ms of wall time it prints
 * "monotonic_ns units thread_cpu_ns", so its work per CPU second can be read over any part of
 * its run. Built -O2 -fomit-frame-pointer, as distribution binaries are. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t __attribute__((noinline)) c(uint64_t x) {
	for (int i = 0; i < 1000; i++)
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	return x;
}
static uint64_t __attribute__((noinline)) b(uint64_t x) { return c(x) ^ 1; }
static uint64_t __attribute__((noinline)) a(uint64_t x) { return b(x) + 1; }

static uint64_t ns(clockid_t clock) {
	struct timespec t;
	clock_gettime(clock, &t);
	return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv) {
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	uint64_t start = ns(CLOCK_MONOTONIC), end = start + (uint64_t)(seconds * 1e9);
	uint64_t next = start, x = 1, units = 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (;;) {
		x = a(x);
		if ((++units & 63) == 0) {
			uint64_t now = ns(CLOCK_MONOTONIC);
			if (now >= next) {
				printf("%llu %llu %llu\n", (unsigned long long)now, (unsigned long long)units,
				       (unsigned long long)ns(CLOCK_THREAD_CPUTIME_ID));
				next += 250000000ULL;
				if (now >= end)
					break;
			}
		}
	}
	return (int)(x & 1);
}
