/* What the kernel benchmarks of bench/kernels share: the backend they measure on (g_b)
 * and helpers that end the program with a message on any failure (a benchmark has
 * nothing to recover). A program sets g_bench_name, then g_b from st_backend_init. */
#ifndef STRIDE_KERNEL_BENCH_H
#define STRIDE_KERNEL_BENCH_H

#include <stdio.h>
#include <stdlib.h>

#include "stride/backend.h"

static const char *g_bench_name = "bench";
static st_backend *g_b;

static void die(const char *what, const st_error *err) {
    fprintf(stderr, "%s: %s: %s\n", g_bench_name, what, err ? err->message : "");
    exit(1);
}

static void check(st_status s, const char *what, const st_error *err) {
    if (s != ST_OK) die(what, err);
}

static void *dev_alloc(size_t bytes) {
    st_error err = {};
    void *p = NULL;
    check(g_b->iface->alloc(g_b, bytes, &p, &err), "alloc", &err);
    return p;
}

static void dev_write(void *dst, const void *src, size_t n) {
    st_error err = {};
    check(g_b->iface->write(g_b, dst, src, n, &err), "write", &err);
}

#endif /* STRIDE_KERNEL_BENCH_H */
