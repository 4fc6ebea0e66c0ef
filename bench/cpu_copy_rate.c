/*
 * bench_cpu_copy_rate: the memory rates behind a CPU decode roofline.
 *
 *   copy   memcpy of a buffer much larger than the last-level cache, each thread its own
 *          contiguous slice: reported as bytes copied per second and as memory traffic
 *          (each byte read once and written once: twice the bytes copied), the way a
 *          GPU's device-to-device copy rate is usually quoted;
 *   read   a read-only pass over the same buffer (64-bit loads summed): the rate a kernel
 *          that only streams weights can reach at best.
 * For 1 .. max threads, best and median of the repetitions, in GB/s (10^9 B/s). A
 * token's roofline is then (weight bytes read once) / rate.
 *
 * usage: bench_cpu_copy_rate [--mib N] [--reps N] [--max-threads N]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_REPS 64

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The slice [off, off + len) of thread id among nt. */
static void slice(size_t bytes, int nt, int id, size_t *off, size_t *len) {
    const size_t part = bytes / (size_t)nt / 64 * 64;
    *off = part * (size_t)id;
    *len = id == nt - 1 ? bytes - *off : part;
}

static double copy_once(uint8_t *dst, const uint8_t *src, size_t bytes, int nt) {
    const double t0 = now_s();
#pragma omp parallel num_threads(nt)
    {
#ifdef _OPENMP
        const int id = omp_get_thread_num();
#else
        const int id = 0;
#endif
        size_t off, len;
        slice(bytes, nt, id, &off, &len);
        memcpy(dst + off, src + off, len);
    }
    return now_s() - t0;
}

static double read_once(const uint8_t *src, size_t bytes, int nt, uint64_t *sink) {
    uint64_t total = 0;
    const double t0 = now_s();
#pragma omp parallel num_threads(nt) reduction(+ : total)
    {
#ifdef _OPENMP
        const int id = omp_get_thread_num();
#else
        const int id = 0;
#endif
        size_t off, len;
        slice(bytes, nt, id, &off, &len);
        const uint64_t *p = (const uint64_t *)(src + off);
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i + 4 <= len / 8; i += 4) {
            s0 += p[i];
            s1 += p[i + 1];
            s2 += p[i + 2];
            s3 += p[i + 3];
        }
        total += s0 + s1 + s2 + s3;
    }
    const double t = now_s() - t0;
    *sink += total;
    return t;
}

int main(int argc, char **argv) {
    size_t mib = 1024;
    int reps = 9, max_threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--mib") == 0) mib = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--max-threads") == 0) max_threads = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--mib N] [--reps N] [--max-threads N]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS || mib < 64) {
        fprintf(stderr, "bench_cpu_copy_rate: --reps 1..%d, --mib >= 64\n", MAX_REPS);
        return 2;
    }
#ifdef _OPENMP
    if (max_threads <= 0) max_threads = omp_get_num_procs();
#else
    max_threads = 1;
#endif
    const size_t bytes = mib << 20;
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        fprintf(stderr, "bench_cpu_copy_rate: no memory for 2 x %zu MiB\n", mib);
        return 1;
    }
    memset(a, 1, bytes); /* touch every page before timing */
    memset(b, 2, bytes);
    uint64_t sink = 0;
    printf("buffer %zu MiB, %d repetitions; GB/s = 10^9 B/s\n", mib, reps);
    printf("| threads | copy, bytes copied: best / median | copy, traffic (2x): best / median | read: best / "
           "median |\n|---|---|---|---|\n");
    for (int nt = 1; nt <= max_threads; nt++) {
        double copy[MAX_REPS], rd[MAX_REPS];
        for (int r = 0; r < reps; r++) { /* interleaved, so that a noisy moment hits both */
            copy[r] = (double)bytes / copy_once(b, a, bytes, nt) / 1e9;
            rd[r] = (double)bytes / read_once(a, bytes, nt, &sink) / 1e9;
        }
        qsort(copy, (size_t)reps, sizeof(double), cmp_double);
        qsort(rd, (size_t)reps, sizeof(double), cmp_double);
        printf("| %d | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f |\n", nt, copy[reps - 1], copy[reps / 2],
               2 * copy[reps - 1], 2 * copy[reps / 2], rd[reps - 1], rd[reps / 2]);
    }
    fprintf(stderr, "(checksum %llu)\n", (unsigned long long)sink);
    free(a);
    free(b);
    return 0;
}
