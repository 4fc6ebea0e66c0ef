/* stride: the one monotonic clock the library and the tools read (host wall time). */
#ifndef STRIDE_CLOCK_H
#define STRIDE_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds on a monotonic clock with an arbitrary origin: for differences only. */
double st_clock_seconds(void);

#ifdef __cplusplus
}
#endif

#endif /* STRIDE_CLOCK_H */
