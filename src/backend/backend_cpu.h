/* The CPU backend: the reference ops of cpu_ops.h behind the backend table. */
#ifndef STRIDE_BACKEND_CPU_H
#define STRIDE_BACKEND_CPU_H

#include "stride/backend.h"

st_status st_backend_cpu_init(st_backend **out, st_error *err);

#endif
