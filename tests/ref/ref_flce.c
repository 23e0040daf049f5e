/* Reference FLCE in double (see ref_flce.h). The loss follows torch's cross_entropy with label
 * smoothing: (1−ε)·nll + (ε/V)·smooth, smooth_i = −Σ_j w_j·log p_ij, both divided by
 * Σ_{non-ignored} w[target] under mean; the z-loss λ·lse² is unweighted and divided by the
 * non-ignored count. The gradient is derived term by term from that loss and checked against
 * finite differences of ref_flce_objective in the tests. */
#include "ref_flce.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct row_terms {
  double lse, ce, zl;
  int correct;
} row_terms;

/* logits row s (after bias and softcap) → loss terms and, when g is given, d(row loss)/ds times
 * the scales. */
static row_terms row_loss(const ref_flce *p, const double *s, int64_t t, double sce, double sz,
                          double *g, double *gabs) {
  const size_t v = p->v;
  double m = -INFINITY;
  size_t am = 0;
  for (size_t j = 0; j < v; j++)
    if (s[j] > m) m = s[j], am = j;
  double sum = 0;
  for (size_t j = 0; j < v; j++) sum += exp(s[j] - m);
  row_terms r;
  r.lse = m + log(sum);
  const double eps = p->label_smoothing;
  double wsum = 0, smooth = 0;
  for (size_t j = 0; j < v; j++) {
    const double wj = p->ce_weight ? p->ce_weight[j] : 1.0;
    wsum += wj;
    smooth += -wj * (s[j] - r.lse);
  }
  const double wt = p->ce_weight ? p->ce_weight[t] : 1.0;
  const double nll = -wt * (s[t] - r.lse);
  r.ce = (1 - eps) * nll + eps / (double)v * smooth;
  r.zl = p->lse_square_scale * r.lse * r.lse;
  r.correct = (int64_t)am == t;
  if (g) {
    for (size_t j = 0; j < v; j++) {
      const double pj = exp(s[j] - r.lse), wj = p->ce_weight ? p->ce_weight[j] : 1.0;
      double d = sce * ((1 - eps) * wt * (pj - ((int64_t)j == t ? 1.0 : 0.0)) +
                        eps / (double)v * (wsum * pj - wj));
      d += sz * 2 * p->lse_square_scale * r.lse * pj;
      g[j] = d;
      /* the size of the terms that make up g_j (they cancel under smoothing) */
      gabs[j] = fabs(sce) * ((1 - eps) * fabs(wt) * fabs(pj - ((int64_t)j == t ? 1.0 : 0.0)) +
                             eps / (double)v * (fabs(wsum) * pj + fabs(wj))) +
                fabs(sz * 2 * p->lse_square_scale * r.lse) * pj;
    }
  }
  return r;
}

/* Batch denominators: Σ w[target] and the count over non-ignored rows. */
static void denominators(const ref_flce *p, const int64_t *target, double *wtot, double *cnt) {
  *wtot = 0;
  *cnt = 0;
  for (size_t i = 0; i < p->bt; i++) {
    if (target[i] == p->ignore_index) continue;
    *cnt += 1;
    *wtot += p->ce_weight ? p->ce_weight[target[i]] : 1.0;
  }
}

static void logits_row(const ref_flce *p, const double *xr, const double *w, const double *bias,
                       double *z, double *s) {
  for (size_t j = 0; j < p->v; j++) {
    double acc = bias ? bias[j] : 0.0;
    for (size_t k = 0; k < p->h; k++) acc += xr[k] * w[j * p->h + k];
    z[j] = acc;
    s[j] = p->softcap > 0 ? p->softcap * tanh(acc / p->softcap) : acc;
  }
}

double ref_flce_objective(const ref_flce *p, const double *x, const double *w, const double *bias,
                          const int64_t *target) {
  double wtot, cnt;
  denominators(p, target, &wtot, &cnt);
  double *z = malloc(p->v * sizeof(double)), *s = malloc(p->v * sizeof(double));
  double ce = 0, zl = 0, weighted = 0;
  for (size_t i = 0; i < p->bt; i++) {
    if (target[i] == p->ignore_index) continue;
    logits_row(p, x + i * p->h, w, bias, z, s);
    row_terms r = row_loss(p, s, target[i], 0, 0, NULL, NULL);
    ce += r.ce;
    zl += r.zl;
    if (p->reduction == NG_REDUCTION_NONE) weighted += (r.ce + r.zl) * p->grad_output[i];
  }
  free(z);
  free(s);
  const double go = p->grad_output ? p->grad_output[0] : p->go_scalar;
  switch (p->reduction) {
  case NG_REDUCTION_MEAN: return go * ((wtot != 0 ? ce / wtot : 0) + (cnt != 0 ? zl / cnt : 0));
  case NG_REDUCTION_SUM: return go * (ce + zl);
  default: return weighted;
  }
}

void ref_flce_run(const ref_flce *p, const float *xf, const float *wf, const int64_t *target,
                  ref_flce_out *o) {
  const size_t bt = p->bt, h = p->h, v = p->v;
  double *x = malloc(bt * h * sizeof(double)), *w = malloc(v * h * sizeof(double));
  double *bias = p->bias ? malloc(v * sizeof(double)) : NULL;
  double *z = malloc(v * sizeof(double)), *s = malloc(v * sizeof(double));
  double *g = malloc(v * sizeof(double)), *ga = malloc(v * sizeof(double));
  for (size_t i = 0; i < bt * h; i++) x[i] = xf[i];
  for (size_t i = 0; i < v * h; i++) w[i] = wf[i];
  for (size_t j = 0; bias && j < v; j++) bias[j] = p->bias[j];

  double wtot, cnt;
  denominators(p, target, &wtot, &cnt);
  const double go = p->grad_output && p->reduction != NG_REDUCTION_NONE ? p->grad_output[0]
                                                                         : p->go_scalar;
  const bool none = p->reduction == NG_REDUCTION_NONE;
  if (o->dinput) memset(o->dinput, 0, bt * h * sizeof(double));
  if (o->dweight) memset(o->dweight, 0, v * h * sizeof(double));
  if (o->dbias) memset(o->dbias, 0, v * sizeof(double));
  if (o->dinput_scale) memset(o->dinput_scale, 0, bt * h * sizeof(double));
  if (o->dweight_scale) memset(o->dweight_scale, 0, v * h * sizeof(double));
  if (o->dbias_scale) memset(o->dbias_scale, 0, v * sizeof(double));
  o->logit_scale = 0;
  double ce_sum = 0, zl_sum = 0, correct = 0;
  for (size_t i = 0; i < bt; i++) {
    const double *xr = x + i * h;
    for (size_t j = 0; j < v; j++) {
      double a = bias ? fabs(bias[j]) : 0;
      for (size_t k = 0; k < h; k++) a += fabs(xr[k] * w[j * h + k]);
      if (a > o->logit_scale) o->logit_scale = a;
    }
    if (target[i] == p->ignore_index) {
      if (none) {
        if (o->loss) o->loss[i] = 0;
        if (o->z_loss) o->z_loss[i] = 0;
        if (o->accuracy) o->accuracy[i] = 0;
      }
      continue;
    }
    logits_row(p, xr, w, bias, z, s);
    double sce, sz;
    if (none) {
      sce = sz = p->grad_output[i];
    } else if (p->reduction == NG_REDUCTION_MEAN) {
      sce = wtot != 0 ? go / wtot : 0;
      sz = cnt != 0 ? go / cnt : 0;
    } else {
      sce = sz = go;
    }
    row_terms r = row_loss(p, s, target[i], sce, sz, g, ga);
    if (none) {
      if (o->loss) o->loss[i] = r.ce + r.zl;
      if (o->z_loss) o->z_loss[i] = r.zl;
      if (o->accuracy) o->accuracy[i] = r.correct;
    }
    ce_sum += r.ce;
    zl_sum += r.zl;
    correct += r.correct;
    /* softcap chain rule: ds/dz = 1 − tanh²(z/c) */
    if (p->softcap > 0)
      for (size_t j = 0; j < v; j++) {
        const double th = tanh(z[j] / p->softcap);
        g[j] *= 1 - th * th;
        ga[j] *= 1 - th * th;
      }
    for (size_t j = 0; j < v; j++) {
      const double *wr = w + j * h;
      if (o->dinput)
        for (size_t k = 0; k < h; k++) o->dinput[i * h + k] += g[j] * wr[k];
      if (o->dinput_scale)
        for (size_t k = 0; k < h; k++) o->dinput_scale[i * h + k] += ga[j] * fabs(wr[k]);
      if (o->dweight)
        for (size_t k = 0; k < h; k++) o->dweight[j * h + k] += g[j] * xr[k];
      if (o->dweight_scale)
        for (size_t k = 0; k < h; k++) o->dweight_scale[j * h + k] += ga[j] * fabs(xr[k]);
      if (o->dbias) o->dbias[j] += g[j];
      if (o->dbias_scale) o->dbias_scale[j] += ga[j];
    }
  }
  if (!none) {
    double ce = ce_sum, zl = zl_sum;
    if (p->reduction == NG_REDUCTION_MEAN) {
      ce = wtot != 0 ? ce_sum / wtot : 0;
      zl = cnt != 0 ? zl_sum / cnt : 0;
    }
    if (o->loss) o->loss[0] = ce + zl;
    if (o->z_loss) o->z_loss[0] = zl;
    if (o->accuracy) o->accuracy[0] = cnt != 0 ? correct / cnt : 0;
  }
  free(x), free(w), free(bias), free(z), free(s), free(g), free(ga);
}
