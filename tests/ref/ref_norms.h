/* Double-precision references for the norm ops, reproducing SPEC.md's rounding points: values
 * that the spec rounds (rd) are formed in f32 exactly as the kernels form them and rounded to the
 * storage dtype; reductions and everything else are in double. */
#ifndef REF_NORMS_H
#define REF_NORMS_H

#include "normgrad.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct ref_rmsnorm {
  size_t rows, n;
  float eps, offset;
  ng_casting_mode mode;
  ng_dtype x_dtype, w_dtype;
  const float *w; /* NULL = no weight */
} ref_rmsnorm;

/* y[rows·n] (values as stored: rounded to x_dtype), rstd[rows] (the f32 value saved). */
void ref_rmsnorm_forward(const ref_rmsnorm *p, const float *x, double *y, float *rstd);
/* dx[rows·n] (unrounded), dw[n] (unrounded sum; dw_init added when not NULL), dw_scale[n] =
 * Σ|dy·xhat| per column and *dx_scale = the largest |term| of any dx (for tolerances: dx
 * cancels). Any output may be NULL. */
void ref_rmsnorm_backward(const ref_rmsnorm *p, const float *dy, const float *x,
                          const float *rstd, double *dx, double *dw, const float *dw_init,
                          double *dw_scale, double *dx_scale);

#endif
