/* Which NCCL this build links (tp.h), asked of the library itself, so that building this
 * file checks the link. No communicator is created: driving N GPUs is not built yet. */
#include "stride/tp.h"

#if defined(STRIDE_HAVE_NCCL)
#include <nccl.h>

bool st_tp_nccl_version(int *version) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return false;
    *version = v;
    return true;
}
#else
bool st_tp_nccl_version(int *version) {
    *version = 0;
    return false;
}
#endif
