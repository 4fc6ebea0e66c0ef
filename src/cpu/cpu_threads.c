/* Thread count of the CPU ops. The one place in src/cpu/ that names OpenMP's runtime:
 * the ops themselves only carry `#pragma omp` lines, which a compiler without OpenMP
 * ignores, so this wrapper is where the build without OpenMP has to be handled. */
#include "stride/cpu_ops.h"

#ifdef _OPENMP
#include <omp.h>
#endif

void st_cpu_set_threads(int n) {
#ifdef _OPENMP
    if (n <= 0) n = omp_get_num_procs();
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

int st_cpu_get_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
