/* Defaults of the op parameters (stride/ops.h). */
#include <stddef.h>

#include "stride/ops.h"

st_rope_params st_rope_params_default(st_rope_mode mode, int32_t n_rot, float freq_base) {
    st_rope_params p = {
        .mode = mode,
        .n_rot = n_rot,
        .freq_base = freq_base,
        .freq_scale = 1.0f,
        .freq_factors = NULL,
        .attn_factor = 1.0f,
    };
    return p;
}
