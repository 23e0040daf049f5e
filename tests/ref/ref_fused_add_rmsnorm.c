#include "ref_fused_add_rmsnorm.h"
#include "ng_test.h"

#include <math.h>

void ref_fused_add_rmsnorm_forward(const ref_rmsnorm *p, const float *x, const float *residual,
                                   float *s, double *y, float *rstd) {
  const size_t cnt = p->rows * p->n;
  for (size_t i = 0; i < cnt; i++) s[i] = ng_h_rd(p->x_dtype, x[i] + residual[i]); /* f32 add */
  ref_rmsnorm_forward(p, s, y, rstd);
}

void ref_fused_add_rmsnorm_backward(const ref_rmsnorm *p, const float *dy, const float *ds_out,
                                    const float *s, const float *rstd, double *dx, double *dw,
                                    const float *dw_init, double *dw_scale, double *dx_scale) {
  ref_rmsnorm_backward(p, dy, s, rstd, dx, dw, dw_init, dw_scale, dx_scale);
  if (!ds_out) return;
  const size_t cnt = p->rows * p->n;
  double mx = 0;
  for (size_t i = 0; i < cnt; i++) {
    if (dx) dx[i] += ds_out[i];
    mx = fmax(mx, fabs(ds_out[i]));
  }
  if (dx_scale) *dx_scale += mx;
}
