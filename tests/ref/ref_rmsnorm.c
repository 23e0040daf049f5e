#include "ref_norms.h"
#include "ng_test.h"

#include <math.h>
#include <stdlib.h>

static float wprime(const ref_rmsnorm *p, size_t j) {
  return p->w ? p->offset + p->w[j] : 1.0f; /* an f32 add, as in the kernel */
}

void ref_rmsnorm_forward(const ref_rmsnorm *p, const float *x, double *y, float *rstd) {
  const ng_dtype xd = p->x_dtype;
  for (size_t r = 0; r < p->rows; r++) {
    const float *xr = x + r * p->n;
    double ss = 0;
    for (size_t j = 0; j < p->n; j++) ss += (double)xr[j] * xr[j];
    float rs = (float)(1.0 / sqrt(ss / (double)p->n + (double)p->eps));
    if (p->mode == NG_CAST_NONE) rs = ng_h_rd(xd, rs);
    rstd[r] = rs;
    for (size_t j = 0; j < p->n; j++) {
      float wp = wprime(p, j), out;
      if (p->mode == NG_CAST_GEMMA) {
        out = (float)((double)xr[j] * rs * wp);
      } else {
        if (p->mode == NG_CAST_NONE && p->w) wp = ng_h_rd(xd, wp);
        out = ng_h_rd(xd, xr[j] * rs) * wp;
      }
      y[r * p->n + j] = ng_h_rd(xd, out);
    }
  }
}

void ref_rmsnorm_backward(const ref_rmsnorm *p, const float *dy, const float *x,
                          const float *rstd, double *dx, double *dw, const float *dw_init,
                          double *dw_scale, double *dx_scale) {
  const size_t n = p->n;
  if (dw)
    for (size_t j = 0; j < n; j++) dw[j] = dw_init ? dw_init[j] : 0.0;
  if (dw_scale)
    for (size_t j = 0; j < n; j++) dw_scale[j] = 0;
  if (dx_scale) *dx_scale = 0;
  for (size_t r = 0; r < p->rows; r++) {
    const float *xr = x + r * n, *dyr = dy + r * n;
    const double rs = rstd[r];
    double dot = 0;
    for (size_t j = 0; j < n; j++) dot += (double)dyr[j] * wprime(p, j) * xr[j];
    const double c = rs * rs * rs / (double)n * dot;
    for (size_t j = 0; j < n; j++) {
      if (dx) dx[r * n + j] = rs * dyr[j] * wprime(p, j) - c * xr[j];
      if (dx_scale)
        *dx_scale = fmax(*dx_scale, fabs(rs * dyr[j] * wprime(p, j)) + fabs(c * xr[j]));
      double xh = p->mode == NG_CAST_LLAMA ? ng_h_rd(p->x_dtype, xr[j] * rstd[r])
                                            : (double)xr[j] * rs;
      if (dw) dw[j] += dyr[j] * xh;
      if (dw_scale) dw_scale[j] += fabs(dyr[j] * xh);
    }
  }
}
