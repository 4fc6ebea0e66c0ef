/* The CPU backend: the CPU ops of one path (stride/cpu_path.h) behind the backend table. */
#ifndef STRIDE_BACKEND_CPU_H
#define STRIDE_BACKEND_CPU_H

#include "stride/backend.h"

/* On the fast path; st_backend_cpu_init_path (stride/cpu_path.h) chooses. */
st_status st_backend_cpu_init(st_backend **out, st_error *err);

#endif
