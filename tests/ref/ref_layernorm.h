/* Double-precision reference of LayerNorm (SPEC.md): statistics and the backward in double, y
 * rounded once to the storage dtype. */
#ifndef REF_LAYERNORM_H
#define REF_LAYERNORM_H

#include "normgrad.h"

#include <stddef.h>

typedef struct ref_layernorm {
  size_t rows, n;
  float eps;
  ng_dtype x_dtype;
  const float *w, *b; /* NULL = absent */
} ref_layernorm;

/* y[rows·n] (rounded to x_dtype; y_scale[i] = |xhat·w| + |b| when not NULL, for tolerances),
 * mean[rows] and rstd[rows] (the f32 values to save, from double statistics). */
void ref_layernorm_forward(const ref_layernorm *p, const float *x, double *y, double *y_scale,
                           float *mean, float *rstd);
/* From the saved f32 mean and rstd: dx[rows·n] (unrounded), dw[n] and db[n] (dw_init/db_init
 * added when not NULL), dw_scale[n] = Σ|dy·xhat|, db_scale[n] = Σ|dy|, *dx_scale = the largest
 * |term| of any dx. Any output may be NULL. */
void ref_layernorm_backward(const ref_layernorm *p, const float *dy, const float *x,
                            const float *mean, const float *rstd, double *dx, double *dw,
                            const float *dw_init, double *db, const float *db_init,
                            double *dw_scale, double *db_scale, double *dx_scale);

#endif
