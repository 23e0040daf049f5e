/* LayerNorm forward and backward against the double-precision reference: every x dtype ×
 * parameter dtype × weight/bias present or absent × frozen weight × frozen bias × accumulate,
 * awkward shapes, buffer offsets with guard checks, both kernel shapes (CPU: a row per
 * work-item; GPU: a row per work-group), a finite-difference gradient check, determinism, a mean
 * far larger than the spread (where E[x²] − mean² would fail), bit-identical dx whatever is
 * frozen, and every validation error. */
#include "ng_internal.h" /* NG_SCRATCH_VEC_PAD */
#include "ng_test.h"
#include "ref_layernorm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ln_case {
  size_t rows, n;
  ng_dtype xd, wd; /* wd: weight's and bias's dtype */
  bool has_w, has_b;
  bool frozen_w, frozen_b, accumulate;
  size_t off; /* element offset applied to every buffer */
  float eps;
  uint64_t seed;
  double x_mean, x_std; /* 0, 0 = the default 0.3, 1.5 */
} ln_case;

static void describe(const ln_case *c, char *buf, size_t len) {
  snprintf(buf, len, "rows=%zu n=%zu x=%s w=%s%s b=%s%s params=%s acc=%d off=%zu", c->rows, c->n,
           ng_dtype_name(c->xd), c->has_w ? "yes" : "none", c->has_w && c->frozen_w ? "(frozen)" : "",
           c->has_b ? "yes" : "none", c->has_b && c->frozen_b ? "(frozen)" : "",
           ng_dtype_name(c->wd), c->accumulate, c->off);
}

enum { GUARD = 16 };

static void check_guard(const char *what, cl_mem m, ng_dtype dt, size_t off, size_t count) {
  if (!ng_test_guard_intact(m, dt, off, count, off + count + GUARD))
    fail_msg("%s: an element outside the output range was written", what);
}

static double max_abs(const double *v, size_t count) {
  double m = 0;
  for (size_t i = 0; i < count; i++) m = fmax(m, fabs(v[i]));
  return m;
}

/* Parameter gradient: f32 sums over rows in another order than the reference's. */
static void check_grad(const char *what, cl_mem m, ng_dtype wd, size_t off, const double *ref,
                       const double *scale, size_t n, size_t rows, float *got) {
  ng_test_download(m, wd, off, n, got);
  ng_tol t = ng_tol_for(wd, ref, n, 0);
  t.atol = 2e-6 * max_abs(scale, n) * (1 + sqrt((double)rows) * 0.1);
  NG_ASSERT_CLOSE(what, got, ref, n, t);
  check_guard(what, m, wd, off, n);
}

static void run_case(const ln_case *c) {
  ng_test_env *e = ng_test_env_get();
  char name[320];
  describe(c, name, sizeof name);
  const size_t cnt = c->rows * c->n, off = c->off, n = c->n;
  const ng_dtype xd = c->xd, wd = c->wd;
  const bool dw_on = c->has_w && !c->frozen_w, db_on = c->has_b && !c->frozen_b;
  ng_rng rng;
  ng_rng_seed(&rng, c->seed);
  float *x = ng_test_random(&rng, xd, cnt, c->x_std ? c->x_mean : 0.3, c->x_std ? c->x_std : 1.5);
  float *dy = ng_test_random(&rng, xd, cnt, 0.0, 1.0);
  float *w = c->has_w ? ng_test_random(&rng, wd, n, 1.0, 0.5) : NULL;
  float *b = c->has_b ? ng_test_random(&rng, wd, n, 0.0, 0.5) : NULL;
  float *dw0 = ng_test_random(&rng, wd, n, 0.0, 3.0), *db0 = ng_test_random(&rng, wd, n, 0.0, 3.0);

  ref_layernorm rp = {c->rows, n, c->eps, xd, w, b};
  double *y_ref = malloc(cnt * sizeof(double)), *y_scale = malloc(cnt * sizeof(double));
  double *dx_ref = malloc(cnt * sizeof(double)), *stat = malloc(c->rows * sizeof(double));
  double *dw_ref = malloc(n * sizeof(double)), *dw_scale = malloc(n * sizeof(double));
  double *db_ref = malloc(n * sizeof(double)), *db_scale = malloc(n * sizeof(double));
  float *mean_ref = malloc(c->rows * sizeof(float)), *rstd_ref = malloc(c->rows * sizeof(float));
  float *got = malloc(cnt * sizeof(float)), *got2 = malloc(cnt * sizeof(float));
  assert_true(y_ref && y_scale && dx_ref && stat && dw_ref && dw_scale && db_ref && db_scale &&
              mean_ref && rstd_ref && got && got2);
  double dx_scale = 0;
  ref_layernorm_forward(&rp, x, y_ref, y_scale, mean_ref, rstd_ref);
  ref_layernorm_backward(&rp, dy, x, mean_ref, rstd_ref, dx_ref, dw_ref,
                         c->accumulate ? dw0 : NULL, db_ref, c->accumulate ? db0 : NULL, dw_scale,
                         db_scale, &dx_scale);

  cl_mem bx = ng_test_upload(xd, x, cnt, off, GUARD);
  cl_mem bw = c->has_w ? ng_test_upload(wd, w, n, off, GUARD) : NULL;
  cl_mem bb = c->has_b ? ng_test_upload(wd, b, n, off, GUARD) : NULL;
  cl_mem by = ng_test_upload(xd, NULL, cnt, off, GUARD);
  cl_mem bm = ng_test_upload(NG_F32, NULL, c->rows, off, GUARD);
  cl_mem br = ng_test_upload(NG_F32, NULL, c->rows, off, GUARD);
  cl_mem bdy = ng_test_upload(xd, dy, cnt, off, GUARD);
  cl_mem bmr = ng_test_upload(NG_F32, mean_ref, c->rows, off, GUARD);
  cl_mem brr = ng_test_upload(NG_F32, rstd_ref, c->rows, off, GUARD);
  cl_mem bdx = ng_test_upload(xd, NULL, cnt, off, GUARD);
  cl_mem bdw = dw_on ? ng_test_upload(wd, dw0, n, off, GUARD) : NULL;
  cl_mem bdb = db_on ? ng_test_upload(wd, db0, n, off, GUARD) : NULL;

  ng_layernorm_params p = {c->rows, n, c->eps};
  const ng_tensor tw = bw ? ng_tensor_of(bw, off, wd) : ng_tensor_none();
  const ng_tensor tb = bb ? ng_tensor_of(bb, off, wd) : ng_tensor_none();
  NG_OK(ng_layernorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, off, xd), tw, tb,
                             ng_tensor_of(by, off, xd), ng_tensor_of(bm, off, NG_F32),
                             ng_tensor_of(br, off, NG_F32), 0, NULL, NULL));
  cl_event ev = NULL;
  NG_OK(ng_layernorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, off, xd),
                              ng_tensor_of(bx, off, xd), tw, tb, ng_tensor_of(bmr, off, NG_F32),
                              ng_tensor_of(brr, off, NG_F32), ng_tensor_of(bdx, off, xd),
                              bdw ? ng_tensor_of(bdw, off, wd) : ng_tensor_none(),
                              bdb ? ng_tensor_of(bdb, off, wd) : ng_tensor_none(),
                              c->accumulate ? NG_ACCUMULATE_GRAD : 0, ng_tensor_none(), 0, NULL,
                              &ev));
  assert_non_null(ev);
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);

  char what[400];
  /* f32 sums in another order than the reference's double ones: the mean's error grows with
   * the row's mean |x| (it dominates when |mean| ≫ std), the variance's relative error with n */
  const double sum_rel = 1e-6 + 2e-7 * sqrt((double)n);
  double mean_err = 0, xh_err = 0, wmax = 1;
  for (size_t r = 0; r < c->rows; r++) {
    double a = 0;
    for (size_t j = 0; j < n; j++) a += fabs(x[r * n + j]);
    const double e_r = 2.4e-7 * sqrt((double)n) * a / (double)n;
    mean_err = fmax(mean_err, e_r);
    xh_err = fmax(xh_err, e_r * rstd_ref[r]);
  }
  for (size_t j = 0; w && j < n; j++) wmax = fmax(wmax, fabs(w[j]));

  ng_test_download(by, xd, off, cnt, got);
  snprintf(what, sizeof what, "y [%s]", name);
  ng_tol yt = ng_tol_for(xd, y_ref, cnt, 0);
  yt.atol += xh_err * wmax + sum_rel * max_abs(y_scale, cnt);
  NG_ASSERT_CLOSE(what, got, y_ref, cnt, yt);
  check_guard(what, by, xd, off, cnt);

  ng_test_download(bm, NG_F32, off, c->rows, got);
  for (size_t r = 0; r < c->rows; r++) stat[r] = mean_ref[r];
  snprintf(what, sizeof what, "mean [%s]", name);
  NG_ASSERT_CLOSE(what, got, stat, c->rows, ((ng_tol){2e-7, mean_err}));
  check_guard(what, bm, NG_F32, off, c->rows);

  ng_test_download(br, NG_F32, off, c->rows, got);
  for (size_t r = 0; r < c->rows; r++) stat[r] = rstd_ref[r];
  snprintf(what, sizeof what, "rstd [%s]", name);
  NG_ASSERT_CLOSE(what, got, stat, c->rows, ((ng_tol){sum_rel, 0}));
  check_guard(what, br, NG_F32, off, c->rows);

  ng_test_download(bdx, xd, off, cnt, got);
  snprintf(what, sizeof what, "dx [%s]", name);
  ng_tol dxt = ng_tol_for(xd, dx_ref, cnt, 0);
  dxt.atol += (2e-7 + 2e-8 * sqrt((double)n)) * dx_scale; /* the row sums' f32 error */
  NG_ASSERT_CLOSE(what, got, dx_ref, cnt, dxt);
  check_guard(what, bdx, xd, off, cnt);

  if (bdw) {
    snprintf(what, sizeof what, "dweight [%s]", name);
    check_grad(what, bdw, wd, off, dw_ref, dw_scale, n, c->rows, got);
  }
  if (bdb) {
    snprintf(what, sizeof what, "dbias [%s]", name);
    check_grad(what, bdb, wd, off, db_ref, db_scale, n, c->rows, got);
  }

  /* Whatever was computed, the run with both parameters frozen gives the same dx bits. */
  if (bdw || bdb) {
    cl_mem bdx2 = ng_test_upload(xd, NULL, cnt, off, GUARD);
    NG_OK(ng_layernorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, off, xd),
                                ng_tensor_of(bx, off, xd), tw, tb,
                                ng_tensor_of(bmr, off, NG_F32), ng_tensor_of(brr, off, NG_F32),
                                ng_tensor_of(bdx2, off, xd), ng_tensor_none(), ng_tensor_none(),
                                0, ng_tensor_none(), 0, NULL, NULL));
    ng_test_download(bdx2, xd, off, cnt, got2);
    ng_test_download(bdx, xd, off, cnt, got);
    if (memcmp(got, got2, cnt * sizeof(float)) != 0) {
      size_t first = cnt, diff = 0;
      for (size_t i = 0; i < cnt; i++)
        if (memcmp(&got[i], &got2[i], sizeof(float)) != 0) diff++, first = first < i ? first : i;
      fail_msg("dx differs between frozen and unfrozen runs in %zu of %zu values, first [%zu]: "
               "%.9g against %.9g [%s]",
               diff, cnt, first, (double)got[first], (double)got2[first], name);
    }
    clReleaseMemObject(bdx2);
  }

  cl_mem all[] = {bx, bw, bb, by, bm, br, bdy, bmr, brr, bdx, bdw, bdb};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++)
    if (all[i]) clReleaseMemObject(all[i]);
  free(x), free(dy), free(w), free(b), free(dw0), free(db0), free(y_ref), free(y_scale);
  free(dx_ref), free(stat), free(dw_ref), free(dw_scale), free(db_ref), free(db_scale);
  free(mean_ref), free(rstd_ref), free(got), free(got2);
}

/* The parameter configurations: weight/bias present, each frozen or not, accumulate when
 * something is trained. */
typedef struct ln_params {
  bool has_w, has_b, frozen_w, frozen_b, accumulate;
} ln_params;
static const ln_params PARAMS[] = {
    {1, 1, 0, 0, 0}, {1, 1, 0, 0, 1}, {1, 1, 1, 0, 0}, {1, 1, 1, 0, 1}, {1, 1, 0, 1, 0},
    {1, 1, 0, 1, 1}, {1, 1, 1, 1, 0}, {1, 0, 0, 0, 0}, {1, 0, 0, 0, 1}, {1, 0, 1, 0, 0},
    {0, 1, 0, 0, 0}, {0, 1, 0, 0, 1}, {0, 1, 0, 1, 0}, {0, 0, 0, 0, 0}};

static ln_case make_case(size_t rows, size_t n, ng_dtype xd, ng_dtype wd, const ln_params *pp,
                         size_t off, uint64_t seed) {
  ln_case c = {rows, n, xd, wd, pp->has_w, pp->has_b, pp->frozen_w, pp->frozen_b,
               pp->accumulate, off, 1e-5f, seed, 0, 0};
  return c;
}

/* On a shape that takes the vector path: every x dtype × parameter dtype f32/bf16 × parameter
 * configuration, and f16 parameters with both, the weight alone and the bias alone trained. On
 * one that takes the scalar path (odd n, offset): every x dtype with both trained, both frozen,
 * and a bias alone. (Every variant is a program to build, ~1 s cold on PoCL: the vector width
 * is independent of the frozen logic, so the full cross runs once.) */
static void test_matrix(void **state) {
  (void)state;
  const ng_dtype dts[] = {NG_F32, NG_BF16, NG_F16};
  const size_t f16_params[] = {1, 8, 11}, scalar_params[] = {0, 6, 11};
  uint64_t seed = 1;
  for (int xi = 0; xi < 3; xi++) {
    for (int wi = 0; wi < 2; wi++)
      for (size_t k = 0; k < NG_ARRAY_LEN(PARAMS); k++) {
        if (!PARAMS[k].has_w && !PARAMS[k].has_b && wi) continue; /* no parameter dtype */
        ln_case c = make_case(37, 520, dts[xi], dts[wi], &PARAMS[k], 0, seed++);
        run_case(&c);
      }
    for (size_t k = 0; k < 3; k++) {
      ln_case c = make_case(37, 520, dts[xi], NG_F16, &PARAMS[f16_params[k]], 0, seed++);
      run_case(&c);
      c = make_case(19, 333, dts[xi], dts[(xi + k) % 3], &PARAMS[scalar_params[k]], 3, seed++);
      run_case(&c);
    }
  }
}

/* make_case, then run_case on it */
static void run_made(size_t rows, size_t n, ng_dtype xd, ng_dtype wd, const ln_params *p,
                     size_t off, uint64_t seed) {
  ln_case c = make_case(rows, n, xd, wd, p, off, seed);
  run_case(&c);
}

/* N = 1, 7, 4097, 12000, 24576, 65536 with one row and many rows, offsets. */
static void test_shapes(void **state) {
  (void)state;
  /* 256 rows of 65536 rather than 1000: the host side of the check (data, double references)
   * is what costs there, and 256 rows already give every persistent group many rows. On a GPU,
   * 24576 in bf16 is a forward row of four vectors per work-item, kept in storage bits, and
   * 12000 one of two, with the weight and bias in registers. */
  const size_t shapes[][2] = {{1000, 1},    {1, 1},       {1000, 7},  {1, 7},
                              {1, 4097},    {1000, 4097}, {1, 65536}, {256, 65536},
                              {40, 24576},  {40, 12000}};
  for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
    run_made(shapes[i][0], shapes[i][1], NG_BF16, NG_F32, &PARAMS[i % 2 ? 0 : 1], 0, 100 + i);
    if (shapes[i][0] * shapes[i][1] > 5000000) continue;
    run_made(shapes[i][0], shapes[i][1], NG_F32, NG_BF16, &PARAMS[2 + i % 5], 8, 200 + i);
  }
  /* both parameters frozen on rows of 1025-2048 vectors: on NVIDIA a grid of a group a row
   * (NG_ROWS_MANY_2K) */
  run_made(40, 16384, NG_F16, NG_F32, &PARAMS[6], 0, 7);
  run_made(3, 12000, NG_BF16, NG_BF16, &PARAMS[6], 0, 8);
  /* 16-bit rows of 513-1024 vectors, more rows than an H100 has compute units: on NVIDIA the
   * forward's 256 × 4, a group a row (NG_ROWS_256X4) */
  run_made(300, 6000, NG_BF16, NG_F32, &PARAMS[1], 0, 10);
  /* 16-bit rows of 257-384 vectors: on NVIDIA the forward's 128 × 4 (NG_ROWS_FWD_128X4); rows
   * of 257-320 vectors in the backward, in calls of more than 16 rows an H100 compute unit,
   * groups of half the row (160 × 2 at 2504 and 2200, NG_ROWS_HALF_MID_320) with both parameters
   * trained and dB alone; 256 × 2 at 3072 and in a call of one row */
  run_made(2200, 2504, NG_BF16, NG_F32, &PARAMS[0], 0, 14);
  run_made(1, 3072, NG_BF16, NG_F32, &PARAMS[3], 0, 15);
  run_made(2200, 2200, NG_F16, NG_BF16, &PARAMS[2], 0, 16);
  run_made(300, 3072, NG_F16, NG_F32, &PARAMS[0], 0, 17);
  /* 16-bit rows of 513-640 vectors in the backward, more than 16 rows an H100 compute unit: on
   * NVIDIA groups of half the row rounded up to a warp, two a compute unit (NG_ROWS_FIT2_640:
   * 288 work-items at 4608, 288 at 4160 and 320 at 5000 with idle second slots): both trained,
   * partials summed in the kernel (2; its tree takes 256 of 288 work-items) and separately (1);
   * dB alone; both frozen */
  ng_test_env *e = ng_test_env_get();
  for (unsigned red = 1; red <= 2; red++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, red));
    run_made(2200, 4608, NG_BF16, NG_F32, &PARAMS[red - 1], 0, 10 + red);
  }
  ng_test_reset_overrides(e->ctx);
  run_made(2200, 4160, NG_F16, NG_BF16, &PARAMS[2], 8, 13);
  run_made(2200, 5000, NG_BF16, NG_F32, &PARAMS[6], 0, 14);
  /* both frozen on rows of 641-1024 vectors, more rows than 16 a compute unit: on NVIDIA a group
   * a row (NG_ROWS_MANY_2K) */
  run_made(2200, 7000, NG_BF16, NG_F32, &PARAMS[6], 0, 15);
  /* both frozen on rows that fill a group of 128 or 256, more than four rows for each group of a
   * 132-unit wave: on NVIDIA a group a row (NG_ROWS_FULL1) */
  run_made(8500, 1024, NG_BF16, NG_F32, &PARAMS[6], 0, 16);
  run_made(4300, 2048, NG_F16, NG_BF16, &PARAMS[6], 0, 17);
  /* an offset that breaks the 16-byte alignment of the parameters only: scalar path */
  run_made(33, 64, NG_F16, NG_F16, &PARAMS[0], 5, 9);
}

/* A mean 10⁴ times the spread: E[x²] − mean² in f32 would lose every digit of the variance. */
static void test_large_mean(void **state) {
  (void)state;
  ln_case c = make_case(16, 1000, NG_F32, NG_F32, &PARAMS[0], 0, 31);
  c.x_mean = 1000.0;
  c.x_std = 0.1;
  run_case(&c);
  c.xd = NG_BF16; /* bf16 keeps little of the spread, but the statistics must still be right */
  c.x_mean = 100.0;
  c.x_std = 3.0;
  run_case(&c);
}

/* The GPU-shaped kernels (a row per work-group, local-memory reductions, dW/dB in registers or
 * in the partial rows) on whatever device runs the tests. */
static void test_workgroup_shape(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 64));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, 2));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, 5));
  /* n ≤ 64·2·8: partials in registers; above: partial rows; odd n: scalar path */
  const size_t shapes[][2] = {{50, 1}, {50, 1024}, {50, 1032}, {7, 4097}, {300, 96}};
  /* one parameter configuration per x dtype (each is a program to build): both gradients,
   * dW alone, dB alone; then both frozen, and a bias without a weight */
  const size_t configs[] = {1, 5, 2};
  uint64_t seed = 300;
  for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++)
    for (int xi = 0; xi < 3; xi++) {
      ln_case c = make_case(shapes[i][0], shapes[i][1], (ng_dtype)xi, xi == 1 ? NG_F32 : NG_BF16,
                            &PARAMS[configs[xi]], i == 4 ? 8 : 0, seed++);
      run_case(&c);
    }
  for (size_t i = 1; i < 4; i += 2) {
    ln_case c = make_case(shapes[i][0], shapes[i][1], NG_BF16, NG_BF16, &PARAMS[6], 0, seed++);
    run_case(&c);
    c = make_case(shapes[i][0], shapes[i][1], NG_BF16, NG_BF16, &PARAMS[11], 0, seed++);
    run_case(&c);
  }
  /* rows beyond the registers stream, their statistics merged from each work-item's chunks
   * (ng_layernorm_fwd_stream), and rows held in registers (ng_layernorm_fwd, two work-group
   * sums): a mean 10⁴ times the spread must still give the variance */
  for (size_t i = 0; i < 4; i++) {
    ln_case c = make_case(i % 2 ? 7 : 1, i < 2 ? 4097 : 1000 - 8 * (i - 2), NG_F32, NG_F32,
                          &PARAMS[0], 0, seed++);
    c.x_mean = 1000.0;
    c.x_std = 0.1;
    run_case(&c);
  }
  /* four and eight register slots: the forward keeps 16-bit rows in their storage bits (whole,
   * with idle slots, and beyond the registers) */
  const size_t wide[][3] = {{4, 9, 2048}, {4, 5, 1800}, {8, 3, 4096}, {8, 3, 4160}};
  /* (a partly idle last slot is where PoCL once stored past the row: NG_UNROLL_STORES) */
  for (size_t i = 0; i < NG_ARRAY_LEN(wide); i++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, (unsigned)wide[i][0]));
    ln_case c = make_case(wide[i][1], wide[i][2], i % 2 ? NG_F16 : NG_BF16, NG_F32, &PARAMS[1],
                          0, seed++);
    run_case(&c);
  }
  /* the forward's launch of 16-bit rows of 513-1024 vectors on NVIDIA (NG_ROWS_256X4): 256 × 4,
   * a group a row, the last slot partly idle (8000) or empty (6000) */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 256));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, 4));
  ln_case f = make_case(5, 8000, NG_F16, NG_F32, &PARAMS[0], 0, seed++);
  run_case(&f);
  f = make_case(6, 6000, NG_BF16, NG_F32, &PARAMS[1], 0, seed++);
  run_case(&f);
  /* one slot and rows shorter than the group (125 vectors): on a CPU the host gives it two
   * slots, as PoCL 3.1 stored past the row from the idle work-items */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 128));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, 1));
  f = make_case(5, 1000, NG_BF16, NG_F32, &PARAMS[1], 8, seed++);
  run_case(&f);
  /* groups of 1024 with two slots: the weight and bias held in registers across rows */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 1024));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, 2));
  ln_case c = make_case(7, 16000, NG_BF16, NG_BF16, &PARAMS[1], 0, seed++);
  run_case(&c);
  c = make_case(3, 16000, NG_BF16, NG_F32, &PARAMS[8], 0, seed++);
  run_case(&c);
  /* multiples of 32 that are not powers of two (an override's, tuning.txt's or the table's: the
   * sums fold the group into its largest power of two first; two cases, as PoCL compiles each
   * group size's kernels anew, tens of seconds cold): a row held exactly (96 × 2 × 8 = 1536)
   * and one beyond the registers (streamed) */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 96));
  c = make_case(7, 1536, NG_BF16, NG_F32, &PARAMS[1], 0, seed++);
  run_case(&c);
  c = make_case(5, 1544, NG_F16, NG_BF16, &PARAMS[5], 8, seed++);
  run_case(&c);
  /* the H200 table's forward fits at their own lengths (src/tuning.c): 288 × 4 at 9216 and
   * 416 × 4 at 13312 (a power of two and an eighth, five eighths) */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, 4));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 288));
  c = make_case(3, 9216, NG_BF16, NG_F32, &PARAMS[1], 0, seed++);
  run_case(&c);
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 416));
  c = make_case(2, 13312, NG_F16, NG_F32, &PARAMS[0], 0, seed++);
  run_case(&c);
  /* ... and its backward's 192 × 4 at 5632-6144 (the twelfth round): a row held with 64 of its
   * 768 slots idle, both frozen on a grid of a few groups; a row held exactly, dB alone */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 192));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, 2));
  c = make_case(5, 5632, NG_BF16, NG_F32, &PARAMS[6], 0, seed++);
  run_case(&c);
  c = make_case(3, 6144, NG_F16, NG_BF16, &PARAMS[2], 0, seed++);
  run_case(&c);
  ng_test_reset_overrides(e->ctx);
}

/* dW and dB summed by the backward kernel's last groups (NG_TUNE_FUSED_REDUCE, the default on
 * NVIDIA): one group, a few, more groups than rows; both gradients, each alone (the other frozen
 * or absent), accumulate; vector and scalar rows. */
static void test_fused_reduce(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_test_fused_reduce_shape(e->ctx, 64, 2);
  /* the last: two per compute unit, where the reducers keep 16 rows in flight */
  const unsigned groups[] = {1, 5, 40, ng_test_two_per_cu()};
  const size_t shapes[][2] = {{50, 1000}, {33, 77}, {1, 1024}};
  const size_t configs[] = {0, 1, 2, 5, 8, 11}; /* both, both +=, dB (W frozen), dW +=, W alone +=, B alone += */
  uint64_t seed = 900;
  for (size_t g = 0; g < NG_ARRAY_LEN(groups); g++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, groups[g]));
    for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++)
      for (size_t k = (g + i) % 2; k < NG_ARRAY_LEN(configs); k += 2) {
        ln_case c = make_case(shapes[i][0], shapes[i][1], (ng_dtype)((g + k) % 3),
                              (ng_dtype)((g + i + k) % 3), &PARAMS[configs[k]], i == 1 ? 3 : 0,
                              seed++);
        run_case(&c);
      }
  }
  ng_test_reset_overrides(e->ctx);
}

/* bf16 rows split across work-groups that exchange their shares of the row sums (the default
 * for long rows on NVIDIA, NG_TUNE_FUSED_REDUCE = 2 elsewhere); as test_split_rows in
 * test_rmsnorm.c: 64 work-items of one vector; the backward's slices of 64·2 vectors where at
 * most 16 cover the row (src/ops/layernorm.c), else of 64·4. n = 8·100 is one slice of 64·2
 * and 8·200 two, or one of 64·4 where only one is allowed (CPU devices); 8·1000 eight of 64·2
 * and 8·4000 sixteen of 64·4 (GPUs; elsewhere the column split or rows streamed twice). The
 * forward's slices are of 64·4 vectors: one at 8·100 and 8·200, four at 8·1000 and sixteen at
 * 8·4000. Sets of one group, a few, more than the rows and the default; each parameter
 * configuration, accumulate, offsets; f16 rows (the backward splits as bf16's, the forward too in
 * calls of more rows than compute units, its pairs widened one by one and published ahead on
 * NVIDIA) and f32 rows (slices of half the vectors: the backward's of 64·1 where at most 16
 * cover the row, else 64·2, the forward's of 64·2; n = 8·100 is one slice of 64·2 on a CPU
 * device). */
static void test_split_rows(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_test_fused_reduce_shape(e->ctx, 64, 1); /* NG_TUNE_FUSED_REDUCE = 2 also splits rows */
  const size_t shapes[][2] = {{37, 1600}, {5, 8000}, {40, 8000}, {3, 32000}};
  const unsigned groups[] = {NG_TUNE_AUTO, 1, 7, 64};
  const size_t configs[] = {0, 1, 2, 5, 8, 11, 13}; /* as test_fused_reduce, and none at all */
  uint64_t seed = 1300;
  for (size_t g = 0; g < NG_ARRAY_LEN(groups); g++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, groups[g]));
    /* the split backward's partials summed in its kernel (2) or by the separate kernel (3) */
    NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, g / 2 % 2 ? 3 : 2));
    for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
      const size_t k = (g * 4 + i) % NG_ARRAY_LEN(configs);
      const ng_dtype xd = (g + i) % 4 == 1 ? NG_F32 : (g + i) % 4 == 3 ? NG_F16 : NG_BF16;
      ln_case c = make_case(shapes[i][0], shapes[i][1], xd,
                            (ng_dtype)((g + i) % 3), &PARAMS[configs[k]], i == 1 ? 8 : 0, seed++);
      run_case(&c);
    }
  }
  /* the backward's slices of 64·2 vectors (the weight in local memory) and the forward's of 64·4
   * (the weight and bias read once): one slice, which every device takes, each parameter
   * configuration; then means 33 times the spread, whose statistics the forward's slices merge
   * (one slice; eight and four on GPUs) */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, NG_TUNE_AUTO));
  for (size_t k = 0; k < NG_ARRAY_LEN(configs) + 2; k++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, k % 2 ? 3 : 2));
    const bool wide = k == NG_ARRAY_LEN(configs) + 1;
    const ng_dtype xd = k < NG_ARRAY_LEN(configs) && k % 3 == 1 ? NG_F32 : NG_BF16;
    ln_case c = make_case(wide ? 2 : 9, wide ? 8 * 1000 : 8 * 100, xd, (ng_dtype)(k % 3),
                          &PARAMS[configs[k % NG_ARRAY_LEN(configs)]], k % 2 ? 8 : 0, seed++);
    if (k >= NG_ARRAY_LEN(configs)) {
      c.x_mean = 100.0;
      c.x_std = 3.0;
    }
    run_case(&c);
  }
  /* split kernels on groups of 96, a multiple of 32 that is not a power of two (an override's,
   * tuning.txt's or the table's): both parameters trained, the weight alone frozen, both frozen */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 96));
  for (size_t k = 0; k < 3; k++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, k == 1 ? 3 : 2));
    ln_case c = make_case(k == 2 ? 40 : 5, k == 1 ? 1544 : 8000, k == 1 ? NG_F16 : NG_BF16,
                          (ng_dtype)k, &PARAMS[k == 0 ? 1 : k == 1 ? 2 : 6], k == 1 ? 8 : 0,
                          seed++);
    run_case(&c);
  }
  /* the device's own launch: f16 rows of 2600 vectors, three slices of 256·4 on NVIDIA, in a call
   * of more rows than an H100 has compute units (a CPU device takes its row loop) */
  ng_test_reset_overrides(e->ctx);
  ln_case f = make_case(150, 8 * 2600, NG_F16, NG_F32, &PARAMS[configs[0]], 8, seed++);
  run_case(&f);
  ng_test_reset_overrides(e->ctx);
}

/* Backward is the gradient of forward: L = Σ y·g, checked by central differences in f32. */
static double loss(ng_test_env *e, const ng_layernorm_params *p, const float *x, const float *w,
                   const float *b, const float *g) {
  size_t cnt = p->rows * p->n;
  cl_mem bx = ng_test_upload(NG_F32, x, cnt, 0, 0), bw = ng_test_upload(NG_F32, w, p->n, 0, 0);
  cl_mem bb = ng_test_upload(NG_F32, b, p->n, 0, 0), by = ng_test_upload(NG_F32, NULL, cnt, 0, 0);
  cl_mem bm = ng_test_upload(NG_F32, NULL, p->rows, 0, 0);
  cl_mem br = ng_test_upload(NG_F32, NULL, p->rows, 0, 0);
  NG_OK(ng_layernorm_forward(e->ctx, e->queue, p, ng_tensor_of(bx, 0, NG_F32),
                             ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(bb, 0, NG_F32),
                             ng_tensor_of(by, 0, NG_F32), ng_tensor_of(bm, 0, NG_F32),
                             ng_tensor_of(br, 0, NG_F32), 0, NULL, NULL));
  float *y = malloc(cnt * sizeof(float));
  ng_test_download(by, NG_F32, 0, cnt, y);
  double l = 0;
  for (size_t i = 0; i < cnt; i++) l += (double)y[i] * g[i];
  free(y);
  clReleaseMemObject(bx), clReleaseMemObject(bw), clReleaseMemObject(bb);
  clReleaseMemObject(by), clReleaseMemObject(bm), clReleaseMemObject(br);
  return l;
}

static void fd_check(ng_test_env *e, const ng_layernorm_params *p, float *v, size_t count,
                     const float *got, const char *name, const float *x, const float *w,
                     const float *b, const float *g) {
  const float h = 1e-2f;
  for (size_t i = 0; i < count; i++) {
    float keep = v[i];
    v[i] = keep + h;
    double lp = loss(e, p, x, w, b, g);
    v[i] = keep - h;
    double lm = loss(e, p, x, w, b, g);
    v[i] = keep;
    double fd = (lp - lm) / (2.0 * h);
    if (fabs(fd - got[i]) > 2e-3 * (1 + fabs(fd)))
      fail_msg("%s[%zu]: backward %.6g, finite difference %.6g", name, i, (double)got[i], fd);
  }
}

static void test_finite_difference(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_layernorm_params p = {3, 13, 1e-5f};
  size_t cnt = p.rows * p.n;
  ng_rng rng;
  ng_rng_seed(&rng, 77);
  float *x = ng_test_random(&rng, NG_F32, cnt, 0.2, 1.0);
  float *w = ng_test_random(&rng, NG_F32, p.n, 1.0, 0.3);
  float *b = ng_test_random(&rng, NG_F32, p.n, 0.0, 0.3);
  float *g = ng_test_random(&rng, NG_F32, cnt, 0.0, 1.0);
  cl_mem bx = ng_test_upload(NG_F32, x, cnt, 0, 0), bw = ng_test_upload(NG_F32, w, p.n, 0, 0);
  cl_mem bb = ng_test_upload(NG_F32, b, p.n, 0, 0), by = ng_test_upload(NG_F32, NULL, cnt, 0, 0);
  cl_mem bm = ng_test_upload(NG_F32, NULL, p.rows, 0, 0);
  cl_mem br = ng_test_upload(NG_F32, NULL, p.rows, 0, 0);
  cl_mem bg = ng_test_upload(NG_F32, g, cnt, 0, 0), bdx = ng_test_upload(NG_F32, NULL, cnt, 0, 0);
  cl_mem bdw = ng_test_upload(NG_F32, NULL, p.n, 0, 0);
  cl_mem bdb = ng_test_upload(NG_F32, NULL, p.n, 0, 0);
  NG_OK(ng_layernorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, 0, NG_F32),
                             ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(bb, 0, NG_F32),
                             ng_tensor_of(by, 0, NG_F32), ng_tensor_of(bm, 0, NG_F32),
                             ng_tensor_of(br, 0, NG_F32), 0, NULL, NULL));
  NG_OK(ng_layernorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bg, 0, NG_F32),
                              ng_tensor_of(bx, 0, NG_F32), ng_tensor_of(bw, 0, NG_F32),
                              ng_tensor_of(bb, 0, NG_F32), ng_tensor_of(bm, 0, NG_F32),
                              ng_tensor_of(br, 0, NG_F32), ng_tensor_of(bdx, 0, NG_F32),
                              ng_tensor_of(bdw, 0, NG_F32), ng_tensor_of(bdb, 0, NG_F32), 0,
                              ng_tensor_none(), 0, NULL, NULL));
  float *dx = malloc(cnt * sizeof(float)), *dw = malloc(p.n * sizeof(float));
  float *db = malloc(p.n * sizeof(float));
  ng_test_download(bdx, NG_F32, 0, cnt, dx);
  ng_test_download(bdw, NG_F32, 0, p.n, dw);
  ng_test_download(bdb, NG_F32, 0, p.n, db);
  fd_check(e, &p, x, cnt, dx, "dx", x, w, b, g);
  fd_check(e, &p, w, p.n, dw, "dweight", x, w, b, g);
  fd_check(e, &p, b, p.n, db, "dbias", x, w, b, g);
  free(x), free(w), free(b), free(g), free(dx), free(dw), free(db);
  cl_mem all[] = {bx, bw, bb, by, bm, br, bg, bdx, bdw, bdb};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++) clReleaseMemObject(all[i]);
}

/* Same inputs, same bits: dW and dB have no float atomics; a caller's scratch gives the same
 * bits; the scratch size follows what is trained. */
/* After ng_prebuild("layernorm"), no forward or backward of any x dtype, parameter set
 * (weight and bias present or absent, each trained or frozen), parameter dtype or alignment gets
 * a program it does not already hold. */
static void test_prebuild(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_context *c = NULL; /* a context of its own: the shared one holds earlier tests' programs */
  NG_OK(ng_context_create(e->cl_ctx, e->device, &c));
  if (!e->is_cpu) { /* work-group, slots and prefetch follow the row length on GPUs: pinned, the
                     * list stays small (about a thousand programs, minutes to build, without) */
    NG_OK(ng_context_override(c, NG_TUNE_WORKGROUP, 64));
    NG_OK(ng_context_override(c, NG_TUNE_REG_COLS, 2));
    NG_OK(ng_context_override(c, NG_TUNE_PREFETCH, 1));
  }
  unsigned count = 0;
  NG_OK(ng_prebuild(c, "layernorm", &count));
  /* one launch shape on a CPU: 2 alignments × 3 x dtypes × (10 forwards: no weight with a bias of
   * each dtype or none, a weight of each dtype with or without its bias; 14 backwards: frozen 4,
   * dW 3, dB 3 + 1 without a weight, both 3) + 3 reductions */
  if (e->is_cpu) assert_int_equal(count, 147);
  ng_context_stats before, after;
  NG_OK(ng_context_get_stats(c, &before));
  const ng_dtype fl[] = {NG_F32, NG_F16, NG_BF16};
  for (int xi = 0; xi < 3; xi++)
    for (int wi = -1; wi < 3; wi++)
      for (int bi = -1; bi < 3; bi++)
        for (int t = 0; t < 4; t++) {
          if (wi >= 0 && bi >= 0 && bi != wi) continue;
          if ((t & 1 && wi < 0) || (t & 2 && bi < 0)) continue;
          const size_t rows = 3, n = 40, cnt = rows * n, off = (size_t)(xi + wi + bi + t) % 2 * 3;
          const ng_dtype xd = fl[xi], wd = fl[wi >= 0 ? wi : 0], bd = fl[bi >= 0 ? bi : 0];
          cl_mem bx = ng_test_upload(xd, NULL, cnt, off, 0), by = ng_test_upload(xd, NULL, cnt, off, 0);
          cl_mem bdx = ng_test_upload(xd, NULL, cnt, off, 0);
          cl_mem bw = ng_test_upload(wd, NULL, n, off, 0), bb = ng_test_upload(bd, NULL, n, off, 0);
          cl_mem bdw = ng_test_upload(wd, NULL, n, off, 0), bdb = ng_test_upload(bd, NULL, n, off, 0);
          cl_mem bm = ng_test_upload(NG_F32, NULL, rows, off, 0);
          cl_mem br = ng_test_upload(NG_F32, NULL, rows, off, 0);
          ng_layernorm_params p = {rows, n, 1e-5f};
          const ng_tensor tw = wi >= 0 ? ng_tensor_of(bw, off, wd) : ng_tensor_none();
          const ng_tensor tb = bi >= 0 ? ng_tensor_of(bb, off, bd) : ng_tensor_none();
          const ng_tensor tm = ng_tensor_of(bm, off, NG_F32), tr = ng_tensor_of(br, off, NG_F32);
          NG_OK(ng_layernorm_forward(c, e->queue, &p, ng_tensor_of(bx, off, xd), tw, tb,
                                     ng_tensor_of(by, off, xd), tm, tr, 0, NULL, NULL));
          NG_OK(ng_layernorm_backward(
              c, e->queue, &p, ng_tensor_of(by, off, xd), ng_tensor_of(bx, off, xd), tw, tb, tm,
              tr, ng_tensor_of(bdx, off, xd), t & 1 ? ng_tensor_of(bdw, off, wd) : ng_tensor_none(),
              t & 2 ? ng_tensor_of(bdb, off, bd) : ng_tensor_none(), 0, ng_tensor_none(), 0, NULL,
              NULL));
          CL_OK(clFinish(e->queue));
          cl_mem ms[] = {bx, by, bdx, bw, bb, bdw, bdb, bm, br};
          for (size_t i = 0; i < NG_ARRAY_LEN(ms); i++) clReleaseMemObject(ms[i]);
        }
  NG_OK(ng_context_get_stats(c, &after));
  assert_int_equal(after.programs_built, before.programs_built);
  assert_int_equal(after.disk_hits, before.disk_hits);
  assert_int_equal(after.disk_misses, before.disk_misses);
  ng_context_release(c);
}

static void test_deterministic(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_layernorm_params p = {513, 1000, 1e-6f};
  size_t cnt = p.rows * p.n;
  ng_rng rng;
  ng_rng_seed(&rng, 5);
  float *x = ng_test_random(&rng, NG_BF16, cnt, 0, 1), *dy = ng_test_random(&rng, NG_BF16, cnt, 0, 1);
  float *w = ng_test_random(&rng, NG_F32, p.n, 1, 0.1), *m = malloc(p.rows * sizeof(float));
  float *r = malloc(p.rows * sizeof(float));
  for (size_t i = 0; i < p.rows; i++) m[i] = 0.1f, r[i] = 0.9f;
  cl_mem bx = ng_test_upload(NG_BF16, x, cnt, 0, 0), bdy = ng_test_upload(NG_BF16, dy, cnt, 0, 0);
  cl_mem bw = ng_test_upload(NG_F32, w, p.n, 0, 0), bm = ng_test_upload(NG_F32, m, p.rows, 0, 0);
  cl_mem br = ng_test_upload(NG_F32, r, p.rows, 0, 0);
  cl_mem bdx = ng_test_upload(NG_BF16, NULL, cnt, 0, 0);
  cl_mem bdw = ng_test_upload(NG_F32, NULL, p.n, 0, 0), bdb = ng_test_upload(NG_F32, NULL, p.n, 0, 0);
  float *first = malloc(2 * p.n * sizeof(float)), *again = malloc(2 * p.n * sizeof(float));
  size_t bytes = 0;
  NG_OK(ng_layernorm_backward_scratch_size(e->ctx, &p, 1, 1, &bytes));
  assert_true(bytes > 0);
  for (int it = 0; it < 4; it++) {
    cl_mem sc = it == 3 ? ng_test_upload(NG_F32, NULL, bytes / 4, 8, 0) : NULL;
    NG_OK(ng_layernorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, 0, NG_BF16),
                                ng_tensor_of(bx, 0, NG_BF16), ng_tensor_of(bw, 0, NG_F32),
                                ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(bm, 0, NG_F32),
                                ng_tensor_of(br, 0, NG_F32), ng_tensor_of(bdx, 0, NG_BF16),
                                ng_tensor_of(bdw, 0, NG_F32), ng_tensor_of(bdb, 0, NG_F32), 0,
                                sc ? ng_tensor_of(sc, 8, NG_F32) : ng_tensor_none(), 0, NULL,
                                NULL));
    float *dst = it ? again : first;
    ng_test_download(bdw, NG_F32, 0, p.n, dst);
    ng_test_download(bdb, NG_F32, 0, p.n, dst + p.n);
    if (it) assert_memory_equal(first, again, 2 * p.n * sizeof(float));
    if (sc) clReleaseMemObject(sc);
  }
  /* a scratch at an offset that is no multiple of 8 (the op rounds it up, within the query's
   * headroom): dW and dB the same bits, dx the both-frozen call's; without the headroom the
   * call is refused (RMSNorm's test_deterministic has the story) */
  cl_mem sc3 = ng_test_upload(NG_F32, NULL, bytes / 4, 5, 0);
  cl_mem sc3s = ng_test_upload(NG_F32, NULL, (bytes - NG_SCRATCH_VEC_PAD) / 4, 5, 0);
  float *dx_db = malloc(cnt * sizeof(float)), *dx_frozen = malloc(cnt * sizeof(float));
  for (int k = 0; k < 3; k++) {
    const ng_tensor dw = k == 1 ? ng_tensor_none() : ng_tensor_of(bdw, 0, NG_F32);
    const ng_tensor db = k == 1 ? ng_tensor_none() : ng_tensor_of(bdb, 0, NG_F32);
    NG_EXPECT_STATUS(
        ng_layernorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, 0, NG_BF16),
                              ng_tensor_of(bx, 0, NG_BF16), ng_tensor_of(bw, 0, NG_F32),
                              ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(bm, 0, NG_F32),
                              ng_tensor_of(br, 0, NG_F32), ng_tensor_of(bdx, 0, NG_BF16), dw, db,
                              0, ng_tensor_of(k == 2 ? sc3s : sc3, 5, NG_F32), 0, NULL, NULL),
        k == 2 ? NG_ERR_BUFFER_TOO_SMALL : NG_SUCCESS);
    if (k == 2) break;
    ng_test_download(bdx, NG_BF16, 0, cnt, k ? dx_frozen : dx_db);
    if (k) continue;
    ng_test_download(bdw, NG_F32, 0, p.n, again);
    ng_test_download(bdb, NG_F32, 0, p.n, again + p.n);
    assert_memory_equal(first, again, 2 * p.n * sizeof(float));
  }
  assert_memory_equal(dx_db, dx_frozen, cnt * sizeof(float));
  size_t one_w = 0, one_b = 0, none = 1;
  NG_OK(ng_layernorm_backward_scratch_size(e->ctx, &p, 1, 0, &one_w));
  NG_OK(ng_layernorm_backward_scratch_size(e->ctx, &p, 0, 1, &one_b));
  NG_OK(ng_layernorm_backward_scratch_size(e->ctx, &p, 0, 0, &none));
  /* two sections of partial rows, one, none; the headroom once */
  assert_int_equal((one_w - NG_SCRATCH_VEC_PAD) * 2 + NG_SCRATCH_VEC_PAD, bytes);
  assert_int_equal(one_b, one_w);
  assert_int_equal(none, 0);
  free(x), free(dy), free(w), free(m), free(r), free(first), free(again), free(dx_db);
  free(dx_frozen);
  cl_mem all[] = {bx, bdy, bw, bm, br, bdx, bdw, bdb, sc3, sc3s};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++) clReleaseMemObject(all[i]);
}

/* ---- validation: every error is reported before anything is written ------------------------- */
enum { R = 4, N = 24, CNT = R * N };

typedef struct fwd_args {
  ng_layernorm_params p;
  ng_tensor x, w, b, y, mean, rstd;
} fwd_args;
typedef struct bwd_args {
  ng_layernorm_params p;
  ng_tensor dy, x, mean, rstd, dx, w, b, dw, db, scratch;
  unsigned flags;
} bwd_args;

/* Tensors in the order the loops below test them: rows·n-sized, rows-sized, then n-sized. */
static ng_tensor *fwd_field(fwd_args *f, size_t i) {
  ng_tensor *all[] = {&f->x, &f->y, &f->mean, &f->rstd, &f->w, &f->b};
  return all[i];
}
static ng_tensor *bwd_field(bwd_args *a, size_t i) {
  ng_tensor *all[] = {&a->dy, &a->x, &a->dx, &a->mean, &a->rstd, &a->w, &a->b, &a->dw, &a->db};
  return all[i];
}

static ng_status call_fwd(const fwd_args *a) {
  ng_test_env *e = ng_test_env_get();
  cl_event ev = NULL;
  ng_status st = ng_layernorm_forward(e->ctx, e->queue, &a->p, a->x, a->w, a->b, a->y, a->mean,
                                      a->rstd, 0, NULL, &ev);
  if (st != NG_SUCCESS && ev) fail_msg("a failed call returned an event");
  if (ev) clReleaseEvent(ev);
  return st;
}
static ng_status call_bwd(const bwd_args *a) {
  ng_test_env *e = ng_test_env_get();
  cl_event ev = NULL;
  ng_status st = ng_layernorm_backward(e->ctx, e->queue, &a->p, a->dy, a->x, a->w, a->b, a->mean,
                                       a->rstd, a->dx, a->dw, a->db, a->flags, a->scratch, 0,
                                       NULL, &ev);
  if (st != NG_SUCCESS && ev) fail_msg("a failed call returned an event");
  if (ev) clReleaseEvent(ev);
  return st;
}

static void test_errors(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  float v[CNT];
  for (int i = 0; i < CNT; i++) v[i] = 0.01f * (float)i;
  cl_mem x = ng_test_upload(NG_BF16, v, CNT, 0, 0), dy = ng_test_upload(NG_BF16, v, CNT, 0, 0);
  cl_mem w = ng_test_upload(NG_F32, v, N, 0, 0), bias = ng_test_upload(NG_F32, v, N, 0, 0);
  cl_mem st = ng_test_upload(NG_F32, v, R, 0, 0);
  /* outputs: poison only, checked at the end */
  cl_mem y = ng_test_upload(NG_BF16, NULL, CNT, 0, 0), dx = ng_test_upload(NG_BF16, NULL, CNT, 0, 0);
  cl_mem mean = ng_test_upload(NG_F32, NULL, R, 0, 0), rstd = ng_test_upload(NG_F32, NULL, R, 0, 0);
  cl_mem dw = ng_test_upload(NG_F32, NULL, N, 0, 0), db = ng_test_upload(NG_F32, NULL, N, 0, 0);
  cl_mem small_x = ng_test_upload(NG_BF16, NULL, CNT - 1, 0, 0);
  cl_mem small_n = ng_test_upload(NG_F32, NULL, N - 1, 0, 0);
  cl_mem small_r = ng_test_upload(NG_F32, NULL, R - 1, 0, 0);

  const ng_layernorm_params P = {R, N, 1e-5f};
  const fwd_args F = {P,
                      ng_tensor_of(x, 0, NG_BF16),
                      ng_tensor_of(w, 0, NG_F32),
                      ng_tensor_of(bias, 0, NG_F32),
                      ng_tensor_of(y, 0, NG_BF16),
                      ng_tensor_of(mean, 0, NG_F32),
                      ng_tensor_of(rstd, 0, NG_F32)};
  const bwd_args B = {P,
                      ng_tensor_of(dy, 0, NG_BF16),
                      ng_tensor_of(x, 0, NG_BF16),
                      ng_tensor_of(st, 0, NG_F32),
                      ng_tensor_of(st, 0, NG_F32),
                      ng_tensor_of(dx, 0, NG_BF16),
                      ng_tensor_of(w, 0, NG_F32),
                      ng_tensor_of(bias, 0, NG_F32),
                      ng_tensor_of(dw, 0, NG_F32),
                      ng_tensor_of(db, 0, NG_F32),
                      ng_tensor_none(),
                      0};
  fwd_args f;
  bwd_args a;

  NG_EXPECT_STATUS(ng_layernorm_forward(NULL, e->queue, &P, F.x, F.w, F.b, F.y, F.mean, F.rstd, 0,
                                        NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_layernorm_forward(e->ctx, NULL, &P, F.x, F.w, F.b, F.y, F.mean, F.rstd, 0,
                                        NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_layernorm_forward(e->ctx, e->queue, NULL, F.x, F.w, F.b, F.y, F.mean,
                                        F.rstd, 0, NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_layernorm_backward(e->ctx, e->queue, NULL, B.dy, B.x, B.w, B.b, B.mean,
                                         B.rstd, B.dx, B.dw, B.db, 0, B.scratch, 0, NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_layernorm_backward(e->ctx, NULL, &P, B.dy, B.x, B.w, B.b, B.mean, B.rstd,
                                         B.dx, B.dw, B.db, 0, B.scratch, 0, NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  size_t bytes;
  NG_EXPECT_STATUS(ng_layernorm_backward_scratch_size(NULL, &P, 1, 1, &bytes), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_layernorm_backward_scratch_size(e->ctx, &P, 1, 1, NULL), NG_ERR_NULL_HANDLE);
  ng_layernorm_params zero = {0, N, 1e-5f};
  NG_EXPECT_STATUS(ng_layernorm_backward_scratch_size(e->ctx, &zero, 1, 1, &bytes),
                   NG_ERR_INVALID_SHAPE);

  const struct {
    size_t rows, n;
    float eps;
    ng_status want;
  } pc[] = {{0, N, 1e-5f, NG_ERR_INVALID_SHAPE},     {R, 0, 1e-5f, NG_ERR_INVALID_SHAPE},
            {R, N, -1e-5f, NG_ERR_INVALID_VALUE},    {R, N, NAN, NG_ERR_INVALID_VALUE},
            {R, N, -INFINITY, NG_ERR_INVALID_VALUE}, {(size_t)1 << 32, N, 1e-5f, NG_ERR_INDEX_OVERFLOW},
            {R, (size_t)1 << 32, 1e-5f, NG_ERR_INDEX_OVERFLOW}};
  for (size_t i = 0; i < NG_ARRAY_LEN(pc); i++) {
    f = F;
    f.p.rows = pc[i].rows, f.p.n = pc[i].n, f.p.eps = pc[i].eps;
    NG_EXPECT_STATUS(call_fwd(&f), pc[i].want);
    a = B;
    a.p = f.p;
    NG_EXPECT_STATUS(call_bwd(&a), pc[i].want);
  }
  a = B;
  a.flags = 4;
  NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_INVALID_VALUE);

  /* forward tensors: missing, one element too small, offset past the end, wrong dtype */
  for (size_t i = 0; i < 6; i++) {
    const bool rows_sized = i == 2 || i == 3, n_sized = i >= 4;
    cl_mem small = rows_sized ? small_r : n_sized ? small_n : small_x;
    const size_t len = rows_sized ? R : n_sized ? N : CNT;
    ng_tensor *t;
    if (!n_sized) { /* weight and bias are optional */
      f = F;
      fwd_field(&f, i)->mem = NULL;
      NG_EXPECT_STATUS(call_fwd(&f), NG_ERR_NULL_BUFFER);
    }
    f = F;
    t = fwd_field(&f, i);
    t->mem = small;
    NG_EXPECT_STATUS(call_fwd(&f), NG_ERR_BUFFER_TOO_SMALL);
    t->offset = len - 1;
    NG_EXPECT_STATUS(call_fwd(&f), NG_ERR_OFFSET_OUT_OF_RANGE);
    f = F;
    fwd_field(&f, i)->offset = 1;
    NG_EXPECT_STATUS(call_fwd(&f), NG_ERR_BUFFER_TOO_SMALL);
    f = F;
    t = fwd_field(&f, i);
    /* x and y must match, weight and bias too; the statistics are f32 */
    t->dtype = NG_F16;
    NG_EXPECT_STATUS(call_fwd(&f), rows_sized ? NG_ERR_UNSUPPORTED_DTYPE : NG_ERR_DTYPE_MISMATCH);
    t->dtype = NG_I32;
    NG_EXPECT_STATUS(call_fwd(&f), NG_ERR_UNSUPPORTED_DTYPE);
  }
  /* backward tensors */
  for (size_t i = 0; i < 9; i++) {
    const bool rows_sized = i == 3 || i == 4, n_sized = i >= 5;
    cl_mem small = rows_sized ? small_r : n_sized ? small_n : small_x;
    const size_t len = rows_sized ? R : n_sized ? N : CNT;
    ng_tensor *t;
    if (!n_sized) { /* parameters and their gradients are optional */
      a = B;
      bwd_field(&a, i)->mem = NULL;
      NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_NULL_BUFFER);
    }
    a = B;
    t = bwd_field(&a, i);
    t->mem = small;
    NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_BUFFER_TOO_SMALL);
    t->offset = len - 1;
    NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_OFFSET_OUT_OF_RANGE);
    a = B;
    bwd_field(&a, i)->offset = 1;
    NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_BUFFER_TOO_SMALL);
    a = B;
    t = bwd_field(&a, i);
    /* each must match x, or its parameter; the statistics are f32 */
    t->dtype = NG_F16;
    NG_EXPECT_STATUS(call_bwd(&a), rows_sized ? NG_ERR_UNSUPPORTED_DTYPE : NG_ERR_DTYPE_MISMATCH);
    t->dtype = NG_I64;
    NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_UNSUPPORTED_DTYPE);
  }
  /* a gradient for a parameter the layer does not have */
  a = B;
  a.w = ng_tensor_none();
  NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_INVALID_VALUE);
  a = B;
  a.b = ng_tensor_none();
  NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_INVALID_VALUE);
  /* scratch too small (for either section) or not f32 */
  a = B;
  a.scratch = ng_tensor_of(small_n, 0, NG_F32);
  NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_BUFFER_TOO_SMALL);
  a.scratch.dtype = NG_BF16;
  NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_UNSUPPORTED_DTYPE);
  size_t one = 0;
  NG_OK(ng_layernorm_backward_scratch_size(e->ctx, &P, 1, 0, &one));
  cl_mem sc1 = ng_test_upload(NG_F32, NULL, one / 4, 0, 0);
  a = B;
  a.scratch = ng_tensor_of(sc1, 0, NG_F32); /* enough for dW alone, not for dW and dB */
  NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_BUFFER_TOO_SMALL);

  CL_OK(clFinish(e->queue));
  const struct {
    cl_mem m;
    ng_dtype dt;
    size_t count;
    const char *name;
  } outs[] = {{y, NG_BF16, CNT, "y"},   {mean, NG_F32, R, "mean"}, {rstd, NG_F32, R, "rstd"},
              {dx, NG_BF16, CNT, "dx"}, {dw, NG_F32, N, "dweight"}, {db, NG_F32, N, "dbias"}};
  for (size_t i = 0; i < NG_ARRAY_LEN(outs); i++)
    if (!ng_test_guard_intact(outs[i].m, outs[i].dt, 0, 0, outs[i].count))
      fail_msg("%s was written by a failed call", outs[i].name);

  /* the good calls succeed (so the checks above failed for the reason tested); without a
   * weight the bias's dtype is free */
  NG_OK(call_fwd(&F));
  f = F;
  f.w = ng_tensor_none();
  f.b = ng_tensor_of(small_x, 0, NG_F16); /* big enough for N f16 values */
  NG_OK(call_fwd(&f));
  NG_OK(call_bwd(&B));
  a = B;
  a.scratch = ng_tensor_of(sc1, 0, NG_F32);
  a.db = ng_tensor_none();
  NG_OK(call_bwd(&a));
  CL_OK(clFinish(e->queue));
  cl_mem all[] = {x, dy, w, bias, st, y, dx, mean, rstd, dw, db, small_x, small_n, small_r, sc1};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++) clReleaseMemObject(all[i]);
}

static int teardown(void **state) {
  (void)state;
  ng_test_env_release();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_errors),          cmocka_unit_test(test_matrix),
      cmocka_unit_test(test_large_mean),      cmocka_unit_test(test_workgroup_shape),
      cmocka_unit_test(test_finite_difference), cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_shapes),          cmocka_unit_test(test_fused_reduce),
      cmocka_unit_test(test_split_rows),
      cmocka_unit_test(test_prebuild),
  };
  return NG_RUN_GROUP_TESTS(tests, NULL, teardown);
}
