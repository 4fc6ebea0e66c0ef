/* The per-op profile's entries (stride/profile.h): a growable array searched by label. A
 * step has a few dozen distinct labels, so a linear search costs nothing beside the ops. */
#include "stride/profile.h"

#include <stdlib.h>
#include <string.h>

void st_profile_free(st_profile *p) {
    if (!p) return;
    free(p->entries);
    memset(p, 0, sizeof(*p));
}

static st_profile_entry *entry_for(st_profile *p, const char *label) {
    for (int i = 0; i < p->n_entries; i++)
        if (strncmp(p->entries[i].label, label, ST_PROFILE_LABEL - 1) == 0) return &p->entries[i];
    if (p->n_entries == p->cap_entries) {
        const int cap = p->cap_entries ? 2 * p->cap_entries : 64;
        st_profile_entry *e = (st_profile_entry *)realloc(p->entries, (size_t)cap * sizeof(*e));
        if (!e) return NULL;
        p->entries = e;
        p->cap_entries = cap;
    }
    st_profile_entry *e = &p->entries[p->n_entries++];
    memset(e, 0, sizeof(*e));
    strncpy(e->label, label, ST_PROFILE_LABEL - 1);
    return e;
}

void st_profile_add(st_profile *p, const char *label, double seconds, double bytes, double flops) {
    st_profile_entry *e = entry_for(p, label);
    if (!e) {
        p->failed = true;
        return;
    }
    e->calls++;
    e->seconds += seconds;
    e->bytes += bytes;
    e->flops += flops;
}

static int by_time(const void *a, const void *b) {
    const st_profile_entry *x = (const st_profile_entry *)a, *y = (const st_profile_entry *)b;
    if (x->seconds != y->seconds) return x->seconds > y->seconds ? -1 : 1;
    return strcmp(x->label, y->label);
}

void st_profile_sort(st_profile *p) {
    if (p->n_entries > 1) qsort(p->entries, (size_t)p->n_entries, sizeof(*p->entries), by_time);
}

double st_profile_seconds(const st_profile *p) {
    double s = 0.0;
    for (int i = 0; i < p->n_entries; i++) s += p->entries[i].seconds;
    return s;
}
