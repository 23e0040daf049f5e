/* Fused add + RMSNorm forward and backward against the double-precision reference: every casting
 * mode × x dtype × weight dtype (or none) × frozen/unfrozen × accumulate, with and without
 * ds_out, awkward shapes, buffer offsets with guard checks, in-place s and dx, both kernel shapes
 * (CPU: a row per work-item; GPU: a row per work-group), a finite-difference gradient check,
 * determinism, bit-identical dx between frozen and unfrozen runs, and every validation error. */
#include "ng_test.h"
#include "ref_fused_add_rmsnorm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fa_case {
  size_t rows, n;
  ng_dtype xd;
  int wd; /* ng_dtype, or -1 for no weight */
  ng_casting_mode mode;
  bool frozen, accumulate, has_ds;
  bool in_place; /* s written over residual, dx over ds_out */
  size_t off;    /* element offset applied to every buffer */
  float offset, eps;
  uint64_t seed;
} fa_case;

static const char *mode_name(ng_casting_mode m) {
  return m == NG_CAST_LLAMA ? "llama" : m == NG_CAST_GEMMA ? "gemma" : "none";
}

static void describe(const fa_case *c, char *buf, size_t len) {
  snprintf(buf, len, "rows=%zu n=%zu x=%s w=%s mode=%s frozen=%d acc=%d ds=%d inplace=%d off=%zu",
           c->rows, c->n, ng_dtype_name(c->xd),
           c->wd < 0 ? "none" : ng_dtype_name((ng_dtype)c->wd), mode_name(c->mode), c->frozen,
           c->accumulate, c->has_ds, c->in_place, c->off);
}

enum { GUARD = 16 };

static void check_guard(const char *what, cl_mem m, ng_dtype dt, size_t off, size_t count) {
  if (!ng_test_guard_intact(m, dt, off, count, off + count + GUARD))
    fail_msg("%s: an element outside the output range was written", what);
}

static void run_case(const fa_case *c) {
  ng_test_env *e = ng_test_env_get();
  char name[320];
  describe(c, name, sizeof name);
  const size_t cnt = c->rows * c->n, off = c->off;
  const bool has_w = c->wd >= 0;
  const ng_dtype xd = c->xd, wd = has_w ? (ng_dtype)c->wd : NG_F32;
  ng_rng rng;
  ng_rng_seed(&rng, c->seed);
  float *x = ng_test_random(&rng, xd, cnt, 0.3, 1.5);
  float *res = ng_test_random(&rng, xd, cnt, -0.2, 1.0);
  float *dy = ng_test_random(&rng, xd, cnt, 0.0, 1.0);
  float *ds = c->has_ds ? ng_test_random(&rng, xd, cnt, 0.1, 0.5) : NULL;
  float *w = has_w ? ng_test_random(&rng, wd, c->n, c->offset != 0 ? 0.0 : 1.0, 0.5) : NULL;
  float *dw0 = ng_test_random(&rng, wd, c->n, 0.0, 3.0);

  ref_rmsnorm rp = {c->rows, c->n, c->eps, c->offset, c->mode, xd, wd, w};
  double *y_ref = malloc(cnt * sizeof(double)), *dx_ref = malloc(cnt * sizeof(double));
  double *dw_ref = malloc(c->n * sizeof(double)), *dw_scale = malloc(c->n * sizeof(double));
  float *s = malloc(cnt * sizeof(float)), *rstd_ref = malloc(c->rows * sizeof(float));
  double dx_scale = 0;
  float *got = malloc(cnt * sizeof(float)), *got2 = malloc(cnt * sizeof(float));
  assert_true(y_ref && dx_ref && dw_ref && dw_scale && s && rstd_ref && got && got2);
  ref_fused_add_rmsnorm_forward(&rp, x, res, s, y_ref, rstd_ref);
  ref_fused_add_rmsnorm_backward(&rp, dy, ds, s, rstd_ref, dx_ref, dw_ref,
                                 c->accumulate ? dw0 : NULL, dw_scale, &dx_scale);

  cl_mem bx = ng_test_upload(xd, x, cnt, off, GUARD);
  cl_mem bres = ng_test_upload(xd, res, cnt, off, GUARD);
  cl_mem bw = has_w ? ng_test_upload(wd, w, c->n, off, GUARD) : NULL;
  cl_mem by = ng_test_upload(xd, NULL, cnt, off, GUARD);
  cl_mem bs = c->in_place ? bres : ng_test_upload(xd, NULL, cnt, off, GUARD);
  cl_mem br = ng_test_upload(NG_F32, NULL, c->rows, off, GUARD);
  cl_mem bdy = ng_test_upload(xd, dy, cnt, off, GUARD);
  cl_mem bds = c->has_ds ? ng_test_upload(xd, ds, cnt, off, GUARD) : NULL;
  cl_mem bsr = ng_test_upload(xd, s, cnt, off, GUARD);
  cl_mem brr = ng_test_upload(NG_F32, rstd_ref, c->rows, off, GUARD);
  cl_mem bdx = c->in_place && bds ? bds : ng_test_upload(xd, NULL, cnt, off, GUARD);
  cl_mem bdw = !c->frozen && has_w ? ng_test_upload(wd, dw0, c->n, off, GUARD) : NULL;

  ng_fused_add_rmsnorm_params p = {c->rows, c->n, c->eps, c->offset, c->mode};
  ng_tensor tw = has_w ? ng_tensor_of(bw, off, wd) : ng_tensor_none();
  NG_OK(ng_fused_add_rmsnorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, off, xd),
                                     ng_tensor_of(bres, off, xd), tw, ng_tensor_of(by, off, xd),
                                     ng_tensor_of(bs, off, xd), ng_tensor_of(br, off, NG_F32), 0,
                                     NULL, NULL));
  /* dx must not depend on what the output buffer held before, even when it is ds_out */
  ng_tensor tds = bds ? ng_tensor_of(bds, off, xd) : ng_tensor_none();
  ng_tensor tdw = bdw ? ng_tensor_of(bdw, off, wd) : ng_tensor_none();
  cl_event ev = NULL;
  NG_OK(ng_fused_add_rmsnorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, off, xd), tds,
                                      ng_tensor_of(bsr, off, xd), tw,
                                      ng_tensor_of(brr, off, NG_F32), ng_tensor_of(bdx, off, xd),
                                      tdw, c->accumulate ? NG_ACCUMULATE_GRAD : 0,
                                      ng_tensor_none(), 0, NULL, &ev));
  assert_non_null(ev);
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);

  char what[400];
  /* s: one f32 add and one rounding, exactly as the reference */
  ng_test_download(bs, xd, off, cnt, got);
  snprintf(what, sizeof what, "s [%s]", name);
  for (size_t i = 0; i < cnt; i++)
    if (got[i] != s[i] && !(isnan(got[i]) && isnan(s[i])))
      fail_msg("%s: element %zu is %.9g, want %.9g", what, i, (double)got[i], (double)s[i]);
  check_guard(what, bs, xd, off, cnt);

  ng_test_download(by, xd, off, cnt, got);
  snprintf(what, sizeof what, "y [%s]", name);
  ng_tol yt = ng_tol_for(xd, y_ref, cnt, 1e-6);
  if (c->mode != NG_CAST_GEMMA) yt.rtol *= 2; /* two roundings: xhat, then y */
  NG_ASSERT_CLOSE(what, got, y_ref, cnt, yt);
  check_guard(what, by, xd, off, cnt);

  ng_test_download(br, NG_F32, off, c->rows, got);
  double *rd = malloc(c->rows * sizeof(double));
  for (size_t r = 0; r < c->rows; r++) rd[r] = rstd_ref[r];
  snprintf(what, sizeof what, "rstd [%s]", name);
  const double sum_rel = 1e-6 + 2e-7 * sqrt((double)c->n);
  ng_tol rt = {c->mode == NG_CAST_NONE ? fmax(ng_tol_for(xd, rd, 0, 0).rtol, sum_rel) : sum_rel,
               0};
  NG_ASSERT_CLOSE(what, got, rd, c->rows, rt);
  free(rd);
  check_guard(what, br, NG_F32, off, c->rows);

  ng_test_download(bdx, xd, off, cnt, got);
  snprintf(what, sizeof what, "dx [%s]", name);
  ng_tol dxt = ng_tol_for(xd, dx_ref, cnt, 0);
  dxt.atol += 4e-6 * dx_scale;
  NG_ASSERT_CLOSE(what, got, dx_ref, cnt, dxt);
  check_guard(what, bdx, xd, off, cnt);

  if (bdw) {
    ng_test_download(bdw, wd, off, c->n, got);
    double mx = 0;
    for (size_t j = 0; j < c->n; j++) mx = fmax(mx, dw_scale[j]);
    ng_tol t = ng_tol_for(wd, dw_ref, c->n, 0);
    t.atol = 2e-6 * mx * (1 + sqrt((double)c->rows) * 0.1);
    if (c->mode == NG_CAST_LLAMA && xd != NG_F32) t.atol += mx / 256 / sqrt((double)c->rows);
    snprintf(what, sizeof what, "dweight [%s]", name);
    NG_ASSERT_CLOSE(what, got, dw_ref, c->n, t);
    check_guard(what, bdw, wd, off, c->n);

    /* Frozen and unfrozen runs give the same dx bits (ds_out re-uploaded when dx overwrote it). */
    cl_mem bds2 = bds && c->in_place ? ng_test_upload(xd, ds, cnt, off, GUARD) : bds;
    cl_mem bdx2 = ng_test_upload(xd, NULL, cnt, off, GUARD);
    NG_OK(ng_fused_add_rmsnorm_backward(
        e->ctx, e->queue, &p, ng_tensor_of(bdy, off, xd),
        bds2 ? ng_tensor_of(bds2, off, xd) : ng_tensor_none(), ng_tensor_of(bsr, off, xd), tw,
        ng_tensor_of(brr, off, NG_F32), ng_tensor_of(bdx2, off, xd), ng_tensor_none(), 0,
        ng_tensor_none(), 0, NULL, NULL));
    ng_test_download(bdx2, xd, off, cnt, got2);
    ng_test_download(bdx, xd, off, cnt, got);
    if (memcmp(got, got2, cnt * sizeof(float)) != 0)
      fail_msg("dx differs between frozen and unfrozen runs [%s]", name);
    clReleaseMemObject(bdx2);
    if (bds2 != bds) clReleaseMemObject(bds2);
  }

  clReleaseMemObject(bx);
  clReleaseMemObject(bres);
  if (bw) clReleaseMemObject(bw);
  clReleaseMemObject(by);
  if (bs != bres) clReleaseMemObject(bs);
  clReleaseMemObject(br);
  clReleaseMemObject(bdy);
  if (bds) clReleaseMemObject(bds);
  clReleaseMemObject(bsr);
  clReleaseMemObject(brr);
  if (bdx != bds) clReleaseMemObject(bdx);
  if (bdw) clReleaseMemObject(bdw);
  free(x), free(res), free(dy), free(ds), free(w), free(dw0), free(y_ref), free(dx_ref);
  free(dw_ref), free(dw_scale), free(s), free(rstd_ref), free(got), free(got2);
}

/* Every mode × x dtype × weight dtype (none, f32, bf16) × frozen × accumulate on a shape that
 * takes the vector path, and f16 weights once per x dtype; on one that takes the scalar path
 * (odd n, offset), the same with one weight dtype per x dtype (and none). (Every variant is a
 * program to build, ~1 s cold on PoCL.) ds_out present or absent alternates so that every mode
 * and every dtype pair sees both. */
static void test_matrix(void **state) {
  (void)state;
  const ng_dtype xds[] = {NG_F32, NG_F16, NG_BF16};
  const int wds[] = {-1, NG_F32, NG_BF16, NG_F16};
  const size_t shapes[][3] = {{37, 520, 0}, {19, 333, 3}};
  uint64_t seed = 1;
  for (int sh = 0; sh < 2; sh++)
    for (int m = 0; m < 3; m++)
      for (int xi = 0; xi < 3; xi++)
        for (int wi = 0; wi < 4; wi++)
          for (int fr = 0; fr < 2; fr++)
            for (int acc = 0; acc < 2; acc++) {
              if (wds[wi] < 0 && (!fr || acc)) continue; /* no weight: nothing to train */
              if (fr && acc) continue;                   /* accumulate needs a dW */
              if (sh == 0 && wi == 3 && (m != xi || fr || !acc)) continue;
              if (sh == 1 && wi != 0 && wi != 1 + xi) continue;
              const bool ds = (m + xi + wi + fr + sh) % 2 == 0 || wi == 3;
              fa_case c = {shapes[sh][0], shapes[sh][1], xds[xi], wds[wi], (ng_casting_mode)m,
                           fr != 0, acc != 0, ds, false, shapes[sh][2],
                           m == 1 ? 1.0f : 0.0f, 1e-6f, seed++};
              run_case(&c);
            }
}

/* N = 1, 7, odd, 4097, 65536 with one row and many rows; offsets; s and dx in place. */
static void test_shapes(void **state) {
  (void)state;
  /* 256 rows of 65536 rather than 1000: the host side of the check (data, double references)
   * is what costs there, and 256 rows already give every persistent group many rows. */
  const size_t shapes[][2] = {{1000, 1},    {1, 1},      {1000, 7},  {1, 7},
                              {1, 4097},    {1000, 4097}, {40, 8192}, {3, 6144},
                              {1, 65536},   {256, 65536}};
  for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
    fa_case c = {shapes[i][0], shapes[i][1], NG_BF16, NG_F32, NG_CAST_LLAMA, false, i % 2 == 0,
                 true, i % 3 == 1, 0, 0.0f, 1e-6f, 100 + i};
    run_case(&c);
    c.xd = NG_F32;
    c.wd = NG_BF16;
    c.frozen = i % 3 == 0;
    c.accumulate = false;
    c.has_ds = i % 2 == 1;
    c.in_place = i % 3 == 2;
    c.off = 8;
    c.mode = NG_CAST_GEMMA;
    if (shapes[i][0] * shapes[i][1] <= 5000000) run_case(&c);
  }
  /* Shapes that take NVIDIA's launch rules there (any device runs them):
   * - f16 rows of 1024 vectors with ds_out: 1024 work-items of one vector (NG_ROWS_1K);
   * - 16-bit rows of 513-1024 vectors, more rows than an H100 has compute units: the forward's
   *   256 × 4, a group a row (NG_ROWS_256X4);
   * - and the backward without ds_out: groups of half the row rounded up to a warp
   *   (NG_ROWS_FIT2; with ds_out such rows take NG_ROWS_1K);
   * - with ds_out and the weight frozen, rows of 257-512 vectors on a grid of fewer groups than
   *   rows (NG_ROWS_MANY_512: 1056 groups of 256 × 2 on an H100, 2000 rows);
   * - the forward of rows of 225-256 vectors on 256 work-items of one vector (NG_ROWS_W256), the
   *   last one idle; of 1025-2048 vectors on 512 × 4, a group a row (NG_ROWS_512X4), the last
   *   slot partly idle, and in a call of fewer rows than compute units on 1024 × 2; bf16 rows
   *   of 1024 vectors on 512 × 2, fewer groups than rows (NG_ROWS_512X2); bf16 rows of 257-384
   *   vectors on 128 × 4 (NG_ROWS_FWD_128X4);
   * - the backward of 16-bit rows of 257-448 vectors without ds_out, more than 16 rows a compute
   *   unit, on groups of half the row (NG_ROWS_HALF_MID: 160 × 2 at 2504, f16's 224 × 2 at 3496),
   *   and with ds_out at 257-288 vectors (NG_ROWS_HALF_MID_DS: 160 × 2 at 2088 and 2264, the
   *   frozen pass on sixteen groups a unit);
   * and an offset that breaks the 16-byte alignment of one tensor only: the scalar path. */
  const fa_case rules[] = {
      {40, 8192, NG_F16, NG_BF16, NG_CAST_LLAMA, false, false, true, false, 0, 0.0f, 1e-6f, 8},
      {300, 6000, NG_BF16, NG_F32, NG_CAST_GEMMA, false, false, true, false, 0, 0.0f, 1e-6f, 10},
      {1100, 4160, NG_BF16, NG_F32, NG_CAST_LLAMA, false, true, false, false, 0, 0.0f, 1e-6f, 11},
      {2000, 4000, NG_BF16, NG_F32, NG_CAST_GEMMA, true, false, true, false, 0, 0.0f, 1e-6f, 12},
      {300, 2040, NG_F16, NG_F32, NG_CAST_LLAMA, false, false, true, false, 8, 0.0f, 1e-6f, 13},
      {300, 16000, NG_BF16, NG_F32, NG_CAST_LLAMA, false, false, true, false, 0, 0.0f, 1e-6f, 14},
      {40, 16000, NG_F16, NG_F32, NG_CAST_GEMMA, false, false, true, false, 0, 0.0f, 1e-6f, 15},
      {2500, 8192, NG_BF16, NG_F32, NG_CAST_LLAMA, false, false, true, false, 0, 0.0f, 1e-6f, 16},
      {2200, 2504, NG_BF16, NG_F32, NG_CAST_LLAMA, false, false, false, false, 0, 0.0f, 1e-6f, 17},
      {300, 3000, NG_BF16, NG_BF16, NG_CAST_GEMMA, false, false, true, false, 0, 0.0f, 1e-6f, 18},
      {2200, 3496, NG_F16, NG_F32, NG_CAST_LLAMA, false, false, false, false, 0, 0.0f, 1e-6f, 19},
      {2200, 2088, NG_BF16, NG_F32, NG_CAST_LLAMA, false, false, true, false, 0, 0.0f, 1e-6f, 20},
      {2200, 2264, NG_F16, NG_BF16, NG_CAST_GEMMA, false, false, true, false, 0, 0.0f, 1e-6f, 21},
      {33, 64, NG_F16, NG_F16, NG_CAST_NONE, false, true, true, true, 5, 0.5f, 1e-5f, 9}};
  for (size_t i = 0; i < NG_ARRAY_LEN(rules); i++) run_case(&rules[i]);
}

/* The GPU-shaped kernels (a row per work-group, local-memory reductions, dW in registers or in
 * the partial row) on whatever device runs the tests. */
/* dW summed by the backward kernel's last groups (NG_TUNE_FUSED_REDUCE, the default on NVIDIA):
 * one group, a few, more groups than rows; with and without ds_out; accumulate. */
static void test_fused_reduce(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_test_fused_reduce_shape(e->ctx, 64, 2);
  /* the last: two per compute unit, where the reducers keep 16 rows in flight */
  const unsigned groups[] = {1, 5, 40, ng_test_two_per_cu()};
  const size_t shapes[][2] = {{50, 1000}, {33, 77}, {1, 1024}};
  uint64_t seed = 800;
  for (size_t g = 0; g < NG_ARRAY_LEN(groups); g++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, groups[g]));
    for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
      fa_case c = {shapes[i][0], shapes[i][1], (ng_dtype)((g + i) % 3), (int)((g + 2 * i) % 3),
                   (ng_casting_mode)(i % 3), false, (g + i) % 2 == 1, i != 1, g == 1,
                   i == 1 ? 3 : 0, 0.5f, 1e-5f, seed++};
      run_case(&c);
    }
  }
  ng_test_reset_overrides(e->ctx);
}

/* bf16 rows split across work-groups (as test_split_rows in test_rmsnorm.c: 64 work-items of one
 * vector, slices of 64·4 vectors; n = 8·200 is one slice, which CPU devices take, 8·1000 four and
 * 8·4000 sixteen on GPUs): with and without ds_out (loaded early, and with dW the dW sums in local
 * memory), in place, frozen, accumulate, every weight dtype, sets of one group, a few, more than
 * the rows and the default; f32 rows (the backward's slices of 64·2 vectors: n = 1000, 125
 * vectors, is one on a CPU device) and f16 rows (split as bf16's, their bits widened pair by pair
 * on NVIDIA: NG_F16_PACK), with ds_out in two of their four cases. */
/* A caller's scratch of exactly the queried size serves the backward with dW, with and without
 * ds_out, and gives the bits of the library's own scratch: the query computes the split rows'
 * plans of both kernels (RMSNorm's takes the call without ds_out), so a plan that needed more
 * partial rows than the query sized would fail here with NG_ERR_BUFFER_TOO_SMALL. */
static void scratch_exact(size_t rows, size_t n, ng_dtype xd, bool has_ds, uint64_t seed) {
  ng_test_env *e = ng_test_env_get();
  ng_fused_add_rmsnorm_params p = {rows, n, 1e-6f, 0.0f, NG_CAST_LLAMA};
  const size_t cnt = rows * n;
  ng_rng rng;
  ng_rng_seed(&rng, seed);
  float *sv = ng_test_random(&rng, xd, cnt, 0, 1), *dy = ng_test_random(&rng, xd, cnt, 0, 1);
  float *ds = ng_test_random(&rng, xd, cnt, 0, 1), *w = ng_test_random(&rng, NG_F32, n, 1, 0.1);
  float *r = malloc(rows * sizeof(float));
  for (size_t i = 0; i < rows; i++) r[i] = 0.9f;
  cl_mem bs = ng_test_upload(xd, sv, cnt, 0, 0), bdy = ng_test_upload(xd, dy, cnt, 0, 0);
  cl_mem bds = ng_test_upload(xd, ds, cnt, 0, 0), bw = ng_test_upload(NG_F32, w, n, 0, 0);
  cl_mem br = ng_test_upload(NG_F32, r, rows, 0, 0);
  cl_mem bdx[2], bdw[2];
  size_t bytes = 0;
  NG_OK(ng_fused_add_rmsnorm_backward_scratch_size(e->ctx, &p, 1, &bytes));
  assert_true(bytes > 0);
  cl_mem sc = ng_test_upload(NG_F32, NULL, bytes / 4, 8, 0);
  for (int k = 0; k < 2; k++) { /* the library's scratch, then the caller's */
    bdx[k] = ng_test_upload(xd, NULL, cnt, 0, 0);
    bdw[k] = ng_test_upload(NG_F32, NULL, n, 0, 0);
    NG_OK(ng_fused_add_rmsnorm_backward(
        e->ctx, e->queue, &p, ng_tensor_of(bdy, 0, xd),
        has_ds ? ng_tensor_of(bds, 0, xd) : ng_tensor_none(), ng_tensor_of(bs, 0, xd),
        ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(br, 0, NG_F32), ng_tensor_of(bdx[k], 0, xd),
        ng_tensor_of(bdw[k], 0, NG_F32), 0, k ? ng_tensor_of(sc, 8, NG_F32) : ng_tensor_none(), 0,
        NULL, NULL));
  }
  const size_t xb = cnt * ng_dtype_size(xd);
  unsigned char *a = malloc(xb), *b = malloc(xb);
  CL_OK(clEnqueueReadBuffer(e->queue, bdx[0], CL_TRUE, 0, xb, a, 0, NULL, NULL));
  CL_OK(clEnqueueReadBuffer(e->queue, bdx[1], CL_TRUE, 0, xb, b, 0, NULL, NULL));
  if (memcmp(a, b, xb))
    fail_msg("rows=%zu n=%zu x=%s ds=%d: dx differs with the caller's scratch", rows, n,
             ng_dtype_name(xd), has_ds);
  CL_OK(clEnqueueReadBuffer(e->queue, bdw[0], CL_TRUE, 0, n * 4, a, 0, NULL, NULL));
  CL_OK(clEnqueueReadBuffer(e->queue, bdw[1], CL_TRUE, 0, n * 4, b, 0, NULL, NULL));
  if (memcmp(a, b, n * 4))
    fail_msg("rows=%zu n=%zu x=%s ds=%d: dW differs with the caller's scratch", rows, n,
             ng_dtype_name(xd), has_ds);
  free(a), free(b), free(sv), free(dy), free(ds), free(w), free(r);
  for (int k = 0; k < 2; k++) clReleaseMemObject(bdx[k]), clReleaseMemObject(bdw[k]);
  clReleaseMemObject(bs), clReleaseMemObject(bdy), clReleaseMemObject(bds);
  clReleaseMemObject(bw), clReleaseMemObject(br), clReleaseMemObject(sc);
}

static void test_split_rows(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_test_fused_reduce_shape(e->ctx, 64, 1); /* NG_TUNE_FUSED_REDUCE = 2 also splits rows */
  const size_t shapes[][2] = {{37, 1600}, {5, 8000}, {40, 8000}, {3, 32000}, {6, 1000}};
  const unsigned groups[] = {NG_TUNE_AUTO, 1, 7, 64};
  uint64_t seed = 1100;
  for (size_t g = 0; g < NG_ARRAY_LEN(groups); g++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, groups[g]));
    /* the split backward's partials summed in its kernel (2) or by the separate kernel (3) */
    NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, g / 2 % 2 ? 3 : 2));
    for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
      const bool frozen = (g + i) % 3 == 1;
      const ng_dtype xd = (g + i) % 4 == 1 ? NG_F32 : (g + i) % 4 == 3 ? NG_F16 : NG_BF16;
      fa_case c = {shapes[i][0], shapes[i][1], xd, (int)((g + 2 * i) % 3),
                   (ng_casting_mode)((g + i) % 3), frozen, !frozen && g % 2 == 1,
                   (g + i) % 4 != 3 || g % 2 == 1,
                   i == 2, i == 1 ? 8 : 0, 0.5f, 1e-5f, seed++};
      run_case(&c);
    }
  }
  /* without ds_out the fused add runs RMSNorm's kernel and takes its plans: bf16 rows on slices
   * of two vectors a work-item that publish ahead, w' in local memory when frozen; f32 rows
   * ahead too; with and without dW. 1000 values (125 vectors) are one such slice on the forced
   * 64-wide groups, which a CPU takes; a GPU splits 8000 into eight. */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, NG_TUNE_AUTO));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, 2));
  const size_t ns[] = {1000, 8000};
  for (size_t k = 0; k < 4; k++)
    for (size_t i = 0; i < NG_ARRAY_LEN(ns); i++) {
      fa_case c = {9,     ns[i], k < 2 ? NG_BF16 : NG_F32, NG_F32, NG_CAST_LLAMA, k % 2 == 1,
                   false, false, false, k == 2 ? 8 : 0,    0.5f,   1e-5f,         seed++};
      run_case(&c);
    }
  /* split kernels on groups of 96, a multiple of 32 that is not a power of two (an override's,
   * tuning.txt's or the table's): with and without ds_out, dW summed in the kernel */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 96));
  for (size_t k = 0; k < 3; k++) {
    fa_case c = {k == 2 ? 40 : 5, k == 1 ? 1544 : 8000, k == 1 ? NG_F16 : NG_BF16,
                 k == 2 ? NG_BF16 : NG_F32, (ng_casting_mode)k, k == 2, k == 0, k != 1, false,
                 k == 1 ? 8 : 0, 0.5f, 1e-5f, seed++};
    run_case(&c);
  }
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 64));
  /* the queried scratch, exactly: on these forced groups, then on the device's own launches
   * (a GPU splits 65536 on slices of two vectors without ds_out, of four with it) */
  for (int pass = 0; pass < 2; pass++) {
    if (pass) ng_test_reset_overrides(e->ctx);
    for (int ds = 0; ds < 2; ds++) {
      scratch_exact(9, 8000, NG_BF16, ds, seed++);
      scratch_exact(40, 8000, NG_F32, ds, seed++);
      scratch_exact(pass ? 8 : 3, pass ? 65536 : 32000, NG_BF16, ds, seed++);
    }
    /* f16 rows of 1288 vectors, which a GPU without ds_out splits where it holds bf16 ones
     * (NG_ROWS_F16_1SLOT) */
    if (pass) scratch_exact(150, 10304, NG_F16, false, seed++);
  }
  ng_test_reset_overrides(e->ctx);
}

static void test_workgroup_shape(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 64));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, 2));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, 5));
  /* n ≤ 64·2·8: dW in registers; above: partial rows; odd n: scalar path */
  const size_t shapes[][2] = {{50, 1}, {50, 1024}, {50, 1032}, {7, 4097}, {300, 96}};
  for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++)
    for (int xi = 0; xi < 3; xi++) {
      fa_case c = {shapes[i][0], shapes[i][1], (ng_dtype)xi, NG_BF16, (ng_casting_mode)(i % 3),
                   false, xi == 2, xi != 1, xi == 2, i == 4 ? 8 : 0, 0.5f, 1e-5f,
                   200 + i * 3 + xi};
      run_case(&c);
    }
  /* four and eight register slots: s kept in its storage bits (whole rows, idle slots, rows
   * beyond the registers) */
  const size_t wide[][3] = {{4, 9, 2048}, {4, 5, 1800}, {8, 3, 4096}, {8, 3, 4160}};
  /* (a partly idle last slot is where PoCL once stored past the row: NG_UNROLL_STORES) */
  for (size_t i = 0; i < NG_ARRAY_LEN(wide); i++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, (unsigned)wide[i][0]));
    fa_case c = {wide[i][1], wide[i][2], i % 2 ? NG_F16 : NG_BF16, NG_F32,
                 (ng_casting_mode)(i % 3), false, false, true, false, 0, 0.5f, 1e-5f, 400 + i};
    run_case(&c);
  }
  /* the forward's launch of 16-bit rows of 513-1024 vectors on NVIDIA (NG_ROWS_256X4): 256 × 4,
   * a group a row, the last slot partly idle (8000) or empty (6000); and of 225-256 vectors
   * (NG_ROWS_W256): 256 × 1, whole rows and rows of 240 vectors (idle work-items of one slot,
   * which a CPU's launch turns into two slots: PoCL 3.1 ran their guarded store anyway, past
   * the row); and of 1025-2048 (NG_ROWS_512X4): 512 × 4, the last slot partly idle (16000).
   * Then multiples of 32 that are not powers of two (an override's, tuning.txt's or the table's:
   * the sums fold the group into its largest power of two first): a row held exactly (96 × 2 ×
   * 8 = 1536) and one beyond the registers. */
  const size_t w4[][4] = {{5, 8000, 256, 4}, {6, 6000, 256, 4}, {7, 2048, 256, 1},
                          {3, 16000, 512, 4}, {5, 1920, 256, 1}, {7, 1536, 96, 2},
                          {5, 1544, 96, 2}};
  for (size_t i = 0; i < NG_ARRAY_LEN(w4); i++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, (unsigned)w4[i][2]));
    NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, (unsigned)w4[i][3]));
    fa_case c = {w4[i][0], w4[i][1], i % 2 ? NG_BF16 : NG_F16, NG_F32, (ng_casting_mode)(i % 3),
                 false, false, true, false, 0, 0.5f, 1e-5f, 410 + i};
    run_case(&c);
  }
  /* the H200 table's exact fits (src/tuning.c, ninth, tenth and twelfth rounds) at their own
   * lengths: 320, 448 and 704 work-items (a power of two and a quarter, three quarters of the
   * next one) holding rows of 5120, 7168 and 11264 on two slots, on a persistent grid with the
   * next-row prefetch; with and without ds_out, frozen once; and 288 at 4352, a row of 544
   * vectors in 576 slots (the twelfth round's entry holds 4097-4608 so) */
  const size_t fit[][3] = {{5, 5120, 320}, {5, 7168, 448}, {3, 11264, 704}, {4, 4352, 288}};
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, 2));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, 2));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_PREFETCH, 2));
  for (size_t i = 0; i < NG_ARRAY_LEN(fit); i++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, (unsigned)fit[i][2]));
    fa_case c = {fit[i][0], fit[i][1], i % 2 ? NG_F16 : NG_BF16, NG_F32, (ng_casting_mode)(i % 3),
                 i == 1, false, i != 2, false, 0, 0.5f, 1e-5f, 420 + i};
    run_case(&c);
  }
  ng_test_reset_overrides(e->ctx);
}

/* Backward is the gradient of forward: L = Σ y·gy + Σ s·gs (s feeds later layers too), checked
 * by central differences in f32 with the gemma mode (no intermediate rounding) and a
 * non-trivial offset. Perturbing x or residual moves s the same way, so one check covers both. */
static double loss(ng_test_env *e, const ng_fused_add_rmsnorm_params *p, const float *x,
                   const float *res, const float *w, const float *gy, const float *gs) {
  size_t cnt = p->rows * p->n;
  cl_mem bx = ng_test_upload(NG_F32, x, cnt, 0, 0), br = ng_test_upload(NG_F32, res, cnt, 0, 0);
  cl_mem bw = ng_test_upload(NG_F32, w, p->n, 0, 0), by = ng_test_upload(NG_F32, NULL, cnt, 0, 0);
  cl_mem bs = ng_test_upload(NG_F32, NULL, cnt, 0, 0);
  cl_mem brs = ng_test_upload(NG_F32, NULL, p->rows, 0, 0);
  NG_OK(ng_fused_add_rmsnorm_forward(e->ctx, e->queue, p, ng_tensor_of(bx, 0, NG_F32),
                                     ng_tensor_of(br, 0, NG_F32), ng_tensor_of(bw, 0, NG_F32),
                                     ng_tensor_of(by, 0, NG_F32), ng_tensor_of(bs, 0, NG_F32),
                                     ng_tensor_of(brs, 0, NG_F32), 0, NULL, NULL));
  float *y = malloc(cnt * sizeof(float)), *s = malloc(cnt * sizeof(float));
  ng_test_download(by, NG_F32, 0, cnt, y);
  ng_test_download(bs, NG_F32, 0, cnt, s);
  double l = 0;
  for (size_t i = 0; i < cnt; i++) l += (double)y[i] * gy[i] + (double)s[i] * gs[i];
  free(y), free(s);
  clReleaseMemObject(bx), clReleaseMemObject(br), clReleaseMemObject(bw);
  clReleaseMemObject(by), clReleaseMemObject(bs), clReleaseMemObject(brs);
  return l;
}

static void test_finite_difference(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_fused_add_rmsnorm_params p = {3, 13, 1e-5f, 0.25f, NG_CAST_GEMMA};
  size_t cnt = p.rows * p.n;
  ng_rng rng;
  ng_rng_seed(&rng, 77);
  float *x = ng_test_random(&rng, NG_F32, cnt, 0.2, 1.0);
  float *res = ng_test_random(&rng, NG_F32, cnt, -0.1, 0.7);
  float *w = ng_test_random(&rng, NG_F32, p.n, 1.0, 0.3);
  float *gy = ng_test_random(&rng, NG_F32, cnt, 0.0, 1.0);
  float *gs = ng_test_random(&rng, NG_F32, cnt, 0.0, 1.0);
  /* analytic */
  cl_mem bx = ng_test_upload(NG_F32, x, cnt, 0, 0), bres = ng_test_upload(NG_F32, res, cnt, 0, 0);
  cl_mem bw = ng_test_upload(NG_F32, w, p.n, 0, 0), by = ng_test_upload(NG_F32, NULL, cnt, 0, 0);
  cl_mem bs = ng_test_upload(NG_F32, NULL, cnt, 0, 0);
  cl_mem br = ng_test_upload(NG_F32, NULL, p.rows, 0, 0);
  cl_mem bgy = ng_test_upload(NG_F32, gy, cnt, 0, 0), bgs = ng_test_upload(NG_F32, gs, cnt, 0, 0);
  cl_mem bdx = ng_test_upload(NG_F32, NULL, cnt, 0, 0);
  cl_mem bdw = ng_test_upload(NG_F32, NULL, p.n, 0, 0);
  NG_OK(ng_fused_add_rmsnorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, 0, NG_F32),
                                     ng_tensor_of(bres, 0, NG_F32), ng_tensor_of(bw, 0, NG_F32),
                                     ng_tensor_of(by, 0, NG_F32), ng_tensor_of(bs, 0, NG_F32),
                                     ng_tensor_of(br, 0, NG_F32), 0, NULL, NULL));
  NG_OK(ng_fused_add_rmsnorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bgy, 0, NG_F32),
                                      ng_tensor_of(bgs, 0, NG_F32), ng_tensor_of(bs, 0, NG_F32),
                                      ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(br, 0, NG_F32),
                                      ng_tensor_of(bdx, 0, NG_F32), ng_tensor_of(bdw, 0, NG_F32),
                                      0, ng_tensor_none(), 0, NULL, NULL));
  float *dx = malloc(cnt * sizeof(float)), *dw = malloc(p.n * sizeof(float));
  ng_test_download(bdx, NG_F32, 0, cnt, dx);
  ng_test_download(bdw, NG_F32, 0, p.n, dw);
  const float h = 1e-2f;
  for (size_t i = 0; i < cnt; i++) {
    /* x and residual alternately: both must get dx */
    float *v = i % 2 ? res : x;
    float keep = v[i];
    v[i] = keep + h;
    double lp = loss(e, &p, x, res, w, gy, gs);
    v[i] = keep - h;
    double lm = loss(e, &p, x, res, w, gy, gs);
    v[i] = keep;
    double fd = (lp - lm) / (2.0 * h);
    if (fabs(fd - dx[i]) > 2e-3 * (1 + fabs(fd)))
      fail_msg("d%s[%zu]: backward %.6g, finite difference %.6g", i % 2 ? "residual" : "x", i,
               (double)dx[i], fd);
  }
  for (size_t j = 0; j < p.n; j++) {
    float keep = w[j];
    w[j] = keep + h;
    double lp = loss(e, &p, x, res, w, gy, gs);
    w[j] = keep - h;
    double lm = loss(e, &p, x, res, w, gy, gs);
    w[j] = keep;
    double fd = (lp - lm) / (2.0 * h);
    if (fabs(fd - dw[j]) > 2e-3 * (1 + fabs(fd)))
      fail_msg("dweight[%zu]: backward %.6g, finite difference %.6g", j, (double)dw[j], fd);
  }
  free(x), free(res), free(w), free(gy), free(gs), free(dx), free(dw);
  clReleaseMemObject(bx), clReleaseMemObject(bres), clReleaseMemObject(bw);
  clReleaseMemObject(by), clReleaseMemObject(bs), clReleaseMemObject(br);
  clReleaseMemObject(bgy), clReleaseMemObject(bgs), clReleaseMemObject(bdx);
  clReleaseMemObject(bdw);
}

/* Same inputs, same bits: dW has no float atomics; a caller's scratch gives the same bits. */
static void test_deterministic(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_fused_add_rmsnorm_params p = {513, 1000, 1e-6f, 0.0f, NG_CAST_LLAMA};
  size_t cnt = p.rows * p.n;
  ng_rng rng;
  ng_rng_seed(&rng, 5);
  float *s = ng_test_random(&rng, NG_BF16, cnt, 0, 1), *dy = ng_test_random(&rng, NG_BF16, cnt, 0, 1);
  float *ds = ng_test_random(&rng, NG_BF16, cnt, 0, 1);
  float *w = ng_test_random(&rng, NG_F32, p.n, 1, 0.1), *r = malloc(p.rows * sizeof(float));
  for (size_t i = 0; i < p.rows; i++) r[i] = 0.9f;
  cl_mem bs = ng_test_upload(NG_BF16, s, cnt, 0, 0), bdy = ng_test_upload(NG_BF16, dy, cnt, 0, 0);
  cl_mem bds = ng_test_upload(NG_BF16, ds, cnt, 0, 0);
  cl_mem bw = ng_test_upload(NG_F32, w, p.n, 0, 0), br = ng_test_upload(NG_F32, r, p.rows, 0, 0);
  cl_mem bdx = ng_test_upload(NG_BF16, NULL, cnt, 0, 0), bdw = ng_test_upload(NG_F32, NULL, p.n, 0, 0);
  float *first = malloc(p.n * sizeof(float)), *again = malloc(p.n * sizeof(float));
  for (int it = 0; it < 4; it++) {
    cl_mem sc = NULL;
    if (it == 3) { /* a caller-provided scratch buffer, at an offset the op rounds up to 8 */
      size_t bytes = 0;
      NG_OK(ng_fused_add_rmsnorm_backward_scratch_size(e->ctx, &p, 1, &bytes));
      assert_true(bytes > 0);
      sc = ng_test_upload(NG_F32, NULL, bytes / 4, 5, 0);
    }
    NG_OK(ng_fused_add_rmsnorm_backward(
        e->ctx, e->queue, &p, ng_tensor_of(bdy, 0, NG_BF16), ng_tensor_of(bds, 0, NG_BF16),
        ng_tensor_of(bs, 0, NG_BF16), ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(br, 0, NG_F32),
        ng_tensor_of(bdx, 0, NG_BF16), ng_tensor_of(bdw, 0, NG_F32), 0,
        sc ? ng_tensor_of(sc, 5, NG_F32) : ng_tensor_none(), 0, NULL, NULL));
    ng_test_download(bdw, NG_F32, 0, p.n, it ? again : first);
    if (it) assert_memory_equal(first, again, p.n * sizeof(float));
    if (sc) clReleaseMemObject(sc);
  }
  size_t frozen_bytes = 1;
  NG_OK(ng_fused_add_rmsnorm_backward_scratch_size(e->ctx, &p, 0, &frozen_bytes));
  assert_int_equal(frozen_bytes, 0);
  free(s), free(dy), free(ds), free(w), free(r), free(first), free(again);
  clReleaseMemObject(bs), clReleaseMemObject(bdy), clReleaseMemObject(bds);
  clReleaseMemObject(bw), clReleaseMemObject(br), clReleaseMemObject(bdx);
  clReleaseMemObject(bdw);
}

/* ---- validation: every error is reported before anything is written ------------------------- */
enum { R = 4, N = 24, CNT = R * N };

typedef struct err_bufs {
  cl_mem x, res, w, y, s, rstd, dy, ds, dx, dw;
} err_bufs;

static err_bufs err_setup(void) {
  err_bufs b;
  float v[CNT];
  for (int i = 0; i < CNT; i++) v[i] = 0.01f * (float)i;
  b.x = ng_test_upload(NG_BF16, v, CNT, 0, 0);
  b.res = ng_test_upload(NG_BF16, v, CNT, 0, 0);
  b.w = ng_test_upload(NG_F32, v, N, 0, 0);
  b.y = ng_test_upload(NG_BF16, NULL, CNT, 0, 0);
  b.s = ng_test_upload(NG_BF16, NULL, CNT, 0, 0);
  b.rstd = ng_test_upload(NG_F32, NULL, R, 0, 0);
  b.dy = ng_test_upload(NG_BF16, v, CNT, 0, 0);
  b.ds = ng_test_upload(NG_BF16, v, CNT, 0, 0);
  b.dx = ng_test_upload(NG_BF16, NULL, CNT, 0, 0);
  b.dw = ng_test_upload(NG_F32, NULL, N, 0, 0);
  return b;
}

static void err_check_untouched(const err_bufs *b, const char *what) {
  /* outputs still hold nothing but the poison */
  const struct {
    cl_mem m;
    ng_dtype dt;
    size_t count;
    const char *name;
  } outs[] = {{b->y, NG_BF16, CNT, "y"},   {b->s, NG_BF16, CNT, "s"},  {b->rstd, NG_F32, R, "rstd"},
              {b->dx, NG_BF16, CNT, "dx"}, {b->dw, NG_F32, N, "dweight"}};
  for (size_t i = 0; i < NG_ARRAY_LEN(outs); i++)
    if (!ng_test_guard_intact(outs[i].m, outs[i].dt, 0, 0, outs[i].count))
      fail_msg("%s was written by a failed call (%s)", outs[i].name, what);
}

static void err_release(err_bufs *b) {
  cl_mem all[] = {b->x, b->res, b->w, b->y, b->s, b->rstd, b->dy, b->ds, b->dx, b->dw};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++) clReleaseMemObject(all[i]);
}

/* A forward call with every argument good unless replaced. */
typedef struct fwd_args {
  ng_fused_add_rmsnorm_params p;
  ng_tensor x, res, w, y, s, rstd;
} fwd_args;
typedef struct bwd_args {
  ng_fused_add_rmsnorm_params p;
  ng_tensor dy, ds, s, w, rstd, dx, dw, scratch;
  unsigned flags;
} bwd_args;

static ng_tensor *fwd_field(fwd_args *f, size_t i) {
  ng_tensor *all[] = {&f->x, &f->res, &f->y, &f->s, &f->rstd, &f->w};
  return all[i];
}
static ng_tensor *bwd_field(bwd_args *a, size_t i) {
  ng_tensor *all[] = {&a->dy, &a->ds, &a->s, &a->rstd, &a->dx, &a->dw, &a->w};
  return all[i];
}

static ng_status call_fwd(const fwd_args *a) {
  ng_test_env *e = ng_test_env_get();
  cl_event ev = NULL;
  ng_status st = ng_fused_add_rmsnorm_forward(e->ctx, e->queue, &a->p, a->x, a->res, a->w, a->y,
                                              a->s, a->rstd, 0, NULL, &ev);
  if (st != NG_SUCCESS && ev) fail_msg("a failed call returned an event");
  if (ev) clReleaseEvent(ev);
  return st;
}
static ng_status call_bwd(const bwd_args *a) {
  ng_test_env *e = ng_test_env_get();
  cl_event ev = NULL;
  ng_status st = ng_fused_add_rmsnorm_backward(e->ctx, e->queue, &a->p, a->dy, a->ds, a->s, a->w,
                                               a->rstd, a->dx, a->dw, a->flags, a->scratch, 0,
                                               NULL, &ev);
  if (st != NG_SUCCESS && ev) fail_msg("a failed call returned an event");
  if (ev) clReleaseEvent(ev);
  return st;
}

static void test_errors(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  err_bufs b = err_setup();
  const ng_fused_add_rmsnorm_params P = {R, N, 1e-6f, 0.0f, NG_CAST_LLAMA};
  const fwd_args F = {P,
                      ng_tensor_of(b.x, 0, NG_BF16),
                      ng_tensor_of(b.res, 0, NG_BF16),
                      ng_tensor_of(b.w, 0, NG_F32),
                      ng_tensor_of(b.y, 0, NG_BF16),
                      ng_tensor_of(b.s, 0, NG_BF16),
                      ng_tensor_of(b.rstd, 0, NG_F32)};
  const bwd_args B = {P,
                      ng_tensor_of(b.dy, 0, NG_BF16),
                      ng_tensor_of(b.ds, 0, NG_BF16),
                      ng_tensor_of(b.s, 0, NG_BF16),
                      ng_tensor_of(b.w, 0, NG_F32),
                      ng_tensor_of(b.rstd, 0, NG_F32),
                      ng_tensor_of(b.dx, 0, NG_BF16),
                      ng_tensor_of(b.dw, 0, NG_F32),
                      ng_tensor_none(),
                      0};
  fwd_args f;
  bwd_args a;
  cl_mem small_bf16 = ng_test_upload(NG_BF16, NULL, CNT - 1, 0, 0);
  cl_mem small_f32 = ng_test_upload(NG_F32, NULL, N - 1, 0, 0);
  cl_mem small_rstd = ng_test_upload(NG_F32, NULL, R - 1, 0, 0);

  /* handles and params */
  NG_EXPECT_STATUS(ng_fused_add_rmsnorm_forward(NULL, e->queue, &F.p, F.x, F.res, F.w, F.y, F.s,
                                                F.rstd, 0, NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_fused_add_rmsnorm_forward(e->ctx, NULL, &F.p, F.x, F.res, F.w, F.y, F.s,
                                                F.rstd, 0, NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_fused_add_rmsnorm_forward(e->ctx, e->queue, NULL, F.x, F.res, F.w, F.y,
                                                F.s, F.rstd, 0, NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_fused_add_rmsnorm_backward(e->ctx, e->queue, NULL, B.dy, B.ds, B.s, B.w,
                                                 B.rstd, B.dx, B.dw, 0, B.scratch, 0, NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_fused_add_rmsnorm_backward(NULL, e->queue, &B.p, B.dy, B.ds, B.s, B.w,
                                                 B.rstd, B.dx, B.dw, 0, B.scratch, 0, NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  size_t bytes;
  NG_EXPECT_STATUS(ng_fused_add_rmsnorm_backward_scratch_size(e->ctx, NULL, 1, &bytes),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_fused_add_rmsnorm_backward_scratch_size(e->ctx, &P, 1, NULL),
                   NG_ERR_NULL_HANDLE);

  /* shape and scalar parameters, forward and backward */
  const struct {
    size_t rows, n;
    float eps, offset;
    int mode;
    ng_status want;
  } pc[] = {{0, N, 1e-6f, 0, 0, NG_ERR_INVALID_SHAPE},     {R, 0, 1e-6f, 0, 0, NG_ERR_INVALID_SHAPE},
            {R, N, -1e-6f, 0, 0, NG_ERR_INVALID_VALUE},    {R, N, NAN, 0, 0, NG_ERR_INVALID_VALUE},
            {R, N, INFINITY, 0, 0, NG_ERR_INVALID_VALUE},  {R, N, 1e-6f, NAN, 0, NG_ERR_INVALID_VALUE},
            {R, N, 1e-6f, 0, 3, NG_ERR_INVALID_VALUE},     {R, N, 1e-6f, 0, -1, NG_ERR_INVALID_VALUE},
            {(size_t)1 << 33, N, 1e-6f, 0, 0, NG_ERR_INDEX_OVERFLOW}};
  for (size_t i = 0; i < NG_ARRAY_LEN(pc); i++) {
    f = F;
    f.p.rows = pc[i].rows, f.p.n = pc[i].n, f.p.eps = pc[i].eps, f.p.offset = pc[i].offset;
    f.p.casting_mode = (ng_casting_mode)pc[i].mode;
    NG_EXPECT_STATUS(call_fwd(&f), pc[i].want);
    a = B;
    a.p = f.p;
    NG_EXPECT_STATUS(call_bwd(&a), pc[i].want);
  }
  a = B;
  a.flags = 2;
  NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_INVALID_VALUE);

  /* forward tensors: missing, one element too small, offset past the end, wrong dtype */
  for (size_t i = 0; i < 6; i++) {
    const bool is_rstd = i == 4, is_w = i == 5;
    ng_tensor *t;
    if (!is_w) { /* the weight is optional */
      f = F;
      fwd_field(&f, i)->mem = NULL;
      NG_EXPECT_STATUS(call_fwd(&f), NG_ERR_NULL_BUFFER);
    }
    f = F;
    t = fwd_field(&f, i);
    t->mem = is_rstd ? small_rstd : is_w ? small_f32 : small_bf16;
    NG_EXPECT_STATUS(call_fwd(&f), NG_ERR_BUFFER_TOO_SMALL);
    t->offset = is_rstd ? R - 1 : is_w ? N - 1 : CNT - 1;
    NG_EXPECT_STATUS(call_fwd(&f), NG_ERR_OFFSET_OUT_OF_RANGE);
    f = F;
    fwd_field(&f, i)->offset = 1;
    NG_EXPECT_STATUS(call_fwd(&f), NG_ERR_BUFFER_TOO_SMALL);
    f = F;
    t = fwd_field(&f, i);
    if (!is_w) { /* the weight's dtype is free */
      t->dtype = NG_F16;
      NG_EXPECT_STATUS(call_fwd(&f), is_rstd ? NG_ERR_UNSUPPORTED_DTYPE : NG_ERR_DTYPE_MISMATCH);
    }
    t->dtype = NG_I32;
    NG_EXPECT_STATUS(call_fwd(&f), NG_ERR_UNSUPPORTED_DTYPE);
  }

  /* backward tensors */
  for (size_t i = 0; i < 7; i++) {
    const bool is_rstd = i == 3, is_w = i >= 5;
    ng_tensor *t;
    if (i != 1 && !is_w) { /* ds_out, dweight and weight are optional */
      a = B;
      bwd_field(&a, i)->mem = NULL;
      NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_NULL_BUFFER);
    }
    a = B;
    t = bwd_field(&a, i);
    t->mem = is_rstd ? small_rstd : is_w ? small_f32 : small_bf16;
    NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_BUFFER_TOO_SMALL);
    t->offset = is_rstd ? R - 1 : is_w ? N - 1 : CNT - 1;
    NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_OFFSET_OUT_OF_RANGE);
    a = B;
    bwd_field(&a, i)->offset = 1;
    NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_BUFFER_TOO_SMALL);
    a = B;
    t = bwd_field(&a, i);
    t->dtype = NG_F16; /* dweight must have the weight's dtype, the others s's */
    NG_EXPECT_STATUS(call_bwd(&a), is_rstd ? NG_ERR_UNSUPPORTED_DTYPE : NG_ERR_DTYPE_MISMATCH);
    t->dtype = NG_I32;
    NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_UNSUPPORTED_DTYPE);
  }
  /* dweight without a weight; scratch too small or not f32 */
  a = B;
  a.w = ng_tensor_none();
  NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_INVALID_VALUE);
  a = B;
  a.scratch = ng_tensor_of(small_f32, 0, NG_F32);
  NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_BUFFER_TOO_SMALL);
  a.scratch.dtype = NG_BF16;
  NG_EXPECT_STATUS(call_bwd(&a), NG_ERR_UNSUPPORTED_DTYPE);
  /* a queue of another device or an out-of-order queue */
  cl_int err;
  cl_command_queue ooo =
      clCreateCommandQueue(e->cl_ctx, e->device, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
  if (ooo) {
    NG_EXPECT_STATUS(ng_fused_add_rmsnorm_forward(e->ctx, ooo, &F.p, F.x, F.res, F.w, F.y, F.s,
                                                  F.rstd, 0, NULL, NULL),
                     NG_ERR_UNSUPPORTED_QUEUE);
    clReleaseCommandQueue(ooo);
  }
  CL_OK(clFinish(e->queue));
  err_check_untouched(&b, "all of the above");

  /* the good calls succeed (so the checks above failed for the reason tested) */
  NG_OK(call_fwd(&F));
  NG_OK(call_bwd(&B));
  clReleaseMemObject(small_bf16), clReleaseMemObject(small_f32), clReleaseMemObject(small_rstd);
  err_release(&b);
}

static int teardown(void **state) {
  (void)state;
  ng_test_env_release();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_errors),        cmocka_unit_test(test_matrix),
      cmocka_unit_test(test_workgroup_shape), cmocka_unit_test(test_finite_difference),
      cmocka_unit_test(test_deterministic), cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_fused_reduce),    cmocka_unit_test(test_split_rows),
  };
  return NG_RUN_GROUP_TESTS(tests, NULL, teardown);
}
