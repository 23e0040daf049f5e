/* NaN and ±Inf in x, dy and weight propagate through RMSNorm forward and backward as PyTorch's
 * math does (IEEE arithmetic on the same formulas): an Inf in a row makes its sum of squares
 * Inf and rstd 0, so finite entries give 0 and the Inf gives NaN; a NaN makes its row NaN; a
 * zero row with eps = 0 has rstd = +Inf and y = 0·Inf = NaN; an Inf in dy spreads through the
 * row's dot product into dx and into its column of dweight; and so on. The expected pattern
 * comes from the double-precision reference (tests/ref) on the same inputs: every element must
 * have the reference's class (NaN, +Inf, −Inf or finite), finite ones its value within a
 * tolerance. Both launch shapes (one row per work-item; a work-group per row with dW in
 * registers or in partial rows), every storage dtype and casting mode, frozen and accumulated
 * dweight. Nothing may hang or crash: the whole file runs under a 5-minute CTest timeout. */
#include "ng_test.h"
#include "ref_norms.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 14 };

typedef struct nf_case {
  const char *label;
  size_t n;
  ng_dtype xd, wd;
  ng_casting_mode mode;
  float eps;
  bool weight;       /* a weight at all */
  bool bad_weight;   /* NaN/±Inf in the weight instead of in x/dy */
  bool accumulate;   /* dweight accumulated onto values holding a NaN and an Inf */
} nf_case;

/* Element classes: NaN, +Inf, −Inf, finite. */
static int cls(double v) { return isnan(v) ? 0 : isinf(v) ? (v > 0 ? 1 : 2) : 3; }
static const char *cls_name(double v) {
  static const char *names[] = {"NaN", "+Inf", "-Inf", "finite"};
  return names[cls(v)];
}

/* got[i] has ref[i]'s class; finite values agree within rtol·|ref| + rtol·scale[i / per_row].
 * Returns how many elements are not finite. */
static size_t check(const char *what, const nf_case *c, const float *got, const double *ref,
                  size_t count, size_t per_row, const double *scale, double rtol) {
  size_t nonfinite = 0;
  for (size_t i = 0; i < count; i++) {
    if (cls(got[i]) != cls(ref[i]))
      fail_msg("%s [%s]: element %zu (row %zu, col %zu) is %s (%g), the reference %s (%g)", what,
               c->label, i, i / per_row, i % per_row, cls_name(got[i]), (double)got[i],
               cls_name(ref[i]), ref[i]);
    if (cls(ref[i]) != 3) {
      nonfinite++;
      continue;
    }
    const double lim = rtol * fabs(ref[i]) + rtol * scale[i / per_row] + 1e-30;
    if (fabs(got[i] - ref[i]) > lim)
      fail_msg("%s [%s]: element %zu (row %zu, col %zu) is %.9g, the reference %.9g (limit %g)",
               what, c->label, i, i / per_row, i % per_row, (double)got[i], ref[i], lim);
  }
  return nonfinite;
}

static double rtol_of(ng_dtype dt) {
  return dt == NG_BF16 ? 2.0 / 128 : dt == NG_F16 ? 2.0 / 1024 : 2e-5;
}

static void run_case(ng_context *ctx, const nf_case *c) {
  ng_test_env *e = ng_test_env_get();
  const size_t n = c->n, cnt = ROWS * n;
  ng_rng rng;
  ng_rng_seed(&rng, 1000 + n);
  float *x = ng_test_random(&rng, c->xd, cnt, 0.2, 1.0);
  float *dy = ng_test_random(&rng, c->xd, cnt, 0.0, 1.0);
  float *w = ng_test_random(&rng, c->wd, n, 1.0, 0.3);
  const float inf = INFINITY, nan = NAN;
  if (!c->bad_weight) {
    /* rows 0 and 13 stay clean */
    x[1 * n + 3] = nan;
    x[2 * n + 0] = inf;
    x[3 * n + n - 1] = -inf;
    for (size_t j = 0; j < n; j++) x[4 * n + j] = 0.0f; /* rstd = 1/sqrt(eps) (+Inf at eps 0) */
    dy[5 * n + 2] = nan;
    dy[6 * n + 1] = inf;
    dy[7 * n + n / 2] = -inf;
    x[8 * n + 1] = inf, dy[8 * n + 1] = nan;
    x[9 * n + 0] = inf, x[9 * n + 2] = -inf;
    dy[10 * n + 4] = inf, dy[10 * n + 5] = -inf; /* the row's dot product is NaN */
    x[11 * n + 6] = 0.0f, dy[11 * n + 6] = inf;  /* Inf·0 in the dot product */
    dy[12 * n + n - 1] = inf;                    /* an Inf in the last column */
  } else {
    w[3] = nan, w[5] = inf, w[n - 1] = -inf;
  }
  for (size_t i = 0; i < cnt; i++) x[i] = ng_h_rd(c->xd, x[i]), dy[i] = ng_h_rd(c->xd, dy[i]);
  for (size_t j = 0; j < n; j++) w[j] = ng_h_rd(c->wd, w[j]);
  float *dw0 = calloc(n, sizeof *dw0);
  assert_non_null(dw0);
  if (c->accumulate) dw0[0] = nan, dw0[1] = inf;

  const size_t G = 8;
  cl_mem bx = ng_test_upload(c->xd, x, cnt, 0, G), bdy = ng_test_upload(c->xd, dy, cnt, 0, G);
  cl_mem bw = ng_test_upload(c->wd, w, n, 0, G), by = ng_test_upload(c->xd, NULL, cnt, 0, G);
  cl_mem br = ng_test_upload(NG_F32, NULL, ROWS, 0, G);
  cl_mem bdx = ng_test_upload(c->xd, NULL, cnt, 0, G);
  cl_mem bdw = ng_test_upload(c->wd, dw0, n, 0, G), bdx2 = ng_test_upload(c->xd, NULL, cnt, 0, G);
  const ng_rmsnorm_params p = {ROWS, n, c->eps, 0.0f, c->mode};
  const ng_tensor W = c->weight ? ng_tensor_of(bw, 0, c->wd) : ng_tensor_none();
  NG_OK(ng_rmsnorm_forward(ctx, e->queue, &p, ng_tensor_of(bx, 0, c->xd), W,
                           ng_tensor_of(by, 0, c->xd), ng_tensor_of(br, 0, NG_F32), 0, NULL,
                           NULL));
  NG_OK(ng_rmsnorm_backward(ctx, e->queue, &p, ng_tensor_of(bdy, 0, c->xd),
                            ng_tensor_of(bx, 0, c->xd), W, ng_tensor_of(br, 0, NG_F32),
                            ng_tensor_of(bdx, 0, c->xd),
                            c->weight ? ng_tensor_of(bdw, 0, c->wd) : ng_tensor_none(),
                            c->accumulate ? NG_ACCUMULATE_GRAD : 0, ng_tensor_none(), 0, NULL,
                            NULL));
  /* frozen: the same dx */
  NG_OK(ng_rmsnorm_backward(ctx, e->queue, &p, ng_tensor_of(bdy, 0, c->xd),
                            ng_tensor_of(bx, 0, c->xd), W, ng_tensor_of(br, 0, NG_F32),
                            ng_tensor_of(bdx2, 0, c->xd), ng_tensor_none(), 0, ng_tensor_none(),
                            0, NULL, NULL));
  CL_OK(clFinish(e->queue));

  float *y = malloc(cnt * sizeof *y), *dx = malloc(cnt * sizeof *dx);
  float *dx2 = malloc(cnt * sizeof *dx2);
  float *rs = malloc(ROWS * sizeof *rs), *dw = malloc(n * sizeof *dw);
  double *yref = malloc(cnt * sizeof *yref), *dxref = malloc(cnt * sizeof *dxref);
  double *dwref = malloc(n * sizeof *dwref), *rsd = malloc(ROWS * sizeof *rsd);
  double *dwscale = malloc(n * sizeof *dwscale), *scale = malloc(ROWS * sizeof *scale);
  float *rsref = malloc(ROWS * sizeof *rsref);
  assert_true(y && dx && dx2 && rs && dw && yref && dxref && dwref && rsd && dwscale && scale &&
              rsref);
  ng_test_download(by, c->xd, 0, cnt, y);
  ng_test_download(br, NG_F32, 0, ROWS, rs);
  ng_test_download(bdx, c->xd, 0, cnt, dx);
  ng_test_download(bdx2, c->xd, 0, cnt, dx2);
  ng_test_download(bdw, c->wd, 0, n, dw);
  /* nothing outside the tensors was written */
  if (!ng_test_guard_intact(by, c->xd, 0, cnt, cnt + G) ||
      !ng_test_guard_intact(bdx, c->xd, 0, cnt, cnt + G) ||
      !ng_test_guard_intact(br, NG_F32, 0, ROWS, ROWS + G) ||
      !ng_test_guard_intact(bdw, c->wd, 0, n, n + G))
    fail_msg("[%s] a guard was overwritten", c->label);

  ref_rmsnorm rp = {ROWS, n, c->eps, 0.0f, c->mode, c->xd, c->wd, c->weight ? w : NULL};
  ref_rmsnorm_forward(&rp, x, yref, rsref);
  const double rt = rtol_of(c->xd);
  for (size_t r = 0; r < ROWS; r++) rsd[r] = rsref[r], scale[r] = 0;
  check("rstd", c, rs, rsd, ROWS, 1, scale, c->mode == NG_CAST_NONE ? rt : 1e-5);
  for (size_t i = 0; i < cnt; i++)
    if (isfinite(yref[i])) scale[i / n] = fmax(scale[i / n], fabs(yref[i]));
  /* a test that sees no NaN or Inf would prove nothing */
  if (check("y", c, y, yref, cnt, n, scale, 2 * rt) == 0) fail_msg("[%s] y is finite", c->label);
  /* the backward reference gets the device's rstd, as the device's backward did */
  ref_rmsnorm_backward(&rp, dy, x, rs, dxref, dwref, c->accumulate ? dw0 : NULL, dwscale, NULL);
  for (size_t r = 0; r < ROWS; r++) {
    scale[r] = 0;
    for (size_t j = 0; j < n; j++) {
      /* dx cancels: the scale is that of its two terms */
      double t = fabs((double)rs[r] * dy[r * n + j] * (c->weight ? w[j] : 1.0));
      if (isfinite(t)) scale[r] = fmax(scale[r], t);
    }
    scale[r] *= 4;
  }
  if (check("dx", c, dx, dxref, cnt, n, scale, rt + 1e-5) == 0)
    fail_msg("[%s] dx is finite", c->label);
  for (size_t i = 0; i < cnt; i++)
    if (memcmp(&dx[i], &dx2[i], sizeof(float)) != 0 && !(isnan(dx[i]) && isnan(dx2[i])))
      fail_msg("[%s] dx differs between the frozen and the trained backward at %zu", c->label, i);
  if (c->weight) {
    for (size_t j = 0; j < n; j++) dwscale[j] = isfinite(dwscale[j]) ? dwscale[j] : 0;
    /* dweight = Σ dy·xhat does not read the weight: finite when only the weight is bad */
    const size_t bad = check("dweight", c, dw, dwref, n, 1, dwscale, rtol_of(c->wd) + 1e-4);
    if ((bad == 0) != (c->bad_weight && !c->accumulate))
      fail_msg("[%s] dweight has %zu non-finite values", c->label, bad);
  }
  cl_mem all[] = {bx, bdy, bw, by, br, bdx, bdw, bdx2};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++) clReleaseMemObject(all[i]);
  free(x), free(dy), free(w), free(dw0), free(y), free(dx), free(dx2), free(rs), free(dw);
  free(yref), free(dxref), free(dwref), free(rsd), free(dwscale), free(scale), free(rsref);
}

static const nf_case cpu_cases[] = {
    {"f32 llama n=40", 40, NG_F32, NG_F32, NG_CAST_LLAMA, 1e-6f, true, false, false},
    {"f32 llama n=40 eps=0", 40, NG_F32, NG_F32, NG_CAST_LLAMA, 0.0f, true, false, false},
    {"bf16 gemma n=37", 37, NG_BF16, NG_F32, NG_CAST_GEMMA, 1e-6f, true, false, true},
    {"f16 none n=40 bf16 weight", 40, NG_F16, NG_BF16, NG_CAST_NONE, 1e-5f, true, false, false},
    {"bf16 llama n=40 no weight", 40, NG_BF16, NG_F32, NG_CAST_LLAMA, 1e-6f, false, false, false},
    {"f32 llama n=40 NaN/Inf weight", 40, NG_F32, NG_F32, NG_CAST_LLAMA, 1e-6f, true, true, false},
    {"bf16 gemma n=37 NaN/Inf weight", 37, NG_BF16, NG_F32, NG_CAST_GEMMA, 1e-6f, true, true, true},
};

static void test_nonfinite_row_per_item(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  for (size_t i = 0; i < NG_ARRAY_LEN(cpu_cases); i++) run_case(e->ctx, &cpu_cases[i]);
}

/* The GPU shape on any device: 64 work-items per row, dW sums in registers (n = 40) or in the
 * partial rows (n = 1100 > 64·2 columns). */
static void test_nonfinite_group_per_row(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_context *ctx = NULL;
  NG_OK(ng_context_create(e->cl_ctx, e->device, &ctx));
  NG_OK(ng_context_override(ctx, NG_TUNE_WORKGROUP, 64));
  NG_OK(ng_context_override(ctx, NG_TUNE_REG_COLS, 2));
  NG_OK(ng_context_override(ctx, NG_TUNE_GROUPS, 5));
  const nf_case cases[] = {
      {"wg64 bf16 llama n=40", 40, NG_BF16, NG_F32, NG_CAST_LLAMA, 1e-6f, true, false, true},
      {"wg64 f32 none n=1100 eps=0", 1100, NG_F32, NG_F32, NG_CAST_NONE, 0.0f, true, false, false},
      {"wg64 f16 gemma n=1100 NaN/Inf weight", 1100, NG_F16, NG_F16, NG_CAST_GEMMA, 1e-6f, true,
       true, false},
  };
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) run_case(ctx, &cases[i]);
  ng_context_release(ctx);
}

static int teardown(void **state) {
  (void)state;
  ng_test_env_release();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nonfinite_row_per_item),
      cmocka_unit_test(test_nonfinite_group_per_row),
  };
  return NG_RUN_GROUP_TESTS(tests, NULL, teardown);
}
