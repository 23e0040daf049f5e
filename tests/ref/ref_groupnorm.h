/* Double-precision reference for GroupNorm (SPEC.md). Statistics are formed in
 * double and saved as f32, as the kernels save them; outputs are formed in double from the saved
 * f32 statistics and rounded to the storage dtype (the spec's rd()). */
#ifndef REF_GROUPNORM_H
#define REF_GROUPNORM_H

#include "normgrad.h"

#include <stddef.h>

typedef struct ref_groupnorm {
  size_t B, C, S, G;
  float eps;
  ng_dtype x_dtype;
  const float *w, *b; /* [C] each, NULL = absent (w = 1, b = 0) */
} ref_groupnorm;

/* mean, rstd [B·G] (double statistics rounded to f32). */
void ref_groupnorm_stats(const ref_groupnorm *p, const float *x, float *mean, float *rstd);
/* y[B·C·S] = rd((x − mean)·rstd·w[c] + b[c]) from the given f32 statistics. */
void ref_groupnorm_apply(const ref_groupnorm *p, const float *x, const float *mean,
                         const float *rstd, double *y);
/* dx (unrounded), dw[C] and db[C] (unrounded sums, plus dw_init / db_init when not NULL),
 * dw_scale[C] = Σ|dy·xhat|, db_scale[C] = Σ|dy|, *dx_scale = the largest |term| of any dx.
 * Any output may be NULL. */
void ref_groupnorm_backward(const ref_groupnorm *p, const float *dy, const float *x,
                            const float *mean, const float *rstd, double *dx, double *dw,
                            const float *dw_init, double *db, const float *db_init,
                            double *dw_scale, double *db_scale, double *dx_scale);

#endif
