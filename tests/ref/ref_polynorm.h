/* Double-precision reference for PolyNorm (SPEC.md). rstd is formed in double and saved as f32,
 * as the kernels save it; outputs are formed in double from the saved f32 rstd and rounded to the
 * storage dtype (the spec's rd()). */
#ifndef REF_POLYNORM_H
#define REF_POLYNORM_H

#include "normgrad.h"

#include <stddef.h>

typedef struct ref_polynorm {
  size_t rows, n;
  float eps;
  ng_dtype x_dtype;
  const float *w; /* [3] */
  float b;
} ref_polynorm;

/* rstd[rows·3] = (rstd3, rstd2, rstd1) as f32. */
void ref_polynorm_stats(const ref_polynorm *p, const float *x, float *rstd);
/* y = rd(w0·x³·rstd3 + w1·x²·rstd2 + w2·x·rstd1 + b) from the given f32 rstd. */
void ref_polynorm_apply(const ref_polynorm *p, const float *x, const float *rstd, double *y);
/* dx (unrounded), dw[3] and db[1] (plus the inits when not NULL), dw_scale[3] and *db_scale
 * (sums of absolute terms), *dx_scale = the largest |term| of any dx. Outputs may be NULL. */
void ref_polynorm_backward(const ref_polynorm *p, const float *dy, const float *x,
                           const float *rstd, double *dx, double *dw, const float *dw_init,
                           double *db, const float *db_init, double *dw_scale, double *db_scale,
                           double *dx_scale);

#endif
