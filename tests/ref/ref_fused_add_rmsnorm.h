/* Double-precision reference of fused add + RMSNorm (SPEC.md): RMSNorm's reference applied to
 * s = rd(x + residual), whose f32 add and rounding it reproduces exactly. */
#ifndef REF_FUSED_ADD_RMSNORM_H
#define REF_FUSED_ADD_RMSNORM_H

#include "ref_norms.h"

/* s[rows·n] (exact: the stored values), y[rows·n] (rounded to x_dtype), rstd[rows]. */
void ref_fused_add_rmsnorm_forward(const ref_rmsnorm *p, const float *x, const float *residual,
                                   float *s, double *y, float *rstd);
/* dx = RMSNormBackward(dy; s, rstd) + ds_out (ds_out NULL = none), unrounded; dw and the scales
 * as ref_rmsnorm_backward (dx_scale includes |ds_out|). Any output may be NULL. */
void ref_fused_add_rmsnorm_backward(const ref_rmsnorm *p, const float *dy, const float *ds_out,
                                    const float *s, const float *rstd, double *dx, double *dw,
                                    const float *dw_init, double *dw_scale, double *dx_scale);

#endif
