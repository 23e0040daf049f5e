#include "ref_groupnorm.h"
#include "ng_test.h"

#include <math.h>

void ref_groupnorm_stats(const ref_groupnorm *p, const float *x, float *mean, float *rstd) {
  const size_t cg = p->C / p->G, n = cg * p->S;
  for (size_t blk = 0; blk < p->B * p->G; blk++) {
    const float *xb = x + blk * n;
    double s = 0, v = 0;
    for (size_t i = 0; i < n; i++) s += xb[i];
    const double m = s / (double)n;
    for (size_t i = 0; i < n; i++) v += (xb[i] - m) * (xb[i] - m);
    mean[blk] = (float)m;
    rstd[blk] = (float)(1.0 / sqrt(v / (double)n + (double)p->eps));
  }
}

void ref_groupnorm_apply(const ref_groupnorm *p, const float *x, const float *mean,
                         const float *rstd, double *y) {
  const size_t cg = p->C / p->G;
  for (size_t b = 0; b < p->B; b++)
    for (size_t c = 0; c < p->C; c++) {
      const size_t blk = b * p->G + c / cg, o = (b * p->C + c) * p->S;
      const double w = p->w ? p->w[c] : 1.0, bb = p->b ? p->b[c] : 0.0;
      for (size_t s = 0; s < p->S; s++) {
        const double v = ((double)x[o + s] - mean[blk]) * rstd[blk] * w + bb;
        y[o + s] = ng_h_rd(p->x_dtype, (float)v);
      }
    }
}

void ref_groupnorm_backward(const ref_groupnorm *p, const float *dy, const float *x,
                            const float *mean, const float *rstd, double *dx, double *dw,
                            const float *dw_init, double *db, const float *db_init,
                            double *dw_scale, double *db_scale, double *dx_scale) {
  const size_t cg = p->C / p->G, S = p->S, n = cg * S;
  for (size_t c = 0; c < p->C; c++) {
    if (dw) dw[c] = dw_init ? dw_init[c] : 0.0;
    if (db) db[c] = db_init ? db_init[c] : 0.0;
    if (dw_scale) dw_scale[c] = 0;
    if (db_scale) db_scale[c] = 0;
  }
  if (dx_scale) *dx_scale = 0;
  for (size_t blk = 0; blk < p->B * p->G; blk++) {
    const size_t c0 = (blk % p->G) * cg, base = blk * n;
    const double mu = mean[blk], rs = rstd[blk];
    double a1 = 0, a2 = 0;
    for (size_t i = 0; i < n; i++) {
      const size_t c = c0 + i / S;
      const double w = p->w ? p->w[c] : 1.0, xh = (x[base + i] - mu) * rs, d = dy[base + i];
      a1 += xh * w * d;
      a2 += w * d;
      if (dw) dw[c] += d * xh;
      if (db) db[c] += d;
      if (dw_scale) dw_scale[c] += fabs(d * xh);
      if (db_scale) db_scale[c] += fabs(d);
    }
    const double c1 = a1 / (double)n, c2 = a2 / (double)n;
    for (size_t i = 0; i < n; i++) {
      const size_t c = c0 + i / S;
      const double w = p->w ? p->w[c] : 1.0, xh = (x[base + i] - mu) * rs, g = w * dy[base + i];
      if (dx) dx[base + i] = (g - xh * c1 - c2) * rs;
      if (dx_scale) *dx_scale = fmax(*dx_scale, (fabs(g) + fabs(xh * c1) + fabs(c2)) * rs);
    }
  }
}
