#include "ref_layernorm.h"
#include "ng_test.h"

#include <math.h>

void ref_layernorm_forward(const ref_layernorm *p, const float *x, double *y, double *y_scale,
                           float *mean, float *rstd) {
  const size_t n = p->n;
  for (size_t r = 0; r < p->rows; r++) {
    const float *xr = x + r * n;
    double mu = 0, var = 0;
    for (size_t j = 0; j < n; j++) mu += xr[j];
    mu /= (double)n;
    for (size_t j = 0; j < n; j++) var += ((double)xr[j] - mu) * ((double)xr[j] - mu);
    var /= (double)n;
    const double rs = 1.0 / sqrt(var + (double)p->eps);
    mean[r] = (float)mu;
    rstd[r] = (float)rs;
    for (size_t j = 0; j < n; j++) {
      const double xh = ((double)xr[j] - mu) * rs;
      const double w = p->w ? p->w[j] : 1.0, b = p->b ? p->b[j] : 0.0;
      y[r * n + j] = ng_h_rd(p->x_dtype, (float)(xh * w + b));
      if (y_scale) y_scale[r * n + j] = fabs(xh * w) + fabs(b);
    }
  }
}

void ref_layernorm_backward(const ref_layernorm *p, const float *dy, const float *x,
                            const float *mean, const float *rstd, double *dx, double *dw,
                            const float *dw_init, double *db, const float *db_init,
                            double *dw_scale, double *db_scale, double *dx_scale) {
  const size_t n = p->n;
  for (size_t j = 0; j < n; j++) {
    if (dw) dw[j] = dw_init ? dw_init[j] : 0.0;
    if (db) db[j] = db_init ? db_init[j] : 0.0;
    if (dw_scale) dw_scale[j] = 0;
    if (db_scale) db_scale[j] = 0;
  }
  if (dx_scale) *dx_scale = 0;
  for (size_t r = 0; r < p->rows; r++) {
    const float *xr = x + r * n, *dyr = dy + r * n;
    const double mu = mean[r], rs = rstd[r];
    double c1 = 0, c2 = 0;
    for (size_t j = 0; j < n; j++) {
      const double g = (double)dyr[j] * (p->w ? p->w[j] : 1.0);
      c1 += ((double)xr[j] - mu) * rs * g;
      c2 += g;
    }
    c1 /= (double)n;
    c2 /= (double)n;
    for (size_t j = 0; j < n; j++) {
      const double g = (double)dyr[j] * (p->w ? p->w[j] : 1.0);
      const double xh = ((double)xr[j] - mu) * rs;
      if (dx) dx[r * n + j] = (g - xh * c1 - c2) * rs;
      if (dx_scale)
        *dx_scale = fmax(*dx_scale, (fabs(g) + fabs(xh * c1) + fabs(c2)) * rs);
      if (dw) dw[j] += dyr[j] * xh;
      if (db) db[j] += dyr[j];
      if (dw_scale) dw_scale[j] += fabs(dyr[j] * xh);
      if (db_scale) db_scale[j] += fabs(dyr[j]);
    }
  }
}
