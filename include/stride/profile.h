/*
 * stride: a per-op profile of a model's steps (`stride bench --profile`).
 *
 * While a profile is set on a backend (st_backend_set_profile), st_backend_compute times
 * every op of each graph it computes on its own and adds the time to the profile's entry
 * for the op's label: the op as the backend ran it (a fused product with its norm and
 * epilogue, a rope-attention, a plain node), its weight type and shape, e.g.
 *   "mul_mat+norm f16 K=2048 N=3072"   "rope+attention hd=64 H=32/8"   "rms_norm D=2048"
 * so that the layers' identical ops add up in one entry. Each entry carries the bytes the
 * op must move and the FLOPs it must do (the weights once, the activations, the keys and
 * values it attends over), from which a report forms the op's roofline time.
 *
 * Profiled steps run differently from timed ones: the CUDA backend runs the ops without
 * its recorded graphs and with a timing event on each side of every op (so no op overlaps
 * the next), with the host queueing the step ahead of the device. The sum of the entries
 * is the device time of the ops alone; a step's timed figure minus that sum is what
 * launches and gaps cost.
 */
#ifndef STRIDE_PROFILE_H
#define STRIDE_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ST_PROFILE_LABEL 96

typedef struct st_profile_entry {
    char label[ST_PROFILE_LABEL];
    int64_t calls;  /* times the op ran, over every profiled step */
    double seconds; /* device time, summed over the calls */
    double bytes;   /* bytes the calls must move at the least, summed */
    double flops;   /* floating-point operations of the calls, summed */
} st_profile_entry;

/* A zeroed st_profile is an empty one; st_profile_free releases its entries. */
typedef struct st_profile {
    st_profile_entry *entries; /* in order of first appearance (st_profile_sort: by time) */
    int n_entries, cap_entries;
    int64_t steps; /* graphs computed while the profile was set */
    bool failed;   /* an entry could not be added (out of memory): the profile is partial */
} st_profile;

void st_profile_free(st_profile *p);

/* Adds one call of the op `label` (truncated to ST_PROFILE_LABEL - 1 characters). */
void st_profile_add(st_profile *p, const char *label, double seconds, double bytes, double flops);

/* Entries by time, the longest first (ties by label). */
void st_profile_sort(st_profile *p);

/* The sums over every entry. */
double st_profile_seconds(const st_profile *p);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_PROFILE_H */
