/*
 * Shared by the fast-path tests (test_cpu_fast_*.c): the variants this machine runs, and
 * a workspace. Every fast op is checked in every variant the CPU supports (on an
 * AVX-512 machine: avx512, avx2 and generic), against a float64 reference or the
 * reference op, with bounds derived in each test file.
 */
#ifndef TEST_CPU_FAST_COMMON_H
#define TEST_CPU_FAST_COMMON_H

#include <stdio.h>

#include "cpu_fast/cpu_fast.h"

typedef struct tf_variants {
    int n;
    const st_cpu_op_table *ops[ST_CPU_ISA_COUNT];
} tf_variants;

/* The variants this CPU runs. The generic one runs everywhere, and the best one is
 * among them: a test over an empty list cannot pass silently. */
static inline tf_variants tf_variants_get(void) {
    tf_variants v = {0};
    for (int i = 0; i < ST_CPU_ISA_COUNT; i++) {
        const st_cpu_op_table *t = st_cpu_ops_fast((st_cpu_isa)i);
        if (t) v.ops[v.n++] = t;
    }
    return v;
}

/* A workspace that starts small, so that the ops' growth paths run. */
static inline st_cpu_ws tf_ws(void) {
    st_cpu_ws ws = {0};
    return ws;
}

#endif /* TEST_CPU_FAST_COMMON_H */
