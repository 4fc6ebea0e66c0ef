/*
 * The calibration's statistics (median of paired ratios and its noise) and the decision
 * rule. Both are pure functions, documented in calibrate.h and tested table by table.
 */
#include "stride/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_sorted(const double *v, int n) {
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* At most this many samples are kept on the stack; callers pass a few dozen. */
#define STATS_MAX 256

void st_calibrate_ratio_stats(const double *ratios, int n, double *median, double *noise) {
    ST_ASSERT(ratios != NULL && n >= 1 && n <= STATS_MAX);
    double v[STATS_MAX], dev[STATS_MAX];
    memcpy(v, ratios, (size_t)n * sizeof(*v));
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    double med = median_sorted(v, n);
    *median = med;
    if (!noise) return;
    /* 1.4826 x MAD estimates sigma for normal noise; the median's standard error is
     * sqrt(pi/2) = 1.2533 times the mean's, sigma / sqrt(n). */
    for (int i = 0; i < n; i++) dev[i] = fabs(v[i] - med);
    qsort(dev, (size_t)n, sizeof(*dev), cmp_double);
    double sigma = 1.4826 * median_sorted(dev, n);
    *noise = 1.2533 * sigma / sqrt((double)n);
}

void st_calibrate_decide(double dec_ratio, double dec_noise, double pre_ratio, double pre_noise,
                         st_calib_verdict *out) {
    ST_ASSERT(out != NULL);
    memset(out, 0, sizeof(*out));
    if (!(dec_ratio > 0.0) || !(pre_ratio > 0.0) || !isfinite(dec_ratio) || !isfinite(pre_ratio) ||
        !(dec_noise >= 0.0) || !(pre_noise >= 0.0) || !isfinite(dec_noise) || !isfinite(pre_noise)) {
        out->pad = false;
        out->why = "no valid measurement";
        return;
    }
    double r = 0.5 * (dec_ratio + pre_ratio);
    out->gain = 1.0 / r - 1.0;
    out->noise = 0.5 * sqrt(dec_noise * dec_noise + pre_noise * pre_noise) / (r * r);
    double threshold = ST_CALIBRATE_SIGMAS * out->noise;
    if (threshold < ST_CALIBRATE_MIN_GAIN) threshold = ST_CALIBRATE_MIN_GAIN;
    if (dec_ratio > 1.0 + ST_CALIBRATE_MAX_LOSS) {
        out->why = "decode loses more than 2% when padded";
    } else if (pre_ratio > 1.0 + ST_CALIBRATE_MAX_LOSS) {
        out->why = "prefill loses more than 2% when padded";
    } else if (out->gain <= 0.0) {
        out->why = "padded is not faster";
    } else if (out->gain <= ST_CALIBRATE_MIN_GAIN && out->gain > ST_CALIBRATE_SIGMAS * out->noise) {
        out->why = "gain below the 1% floor";
    } else if (out->gain <= threshold) {
        out->why = "gain within noise";
    } else {
        out->pad = true;
        out->why = "padded faster beyond noise";
    }
}
