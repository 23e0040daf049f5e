#include "ref_polynorm.h"
#include "ng_test.h"

#include <math.h>

void ref_polynorm_stats(const ref_polynorm *p, const float *x, float *rstd) {
  for (size_t r = 0; r < p->rows; r++) {
    double s[4] = {0, 0, 0, 0};
    for (size_t j = 0; j < p->n; j++) {
      const double v = x[r * p->n + j], v2 = v * v;
      s[1] += v2, s[2] += v2 * v2, s[3] += v2 * v2 * v2;
    }
    for (int q = 1; q <= 3; q++)
      rstd[r * 3 + (3 - q)] = (float)(1.0 / sqrt(s[q] / (double)p->n + (double)p->eps));
  }
}

void ref_polynorm_apply(const ref_polynorm *p, const float *x, const float *rstd, double *y) {
  for (size_t r = 0; r < p->rows; r++) {
    const double r3 = rstd[r * 3], r2 = rstd[r * 3 + 1], r1 = rstd[r * 3 + 2];
    for (size_t j = 0; j < p->n; j++) {
      const double v = x[r * p->n + j];
      const double out = p->w[0] * v * v * v * r3 + p->w[1] * v * v * r2 + p->w[2] * v * r1 + p->b;
      y[r * p->n + j] = ng_h_rd(p->x_dtype, (float)out);
    }
  }
}

void ref_polynorm_backward(const ref_polynorm *p, const float *dy, const float *x,
                           const float *rstd, double *dx, double *dw, const float *dw_init,
                           double *db, const float *db_init, double *dw_scale, double *db_scale,
                           double *dx_scale) {
  const size_t n = p->n;
  for (int q = 0; q < 3; q++) {
    if (dw) dw[q] = dw_init ? dw_init[q] : 0.0;
    if (dw_scale) dw_scale[q] = 0;
  }
  if (db) *db = db_init ? db_init[0] : 0.0;
  if (db_scale) *db_scale = 0;
  if (dx_scale) *dx_scale = 0;
  for (size_t r = 0; r < p->rows; r++) {
    const float *xr = x + r * n, *dr = dy + r * n;
    /* rs[p] = rstd_p, w_of[p] = the weight paired with power p */
    const double rs[4] = {0, rstd[r * 3 + 2], rstd[r * 3 + 1], rstd[r * 3]};
    const double wp[4] = {0, p->w[2], p->w[1], p->w[0]};
    double S[4] = {0, 0, 0, 0}, Sa[4] = {0, 0, 0, 0};
    for (size_t j = 0; j < n; j++) {
      const double v = xr[j], pw[4] = {1, v, v * v, v * v * v};
      for (int q = 1; q <= 3; q++) {
        S[q] += dr[j] * pw[q];
        Sa[q] += fabs(dr[j] * pw[q]);
      }
    }
    for (size_t j = 0; j < n; j++) {
      const double xv = xr[j],
                   pw[6] = {
                       1, xv, xv * xv, xv * xv * xv, xv * xv * xv * xv, xv * xv * xv * xv * xv};
      double v = 0, big = 0;
      for (int q = 1; q <= 3; q++) {
        const double t1 = wp[q] * q * pw[q - 1] * rs[q] * dr[j];
        const double t2 = wp[q] * (q / (double)n) * pw[2 * q - 1] * rs[q] * rs[q] * rs[q] * S[q];
        v += t1 - t2;
        big += fabs(t1) + fabs(t2);
      }
      if (dx) dx[r * n + j] = v;
      if (dx_scale) *dx_scale = fmax(*dx_scale, big);
      if (db) *db += dr[j];
      if (db_scale) *db_scale += fabs(dr[j]);
    }
    for (int q = 1; q <= 3; q++) {
      if (dw) dw[3 - q] += rs[q] * S[q];
      if (dw_scale) dw_scale[3 - q] += rs[q] * Sa[q];
    }
  }
}
