/* Checks the files of examples/data_parallel_step.c (tests/mpi/data_parallel.sh runs it):
 *
 *   dp_check --batch BT --hidden H --vocab V --seed S [--frozen] SINGLE DP [--expect-mismatch]
 *            [--identical OTHER]
 *
 * SINGLE is the run with one rank and one micro-batch (plain `mean` over the whole batch), DP a
 * run over several ranks and micro-batches. The batch is made again here with the example's own
 * generator (examples/synthetic_batch.h) and the step is computed in double precision
 * (tests/ref). Every gradient element and the loss of both files must lie within the bound below
 * of the double-precision value, and of each other; the largest difference between the files is
 * reported. With --expect-mismatch the two files must instead differ by more than 10 times the
 * bound somewhere (a negative control: DP ran with the wrong loss scaling), while SINGLE must
 * still match the double-precision step. --identical OTHER: every tensor that SINGLE and OTHER
 * both hold must have the same bits (a frozen norm weight changes nothing else).
 *
 * THE BOUND. The two runs evaluate the same expression; they differ only in the order of f32
 * additions: rows are summed per micro-batch, per GEMM tile, per persistent work-group, then over
 * micro-batches and over ranks (MPI_Allreduce); the per-row values (rstd, logits, softmax, the
 * gradient reaching the norm) may be tiled differently too. With u = 2^-24, a sum of K terms t_k
 * computed in any order is within (K−1)·u·Σ|t_k| of the exact sum to first order (Higham,
 * Accuracy and Stability of Numerical Algorithms, §4.2), so two orders differ by at most
 * 2·K·u·Σ|t_k|. Terms that are themselves computed carry their own relative perturbation e_i
 * (row i); summing the contributions:
 *   head dW[v,h]  ≤ Σ_i a_iv·|h_ih|·(2·BT·u + e_i)
 *   head db[v]    ≤ Σ_i a_iv·(2·BT·u + e_i)
 *   norm dW[h]    ≤ Σ_i |xhat_ih|·Σ_v a_iv·|W_vh|·(2·(BT + V)·u + e_i)   (the gradient reaching
 *                   the norm is itself a sum over V classes)
 *   loss          ≤ (1/N)·Σ_i (2·BT·u·ce_i + e_i)
 * where a_iv = (p_iv + [v = target_i])/N bounds |dloss/dz_iv| over its two terms, N is the number
 * of counted targets, h = RMSNorm(x) the head's input, and for a row whose largest logit
 * magnitude Σ_h|h_ih·W_vh| + |b_v| is L_i:
 *   e_i = u·(4·H·L_i + 2·(H + 10)·L_i + 8·(L_i + ln V) + 16):
 * logits are H-term sums (error ≤ H·u·L_i per run, and p = exp(z − lse) moves by twice that,
 * for two runs 4·H·u·L_i); rstd, xhat and h move by (H/2 + 5)·u relatively per run, so the
 * logits by that times L_i, twice; exp/log (≤ 3 ulp in OpenCL) and 1/N add the rest. The same
 * bound holds (with room) between each file and the exact value, which needs only one order.
 * It is a worst case: typical differences are orders of magnitude smaller (reported as "of
 * bound"); but no plausible mistake (a row lost or counted twice, a micro-batch not accumulated,
 * a wrong loss scale) fits under it at these shapes. */
#include "cli.h"
#include "ref_flce.h"
#include "ref_norms.h"
#include "synthetic_batch.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *fmt, const char *arg) {
  fprintf(stderr, "dp_check: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(1);
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) die("%s", "out of memory");
  return p;
}

typedef struct model {
  size_t bt, h, v;
  uint64_t seed;
  long long count;
  /* exact step (double) */
  double loss, *dw_head, *db_head, *dw_norm;
  /* bounds */
  double loss_bound, *dw_head_bound, *db_head_bound, *dw_norm_bound;
} model;

static void compute(model *m) {
  const size_t bt = m->bt, h = m->h, v = m->v;
  const double u = ldexp(1.0, -24);
  float *x = xcalloc(bt * h, sizeof(float)), *g = xcalloc(h, sizeof(float));
  float *w = xcalloc(v * h, sizeof(float)), *b = xcalloc(v, sizeof(float));
  int64_t *t = xcalloc(bt, sizeof(int64_t));
  for (size_t i = 0; i < bt; i++) {
    for (size_t j = 0; j < h; j++) x[i * h + j] = sb_x(m->seed, h, i, j);
    t[i] = sb_target(m->seed, bt, v, i);
    m->count += t[i] != SB_IGNORE_INDEX;
  }
  for (size_t j = 0; j < h; j++) g[j] = sb_norm_weight(m->seed, j);
  for (size_t i = 0; i < v * h; i++) w[i] = sb_head_weight(m->seed, h, i / h, i % h);
  for (size_t i = 0; i < v; i++) b[i] = sb_head_bias(m->seed, i);

  /* The exact step: RMSNorm forward (f32 output, as stored), FLCE (mean), RMSNorm backward. */
  const ref_rmsnorm rp = {bt, h, 1e-6f, 0.0f, NG_CAST_LLAMA, NG_F32, NG_F32, g};
  double *hd = xcalloc(bt * h, sizeof(double));
  float *hf = xcalloc(bt * h, sizeof(float)), *rstd = xcalloc(bt, sizeof(float));
  ref_rmsnorm_forward(&rp, x, hd, rstd);
  for (size_t i = 0; i < bt * h; i++) hf[i] = (float)hd[i];
  ref_flce fp;
  memset(&fp, 0, sizeof fp);
  fp.bt = bt, fp.h = h, fp.v = v, fp.ignore_index = SB_IGNORE_INDEX;
  fp.reduction = NG_REDUCTION_MEAN, fp.bias = b, fp.go_scalar = 1.0;
  ref_flce_out fo;
  memset(&fo, 0, sizeof fo);
  double loss = 0, *dinput = xcalloc(bt * h, sizeof(double));
  m->dw_head = xcalloc(v * h, sizeof(double));
  m->db_head = xcalloc(v, sizeof(double));
  fo.loss = &loss, fo.dinput = dinput, fo.dweight = m->dw_head, fo.dbias = m->db_head;
  ref_flce_run(&fp, hf, w, t, &fo);
  m->loss = loss;
  float *dy = xcalloc(bt * h, sizeof(float));
  for (size_t i = 0; i < bt * h; i++) dy[i] = (float)dinput[i];
  m->dw_norm = xcalloc(h, sizeof(double));
  ref_rmsnorm_backward(&rp, dy, x, rstd, NULL, m->dw_norm, NULL, NULL, NULL);

  /* The bounds (see the top of the file). */
  m->dw_head_bound = xcalloc(v * h, sizeof(double));
  m->db_head_bound = xcalloc(v, sizeof(double));
  m->dw_norm_bound = xcalloc(h, sizeof(double));
  double *z = xcalloc(v, sizeof(double)), *a = xcalloc(v, sizeof(double));
  const double n = (double)m->count;
  for (size_t i = 0; i < bt && m->count > 0; i++) {
    if (t[i] == SB_IGNORE_INDEX) continue; /* no loss, no gradient */
    const float *hr = hf + i * h;
    double li = 0, zmax = -INFINITY;
    for (size_t c = 0; c < v; c++) {
      double s = b[c], sa = fabs(b[c]);
      for (size_t j = 0; j < h; j++) {
        s += (double)hr[j] * w[c * h + j];
        sa += fabs((double)hr[j] * w[c * h + j]);
      }
      z[c] = s;
      li = fmax(li, sa);
      zmax = fmax(zmax, s);
    }
    double se = 0;
    for (size_t c = 0; c < v; c++) se += exp(z[c] - zmax);
    const double lse = zmax + log(se);
    const double ei = u * (4.0 * h * li + 2.0 * (h + 10) * li + 8.0 * (li + log((double)v)) + 16);
    for (size_t c = 0; c < v; c++) a[c] = (exp(z[c] - lse) + (c == (size_t)t[i] ? 1 : 0)) / n;
    m->loss_bound += (2.0 * bt * u * (lse - z[t[i]]) + ei) / n;
    const double fh = 2.0 * bt * u + ei, fn = 2.0 * (bt + v) * u + ei;
    for (size_t c = 0; c < v; c++) {
      m->db_head_bound[c] += a[c] * fh;
      for (size_t j = 0; j < h; j++) m->dw_head_bound[c * h + j] += a[c] * fabs(hr[j]) * fh;
    }
    for (size_t j = 0; j < h; j++) {
      const double xhat = (float)(x[i * h + j] * rstd[i]); /* llama casting: rounded to f32 */
      double d = 0;
      for (size_t c = 0; c < v; c++) d += a[c] * fabs((double)w[c * h + j]);
      m->dw_norm_bound[j] += fabs(xhat) * d * fn;
    }
  }
  free(x), free(g), free(w), free(b), free(t), free(hd), free(hf), free(rstd), free(dinput);
  free(dy), free(z), free(a);
}

/* ---- comparisons ----------------------------------------------------------------------------- */
typedef struct worst {
  double diff, ratio, ref_max; /* largest |a − b|, largest |a − b| / bound, max |b| */
  size_t at;
} worst;

static worst compare(const float *a, const float *b, const double *exact, const double *bound,
                     size_t n) {
  worst w = {0, 0, 0, 0};
  for (size_t i = 0; i < n; i++) {
    const double other = b ? (double)b[i] : exact[i];
    const double d = fabs((double)a[i] - other);
    double r = d / (bound[i] + DBL_MIN);
    if (isnan(d) || d > w.diff) w.diff = d, w.at = i;
    if (isnan(d)) r = INFINITY;
    if (r > w.ratio) w.ratio = r;
    if (fabs(other) > w.ref_max) w.ref_max = fabs(other);
  }
  return w;
}

static const float *tensor(const cli_tensors *ts, const char *file, const char *name, size_t n,
                           ng_dtype dt) {
  const cli_tensor *t = cli_tensors_find(ts, name);
  if (!t) return NULL;
  if (t->dtype != dt || cli_tensor_numel(t) != n) {
    fprintf(stderr, "dp_check: %s: %s has the wrong dtype or shape\n", file, name);
    exit(1);
  }
  return t->data;
}

int main(int argc, char **argv) {
  model m;
  memset(&m, 0, sizeof m);
  bool frozen = false, expect_mismatch = false;
  const char *files[2] = {NULL, NULL}, *identical = NULL;
  int nfiles = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    size_t *dst = strcmp(a, "--batch") == 0    ? &m.bt
                  : strcmp(a, "--hidden") == 0 ? &m.h
                  : strcmp(a, "--vocab") == 0  ? &m.v
                                               : NULL;
    if (dst && i + 1 < argc) *dst = (size_t)strtoull(argv[++i], NULL, 10);
    else if (strcmp(a, "--seed") == 0 && i + 1 < argc) m.seed = strtoull(argv[++i], NULL, 10);
    else if (strcmp(a, "--frozen") == 0) frozen = true;
    else if (strcmp(a, "--expect-mismatch") == 0) expect_mismatch = true;
    else if (strcmp(a, "--identical") == 0 && i + 1 < argc) identical = argv[++i];
    else if (a[0] != '-' && nfiles < 2) files[nfiles++] = a;
    else die("bad argument %s", a);
  }
  if (nfiles != 2 || !m.bt || !m.h || !m.v) die("%s", "usage: see the top of tests/mpi/dp_check.c");
  compute(&m);

  cli_tensors ts[2];
  const float *dw[2], *db[2], *dg[2], *loss[2];
  for (int f = 0; f < 2; f++) {
    char err[256] = "";
    memset(&ts[f], 0, sizeof ts[f]);
    if (cli_st_read(files[f], &ts[f], err, sizeof err) != 0) die("%s", err);
    dw[f] = tensor(&ts[f], files[f], "dweight_head", m.v * m.h, NG_F32);
    db[f] = tensor(&ts[f], files[f], "dbias_head", m.v, NG_F32);
    dg[f] = tensor(&ts[f], files[f], "dweight_norm", m.h, NG_F32);
    loss[f] = tensor(&ts[f], files[f], "loss", 1, NG_F32);
    const void *cnt_raw = tensor(&ts[f], files[f], "count", 1, NG_I64);
    const int64_t *cnt = cnt_raw;
    if (!dw[f] || !db[f] || !loss[f] || !cnt) die("%s: a tensor is missing", files[f]);
    if (frozen != (dg[f] == NULL))
      die(frozen ? "%s: a frozen norm weight must have no dweight_norm"
                 : "%s: dweight_norm is missing",
          files[f]);
    if (*cnt != m.count) die("%s: count differs from the batch's counted targets", files[f]);
  }

  struct {
    const char *name;
    const float *a, *b;
    const double *exact, *bound;
    size_t n;
  } rows[] = {
      {"dweight_head", dw[0], dw[1], m.dw_head, m.dw_head_bound, m.v * m.h},
      {"dbias_head", db[0], db[1], m.db_head, m.db_head_bound, m.v},
      {"dweight_norm", dg[0], dg[1], m.dw_norm, m.dw_norm_bound, m.h},
      {"loss", loss[0], loss[1], &m.loss, &m.loss_bound, 1},
  };
  printf("%zu rows (%lld counted targets), H %zu, V %zu, seed %llu; bound: see dp_check.c\n",
         m.bt, m.count, m.h, m.v, (unsigned long long)m.seed);
  printf("%-13s %12s %12s %12s | %12s %12s\n", "tensor", "max|1 - N|", "/ max|1|", "of bound",
         "1 vs exact", "N vs exact");
  bool ok = true;
  double worst_all = 0, worst_rel = 0, worst_ratio = 0;
  const char *worst_name = "";
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    if (!rows[r].a) continue; /* frozen */
    const worst pair = compare(rows[r].a, rows[r].b, NULL, rows[r].bound, rows[r].n);
    const worst e0 = compare(rows[r].a, NULL, rows[r].exact, rows[r].bound, rows[r].n);
    const worst e1 = compare(rows[r].b, NULL, rows[r].exact, rows[r].bound, rows[r].n);
    const double rel = pair.diff / (e0.ref_max + DBL_MIN);
    printf("%-13s %12.3g %12.3g %12.3g | %12.3g %12.3g\n", rows[r].name, pair.diff, rel,
           pair.ratio, e0.ratio, e1.ratio);
    if (e0.ratio > 1) ok = false, printf("  FAIL: the single run is off the exact step\n");
    if (!expect_mismatch && (e1.ratio > 1 || pair.ratio > 1)) {
      ok = false;
      printf("  FAIL: element %zu: %.9g vs %.9g (exact %.9g, bound %.3g)\n", pair.at,
             rows[r].a[pair.at], rows[r].b[pair.at], rows[r].exact[pair.at],
             rows[r].bound[pair.at]);
    }
    if (pair.ratio > worst_ratio) worst_ratio = pair.ratio;
    if (pair.diff > worst_all) worst_all = pair.diff, worst_name = rows[r].name, worst_rel = rel;
  }
  if (expect_mismatch) {
    printf("negative control: largest difference %.3g times the bound (must exceed 10)\n",
           worst_ratio);
    if (!(worst_ratio > 10)) ok = false;
  } else {
    printf("largest difference: %.3g in %s (%.3g of its largest value, %.3g of the bound)\n",
           worst_all, worst_name, worst_rel, worst_ratio);
  }
  if (identical) { /* every tensor that SINGLE and this file both hold: the same bits */
    cli_tensors other;
    char err[256] = "";
    memset(&other, 0, sizeof other);
    if (cli_st_read(identical, &other, err, sizeof err) != 0) die("%s", err);
    size_t same = 0;
    for (size_t i = 0; i < ts[0].count; i++) {
      const cli_tensor *a = &ts[0].items[i], *b = cli_tensors_find(&other, a->name);
      if (!b) continue;
      if (a->nbytes != b->nbytes || memcmp(a->data, b->data, a->nbytes) != 0)
        ok = false, printf("  FAIL: %s differs from %s's\n", a->name, identical);
      else
        same++;
    }
    printf("%zu tensors bit-identical to %s\n", same, identical);
    if (same < 4) ok = false; /* dweight_head, dbias_head, loss, count at least */
    cli_tensors_free(&other);
  }
  for (int f = 0; f < 2; f++) cli_tensors_free(&ts[f]);
  free(m.dw_head), free(m.db_head), free(m.dw_norm);
  free(m.dw_head_bound), free(m.db_head_bound), free(m.dw_norm_bound);
  printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
