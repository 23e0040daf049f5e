/* PolyNorm forward and backward against the double-precision reference: x dtype × parameter
 * dtype × frozen weight × frozen bias × accumulate, N = 1, 7, 4097, 65536 with one and many rows,
 * buffer offsets with guard checks, both kernel shapes, f16 inputs whose sixth power is far beyond
 * f16's range, a finite-difference check, determinism, bit-identical dx across frozen
 * combinations, and every validation error (which must leave every buffer untouched). */
#include "ng_internal.h"
#include "ng_test.h"
#include "ref_polynorm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pn_case {
  size_t rows, n;
  ng_dtype xd, wd;
  bool has_b;
  bool freeze_w, freeze_b, accumulate;
  size_t off;
  float eps;
  double mean, std; /* of x */
  uint64_t seed;
} pn_case;

#define GUARD 16

static void describe(const pn_case *c, char *buf, size_t len) {
  snprintf(buf, len, "rows=%zu n=%zu x=%s w=%s bias=%d frozen_w=%d frozen_b=%d acc=%d off=%zu",
           c->rows, c->n, ng_dtype_name(c->xd), ng_dtype_name(c->wd), c->has_b, c->freeze_w,
           c->freeze_b, c->accumulate, c->off);
}

static void check_guard(const char *what, cl_mem m, ng_dtype dt, size_t off, size_t count) {
  if (!ng_test_guard_intact(m, dt, off, count, off + count + GUARD))
    fail_msg("%s: an element outside the output range was written", what);
}

static void run_case(const pn_case *c) {
  ng_test_env *e = ng_test_env_get();
  char name[256], what[360];
  describe(c, name, sizeof name);
  const size_t cnt = c->rows * c->n, off = c->off, nr = c->rows * 3;
  const ng_dtype pd = c->wd;
  const bool dw_on = !c->freeze_w, db_on = !c->freeze_b;
  ng_rng rng;
  ng_rng_seed(&rng, c->seed);
  float *x = ng_test_random(&rng, c->xd, cnt, c->mean, c->std);
  float *dy = ng_test_random(&rng, c->xd, cnt, 0.0, 1.0);
  float *w = ng_test_random(&rng, pd, 3, 0.4, 0.3), *b = ng_test_random(&rng, pd, 1, 0.0, 0.5);
  float *dw0 = ng_test_random(&rng, pd, 3, 0.0, 3.0), *db0 = ng_test_random(&rng, pd, 1, 0.0, 3.0);
  ref_polynorm rp = {c->rows, c->n, c->eps, c->xd, w, c->has_b ? b[0] : 0.0f};
  float *rstd_ref = malloc(nr * sizeof(float)), *rstd_got = malloc(nr * sizeof(float));
  double *y_ref = malloc(cnt * sizeof(double)), *dx_ref = malloc(cnt * sizeof(double));
  float *got = malloc(cnt * sizeof(float)), *got2 = malloc(cnt * sizeof(float));
  double dw_ref[3], db_ref, dw_scale[3], db_scale, dx_scale;
  assert_true(rstd_ref && rstd_got && y_ref && dx_ref && got && got2);
  ref_polynorm_stats(&rp, x, rstd_ref);

  cl_mem bx = ng_test_upload(c->xd, x, cnt, off, GUARD), bw = ng_test_upload(pd, w, 3, off, GUARD);
  cl_mem bb = c->has_b ? ng_test_upload(pd, b, 1, off, GUARD) : NULL;
  cl_mem by = ng_test_upload(c->xd, NULL, cnt, off, GUARD);
  cl_mem br = ng_test_upload(NG_F32, NULL, nr, off, GUARD);
  ng_polynorm_params p = {c->rows, c->n, c->eps};
  const ng_tensor tw = ng_tensor_of(bw, off, pd);
  const ng_tensor tb = c->has_b ? ng_tensor_of(bb, off, pd) : ng_tensor_none();
  cl_event ev = NULL;
  NG_OK(ng_polynorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, off, c->xd), tw, tb,
                            ng_tensor_of(by, off, c->xd), ng_tensor_of(br, off, NG_F32), 0, NULL,
                            &ev));
  assert_non_null(ev);
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);

  ng_test_download(br, NG_F32, off, nr, rstd_got);
  double *rd = malloc(nr * sizeof(double));
  for (size_t i = 0; i < nr; i++) rd[i] = rstd_ref[i];
  snprintf(what, sizeof what, "rstd [%s]", name);
  /* f32 sums of positive terms in another order, rsqrt within 2 ulp */
  NG_ASSERT_CLOSE(what, rstd_got, rd, nr, ((ng_tol){1e-6 + 2e-7 * sqrt((double)c->n), 0}));
  check_guard(what, br, NG_F32, off, nr);
  free(rd);

  ref_polynorm_apply(&rp, x, rstd_got, y_ref);
  ng_test_download(by, c->xd, off, cnt, got);
  snprintf(what, sizeof what, "y [%s]", name);
  NG_ASSERT_CLOSE(what, got, y_ref, cnt, ng_tol_for(c->xd, y_ref, cnt, 4e-6));
  check_guard(what, by, c->xd, off, cnt);

  ref_polynorm_backward(&rp, dy, x, rstd_ref, dx_ref, dw_ref, c->accumulate ? dw0 : NULL, &db_ref,
                        c->accumulate ? db0 : NULL, dw_scale, &db_scale, &dx_scale);
  cl_mem bdy = ng_test_upload(c->xd, dy, cnt, off, GUARD);
  cl_mem brr = ng_test_upload(NG_F32, rstd_ref, nr, off, GUARD);
  cl_mem bdx = ng_test_upload(c->xd, NULL, cnt, off, GUARD);
  cl_mem bdw = dw_on ? ng_test_upload(pd, dw0, 3, off, GUARD) : NULL;
  cl_mem bdb = db_on ? ng_test_upload(pd, db0, 1, off, GUARD) : NULL;
  const ng_tensor tdw = dw_on ? ng_tensor_of(bdw, off, pd) : ng_tensor_none();
  const ng_tensor tdb = db_on ? ng_tensor_of(bdb, off, pd) : ng_tensor_none();
  NG_OK(ng_polynorm_backward(
      e->ctx, e->queue, &p, ng_tensor_of(bdy, off, c->xd), ng_tensor_of(bx, off, c->xd), tw,
      ng_tensor_of(brr, off, NG_F32), ng_tensor_of(bdx, off, c->xd), tdw, tdb,
      c->accumulate ? NG_ACCUMULATE_GRAD : 0, ng_tensor_none(), 0, NULL, &ev));
  assert_non_null(ev);
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);

  ng_test_download(bdx, c->xd, off, cnt, got);
  snprintf(what, sizeof what, "dx [%s]", name);
  ng_tol dxt = ng_tol_for(c->xd, dx_ref, cnt, 0);
  dxt.atol += 4e-6 * dx_scale;
  NG_ASSERT_CLOSE(what, got, dx_ref, cnt, dxt);
  check_guard(what, bdx, c->xd, off, cnt);
  const double sum_rel = 2e-6 * (1 + 0.1 * sqrt((double)cnt));
  if (bdw) {
    float g3[3];
    ng_test_download(bdw, pd, off, 3, g3);
    ng_tol t = ng_tol_for(pd, dw_ref, 3, 0);
    t.atol += sum_rel * fmax(dw_scale[0], fmax(dw_scale[1], dw_scale[2]));
    snprintf(what, sizeof what, "dweight [%s]", name);
    NG_ASSERT_CLOSE(what, g3, dw_ref, 3, t);
    check_guard(what, bdw, pd, off, 3);
  }
  if (bdb) {
    float g1;
    ng_test_download(bdb, pd, off, 1, &g1);
    ng_tol t = ng_tol_for(pd, &db_ref, 1, 0);
    t.atol += sum_rel * db_scale;
    snprintf(what, sizeof what, "dbias [%s]", name);
    NG_ASSERT_CLOSE(what, &g1, &db_ref, 1, t);
    check_guard(what, bdb, pd, off, 1);
  }

  if (bdw || bdb) { /* dx has the same bits with both parameters frozen */
    cl_mem bdx2 = ng_test_upload(c->xd, NULL, cnt, off, GUARD);
    NG_OK(ng_polynorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, off, c->xd),
                               ng_tensor_of(bx, off, c->xd), tw, ng_tensor_of(brr, off, NG_F32),
                               ng_tensor_of(bdx2, off, c->xd), ng_tensor_none(), ng_tensor_none(),
                               0, ng_tensor_none(), 0, NULL, NULL));
    ng_test_download(bdx2, c->xd, off, cnt, got2);
    if (memcmp(got, got2, cnt * sizeof(float)) != 0)
      fail_msg("dx differs between frozen and unfrozen runs [%s]", name);
    clReleaseMemObject(bdx2);
  }

  clReleaseMemObject(bx), clReleaseMemObject(bw), clReleaseMemObject(by), clReleaseMemObject(br);
  clReleaseMemObject(bdy), clReleaseMemObject(brr), clReleaseMemObject(bdx);
  if (bb) clReleaseMemObject(bb);
  if (bdw) clReleaseMemObject(bdw);
  if (bdb) clReleaseMemObject(bdb);
  free(x), free(dy), free(w), free(b), free(dw0), free(db0), free(rstd_ref), free(rstd_got);
  free(y_ref), free(dx_ref), free(got), free(got2);
}

static pn_case mk(size_t rows, size_t n, ng_dtype xd, ng_dtype wd, size_t off, uint64_t seed) {
  pn_case c = {rows, n, xd, wd, true, false, false, false, off, 1e-6f, 0.1, 1.2, seed};
  return c;
}

/* Every x dtype × parameter dtype × frozen weight × frozen bias × accumulate, on a shape that
 * takes the vector path and one that takes the scalar path with offsets. */
static void test_matrix(void **state) {
  (void)state;
  const ng_dtype xds[] = {NG_F32, NG_F16, NG_BF16}, wds[] = {NG_F32, NG_BF16, NG_F16};
  const size_t shapes[][3] = {{37, 520, 0}, {19, 333, 3}};
  uint64_t seed = 1;
  for (int sh = 0; sh < 2; sh++)
    for (int xi = 0; xi < 3; xi++)
      for (int wi = 0; wi < 3; wi++)
        for (int fw = 0; fw < 2; fw++)
          for (int fb = 0; fb < 2; fb++)
            for (int acc = 0; acc < 2; acc++) {
              if (fw && fb && acc) continue; /* nothing to accumulate into */
              pn_case c = mk(shapes[sh][0], shapes[sh][1], xds[xi], wds[wi], shapes[sh][2], seed++);
              c.freeze_w = fw, c.freeze_b = fb, c.accumulate = acc;
              c.has_b = !(fw && fb && xi == wi); /* the forward without a bias, now and then */
              run_case(&c);
            }
}

/* N = 1, 7, 4097, 65536 with one row and many rows, and 12000 (1500 vectors: held by a GPU's
 * 1024 x 2 groups in the forward, split in the backward). */
static void test_shapes(void **state) {
  (void)state;
  const size_t shapes[][2] = {{1, 1},       {1000, 1},  {1, 7},        {1000, 7},  {1, 4097},
                              {1000, 4097}, {1, 65536}, {1000, 65536}, {7, 12000}};
  for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
    pn_case c = mk(shapes[i][0], shapes[i][1], NG_BF16, NG_F32, 0, 100 + i);
    c.accumulate = i % 2 == 0;
    run_case(&c);
    if (shapes[i][0] * shapes[i][1] > 5000000) continue; /* the big one once */
    c = mk(shapes[i][0], shapes[i][1], NG_F32, NG_BF16, 8, 200 + i);
    c.freeze_w = i % 3 == 0;
    run_case(&c);
    c = mk(shapes[i][0], shapes[i][1], NG_F16, NG_F16, 1, 300 + i);
    c.freeze_b = i % 2 == 0;
    run_case(&c);
  }
  /* f16 rows held by groups of 256 with the weight frozen: on NVIDIA dB alone is summed in the
   * kernel's chunks (chunk_wanted), as with dW */
  pn_case f = mk(300, 4096, NG_F16, NG_F32, 0, 320);
  f.freeze_w = true;
  run_case(&f);
  /* 16-bit rows of 257-384 vectors (bf16's up to 448) on NVIDIA: the backward, with dW and dB,
   * then dB alone, and the forward (in a call of more than 8 rows a compute unit) on groups of
   * half the row (192 × 2 for 3000, 160 × 2 for 2504, 224 × 2 for bf16's 3496 below), dB alone
   * prefetching and summing in the kernel's chunks (for bf16 too) */
  pn_case g = mk(1500, 3000, NG_F16, NG_F32, 0, 321);
  run_case(&g);
  g.freeze_w = true;
  run_case(&g);
  g = mk(1100, 2504, NG_BF16, NG_BF16, 0, 322);
  run_case(&g);
  g.freeze_w = true;
  run_case(&g);
  g = mk(900, 3000, NG_BF16, NG_F32, 0, 323);
  g.freeze_w = true;
  run_case(&g);
  /* f16 rows of 385-512 vectors with a gradient: one wave of three groups of 256 a compute unit,
   * each of several rows (NG_ROWS_POLY_F16_3) */
  g = mk(600, 3600, NG_F16, NG_F32, 0, 324);
  run_case(&g);
  g = mk(1100, 3496, NG_BF16, NG_F32, 0, 325);
  run_case(&g);
  g.freeze_w = true;
  run_case(&g);
}

/* f16 x around 100: x⁶ ≈ 1e12, far past f16's 65504. The powers are formed in f32, so y, rstd
 * and the gradients are finite and match the reference. */
static void test_f16_range(void **state) {
  (void)state;
  for (int i = 0; i < 3; i++) {
    pn_case c = mk(i == 2 ? 1 : 64, i == 1 ? 333 : 1024, NG_F16, i == 0 ? NG_F16 : NG_F32, 0,
                   600 + (uint64_t)i);
    c.mean = 100.0, c.std = 20.0;
    c.accumulate = i == 1;
    run_case(&c);
  }
}

static void test_workgroup_shape(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 64));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, 5));
  /* (rows of up to two vectors per work-item are held in registers: 1000 and 100 leave the
   * second slot partly idle) */
  const size_t shapes[][2] = {{50, 1}, {50, 1024}, {7, 4097}, {300, 96}, {9, 1000}, {5, 100}};
  for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++)
    for (int xi = 0; xi < 3; xi++) {
      pn_case c =
          mk(shapes[i][0], shapes[i][1], (ng_dtype)xi, NG_BF16, i == 3 ? 8 : 0, 400 + i * 3 + xi);
      c.accumulate = xi == 2;
      c.freeze_b = xi == 1;
      run_case(&c);
    }
  /* multiples of 32 that are not powers of two (an override's, tuning.txt's or the table's: the
   * sums fold the group into its largest power of two first): a row held exactly (96 × 2 × 8 =
   * 1536), one beyond the registers, and 160 groups with both parameters frozen */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 96));
  for (size_t i = 0; i < 3; i++) {
    pn_case c = mk(i ? 5 : 7, i == 1 ? 1544 : i ? 5120 : 1536, i == 1 ? NG_F16 : NG_BF16,
                   NG_BF16, i == 1 ? 8 : 0, 430 + i);
    if (i == 2) {
      NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 160));
      c.freeze_w = c.freeze_b = true;
    }
    run_case(&c);
  }
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, NG_TUNE_AUTO));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, NG_TUNE_AUTO));
}

/* dW and dB summed in the backward kernel (pn_chunk_reduce in cl/polynorm.cl: chunks of 128
 * partial rows, then the chunks' rows; NG_TUNE_FUSED_REDUCE = 2 forces it on a CPU device too, in
 * the GPU shape): one group, a few, more groups than rows, 300 groups of 400 rows (three chunks,
 * the last of 44) and two per compute unit; each gradient alone and both; accumulate. */
static void test_fused_reduce(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_test_fused_reduce_shape(e->ctx, 64, 0);
  const unsigned groups[] = {1, 5, 40, 300, ng_test_two_per_cu()};
  const size_t shapes[][2] = {{50, 1000}, {33, 77}, {1, 1024}, {400, 72}};
  uint64_t seed = 950;
  for (size_t g = 0; g < NG_ARRAY_LEN(groups); g++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, groups[g]));
    for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
      pn_case c = mk(shapes[i][0], shapes[i][1], (ng_dtype)((g + i) % 3),
                     (ng_dtype)((g + 2 * i) % 3), i == 1 ? 3 : 0, seed++);
      c.accumulate = (g + i) % 2 == 1;
      c.freeze_w = i == 2;
      c.freeze_b = g == 1 && i != 2;
      run_case(&c);
    }
  }
}

/* bf16 rows split across work-groups that exchange their shares of the row sums, forward and
 * backward, the backward's last group writing dW and dB (NG_TUNE_FUSED_REDUCE = 2 forces it, the
 * default on NVIDIA): one slice (every device) and up to 16 (a GPU; a CPU device streams those
 * rows), one set, a few, more than rows; each gradient alone, both, neither; accumulate; an
 * offset; f16 rows (the backward splits as bf16's, the forward streams) and f32 rows (split
 * beyond 2048 vectors forward and 1024 backward: n = 32000 on GPUs). */
static void test_split_rows(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_test_fused_reduce_shape(e->ctx, 64, 1);
  const size_t shapes[][2] = {{37, 1600}, {5, 8000}, {40, 8000}, {3, 32000}, {2, 1608}};
  const unsigned groups[] = {NG_TUNE_AUTO, 1, 7, 64};
  uint64_t seed = 1200;
  for (size_t g = 0; g < NG_ARRAY_LEN(groups); g++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, groups[g]));
    for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
      const ng_dtype xd = (g + i) % 4 == 1 ? NG_F32 : (g + i) % 4 == 3 ? NG_F16 : NG_BF16;
      pn_case c = mk(shapes[i][0], shapes[i][1], xd,
                     (ng_dtype)((g + 2 * i) % 3), i == 1 ? 8 : 0, seed++);
      c.freeze_w = (g + i) % 3 == 2;
      c.freeze_b = (g + i) % 4 == 1;
      c.accumulate = !(c.freeze_w && c.freeze_b) && g % 2 == 1;
      run_case(&c);
    }
  }
  /* split kernels on groups of 96, a multiple of 32 that is not a power of two (an override's,
   * tuning.txt's or the table's): the last group's tree over the sets' partial rows takes 64 of
   * them (with all 96 it lost a third of dW and dB on the H200) */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 96));
  for (size_t k = 0; k < 3; k++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, k == 1 ? 7 : NG_TUNE_AUTO));
    pn_case c = mk(k == 2 ? 40 : 5, k == 1 ? 1544 : 8000, k == 1 ? NG_F16 : NG_BF16,
                   (ng_dtype)k, k == 1 ? 8 : 0, seed++);
    c.freeze_b = k == 1;
    c.accumulate = k == 2;
    run_case(&c);
  }
  /* the H200 table's fits (src/tuning.c, the eleventh and twelfth rounds) at their own lengths:
   * one slice of 160 or 192 work-items on four slots holding rows of 5120 or 6144 exactly, two
   * groups; bf16 with dW and dB, f16 both frozen, f16 with dB alone accumulating; and 160 at
   * 4352, a row of 544 vectors in 640 slots, on the first case's programs (about 13 s of cold
   * PoCL builds: each work-group size builds its kernels again) */
  ng_test_fused_reduce_shape(e->ctx, 160, 4);
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, 2));
  for (size_t k = 0; k < 4; k++) {
    const size_t rows = k < 2 ? 5 : 4, n = k < 2 ? 5120 : k == 2 ? 6144 : 4352;
    const ng_dtype xd = k == 1 || k == 2 ? NG_F16 : NG_BF16;
    NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, k == 2 ? 192 : 160));
    pn_case c = mk(rows, n, xd, (ng_dtype)(k % 3), 0, seed++);
    c.freeze_w = k == 1 || k == 2;
    c.freeze_b = k == 1;
    c.accumulate = k == 2;
    /* the plans the kernels run: one slice of the row, held exactly (or with idle slots) */
    ng_coop cp;
    ng_row_launch l;
    assert_true(ng_polynorm_fwd_plan(e->ctx, rows, n, xd, &cp));
    assert_int_equal(cp.slices, 1);
    assert_int_equal(cp.l.wg * cp.l.reg_cols * 8, k == 3 ? 5120 : n);
    assert_true(ng_polynorm_bwd_plan(e->ctx, rows, n, xd, !c.freeze_w, !c.freeze_b, &l, &cp));
    assert_int_equal(cp.slices, 1);
    assert_int_equal(cp.l.wg * cp.l.reg_cols * 8, k == 3 ? 5120 : n);
    run_case(&c);
  }
  ng_test_reset_overrides(e->ctx);
}

/* Backward is the gradient of forward: L = Σ y·g by central differences in f32. */
static double loss(ng_test_env *e, const ng_polynorm_params *p, const float *x, const float *w,
                   const float *b, const float *g) {
  const size_t cnt = p->rows * p->n;
  cl_mem bx = ng_test_upload(NG_F32, x, cnt, 0, 0), bw = ng_test_upload(NG_F32, w, 3, 0, 0);
  cl_mem bb = ng_test_upload(NG_F32, b, 1, 0, 0), by = ng_test_upload(NG_F32, NULL, cnt, 0, 0);
  cl_mem br = ng_test_upload(NG_F32, NULL, p->rows * 3, 0, 0);
  NG_OK(ng_polynorm_forward(e->ctx, e->queue, p, ng_tensor_of(bx, 0, NG_F32),
                            ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(bb, 0, NG_F32),
                            ng_tensor_of(by, 0, NG_F32), ng_tensor_of(br, 0, NG_F32), 0, NULL,
                            NULL));
  float *y = malloc(cnt * sizeof(float));
  ng_test_download(by, NG_F32, 0, cnt, y);
  double l = 0;
  for (size_t i = 0; i < cnt; i++) l += (double)y[i] * g[i];
  free(y);
  clReleaseMemObject(bx), clReleaseMemObject(bw), clReleaseMemObject(bb);
  clReleaseMemObject(by), clReleaseMemObject(br);
  return l;
}

static void fd_check(ng_test_env *e, const ng_polynorm_params *p, float *x, float *w, float *b,
                     const float *g, float *v, size_t count, const float *grad, const char *what) {
  const float h = 1e-2f;
  for (size_t i = 0; i < count; i++) {
    const float keep = v[i];
    v[i] = keep + h;
    const double lp = loss(e, p, x, w, b, g);
    v[i] = keep - h;
    const double lm = loss(e, p, x, w, b, g);
    v[i] = keep;
    const double fd = (lp - lm) / (2.0 * h);
    if (fabs(fd - grad[i]) > 2e-3 * (1 + fabs(fd)))
      fail_msg("%s[%zu]: backward %.6g, finite difference %.6g", what, i, (double)grad[i], fd);
  }
}

static void test_finite_difference(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_polynorm_params p = {3, 6, 1e-5f};
  const size_t cnt = 18;
  ng_rng rng;
  ng_rng_seed(&rng, 77);
  float *x = ng_test_random(&rng, NG_F32, cnt, 0.2, 1.0);
  float w[3] = {0.5f, -0.7f, 0.9f}, b[1] = {0.25f};
  float *g = ng_test_random(&rng, NG_F32, cnt, 0.0, 1.0);
  cl_mem bx = ng_test_upload(NG_F32, x, cnt, 0, 0), bw = ng_test_upload(NG_F32, w, 3, 0, 0);
  cl_mem bb = ng_test_upload(NG_F32, b, 1, 0, 0), by = ng_test_upload(NG_F32, NULL, cnt, 0, 0);
  cl_mem br = ng_test_upload(NG_F32, NULL, 9, 0, 0), bg = ng_test_upload(NG_F32, g, cnt, 0, 0);
  cl_mem bdx = ng_test_upload(NG_F32, NULL, cnt, 0, 0), bdw = ng_test_upload(NG_F32, NULL, 3, 0, 0);
  cl_mem bdb = ng_test_upload(NG_F32, NULL, 1, 0, 0);
  NG_OK(ng_polynorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, 0, NG_F32),
                            ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(bb, 0, NG_F32),
                            ng_tensor_of(by, 0, NG_F32), ng_tensor_of(br, 0, NG_F32), 0, NULL,
                            NULL));
  NG_OK(ng_polynorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bg, 0, NG_F32),
                             ng_tensor_of(bx, 0, NG_F32), ng_tensor_of(bw, 0, NG_F32),
                             ng_tensor_of(br, 0, NG_F32), ng_tensor_of(bdx, 0, NG_F32),
                             ng_tensor_of(bdw, 0, NG_F32), ng_tensor_of(bdb, 0, NG_F32), 0,
                             ng_tensor_none(), 0, NULL, NULL));
  float dx[18], dw[3], db[1];
  ng_test_download(bdx, NG_F32, 0, cnt, dx);
  ng_test_download(bdw, NG_F32, 0, 3, dw);
  ng_test_download(bdb, NG_F32, 0, 1, db);
  fd_check(e, &p, x, w, b, g, x, cnt, dx, "dx");
  fd_check(e, &p, x, w, b, g, w, 3, dw, "dweight");
  fd_check(e, &p, x, w, b, g, b, 1, db, "dbias");
  free(x), free(g);
  clReleaseMemObject(bx), clReleaseMemObject(bw), clReleaseMemObject(bb), clReleaseMemObject(by);
  clReleaseMemObject(br), clReleaseMemObject(bg), clReleaseMemObject(bdx), clReleaseMemObject(bdw);
  clReleaseMemObject(bdb);
}

/* Same inputs, same bits, with the library's scratch or the caller's; frozen needs none. */
static void test_deterministic(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_polynorm_params p = {513, 1000, 1e-6f};
  const size_t cnt = 513 * 1000;
  ng_rng rng;
  ng_rng_seed(&rng, 5);
  float *x = ng_test_random(&rng, NG_BF16, cnt, 0, 1),
        *dy = ng_test_random(&rng, NG_BF16, cnt, 0, 1);
  float w[3] = {0.3f, 0.3f, 0.4f}, *r = malloc(p.rows * 3 * sizeof(float));
  for (size_t i = 0; i < p.rows * 3; i++) r[i] = 0.9f;
  cl_mem bx = ng_test_upload(NG_BF16, x, cnt, 0, 0), bdy = ng_test_upload(NG_BF16, dy, cnt, 0, 0);
  cl_mem bw = ng_test_upload(NG_F32, w, 3, 0, 0), br = ng_test_upload(NG_F32, r, p.rows * 3, 0, 0);
  cl_mem bdx = ng_test_upload(NG_BF16, NULL, cnt, 0, 0),
         bdw = ng_test_upload(NG_F32, NULL, 3, 0, 0);
  cl_mem bdb = ng_test_upload(NG_F32, NULL, 1, 0, 0);
  size_t bytes = 0, b_w = 0, b_b = 0, none = 1;
  NG_OK(ng_polynorm_backward_scratch_size(e->ctx, &p, 1, 1, &bytes));
  NG_OK(ng_polynorm_backward_scratch_size(e->ctx, &p, 1, 0, &b_w));
  NG_OK(ng_polynorm_backward_scratch_size(e->ctx, &p, 0, 1, &b_b));
  NG_OK(ng_polynorm_backward_scratch_size(e->ctx, &p, 0, 0, &none));
  assert_int_equal(none, 0);
  assert_int_equal(b_w, 3 * b_b);
  assert_int_equal(bytes, b_w + b_b);
  cl_mem sc = ng_test_upload(NG_F32, NULL, bytes / 4, 8, 0);
  float first[4], again[4];
  for (int it = 0; it < 4; it++) {
    NG_OK(ng_polynorm_backward(
        e->ctx, e->queue, &p, ng_tensor_of(bdy, 0, NG_BF16), ng_tensor_of(bx, 0, NG_BF16),
        ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(br, 0, NG_F32), ng_tensor_of(bdx, 0, NG_BF16),
        ng_tensor_of(bdw, 0, NG_F32), ng_tensor_of(bdb, 0, NG_F32), 0,
        it == 3 ? ng_tensor_of(sc, 8, NG_F32) : ng_tensor_none(), 0, NULL, NULL));
    ng_test_download(bdw, NG_F32, 0, 3, it ? again : first);
    ng_test_download(bdb, NG_F32, 0, 1, (it ? again : first) + 3);
    if (it) assert_memory_equal(first, again, sizeof first);
  }
  free(x), free(dy), free(r);
  clReleaseMemObject(bx), clReleaseMemObject(bdy), clReleaseMemObject(bw), clReleaseMemObject(br);
  clReleaseMemObject(bdx), clReleaseMemObject(bdw), clReleaseMemObject(bdb), clReleaseMemObject(sc);
}

/* After ng_prebuild("polynorm"), no call of any x dtype, parameter dtype, frozen combination or
 * alignment gets a program it does not already hold. */
static void test_prebuild(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_context *c = NULL; /* a context of its own: the shared one holds earlier tests' programs */
  NG_OK(ng_context_create(e->cl_ctx, e->device, &c));
  unsigned count = 0;
  NG_OK(ng_prebuild(c, "polynorm", &count));
  /* one launch shape on a CPU: 2 alignments × 3 x dtypes × (forward + 4 backward) + 3 reductions */
  if (e->is_cpu) assert_int_equal(count, 33);
  ng_context_stats before, after;
  NG_OK(ng_context_get_stats(c, &before));
  const ng_dtype fl[] = {NG_F32, NG_F16, NG_BF16};
  for (int xi = 0; xi < 3; xi++)
    for (int fr = 0; fr < 4; fr++)
      for (size_t off = 0; off <= 3; off += 3) {
        const size_t rows = 3, n = 40, cnt = rows * n;
        const ng_dtype xd = fl[xi], wd = fl[(xi + fr) % 3];
        cl_mem bx = ng_test_upload(xd, NULL, cnt, off, 0);
        cl_mem by = ng_test_upload(xd, NULL, cnt, off, 0);
        cl_mem bdx = ng_test_upload(xd, NULL, cnt, off, 0);
        cl_mem bw = ng_test_upload(wd, NULL, 3, off, 0);
        cl_mem bdw = ng_test_upload(wd, NULL, 3, off, 0);
        cl_mem bdb = ng_test_upload(wd, NULL, 1, off, 0);
        cl_mem br = ng_test_upload(NG_F32, NULL, rows * 3, off, 0);
        ng_polynorm_params p = {rows, n, 1e-6f};
        const ng_tensor tw = ng_tensor_of(bw, off, wd), tr = ng_tensor_of(br, off, NG_F32);
        const ng_tensor tdw = fr & 1 ? ng_tensor_none() : ng_tensor_of(bdw, off, wd);
        const ng_tensor tdb = fr & 2 ? ng_tensor_none() : ng_tensor_of(bdb, off, wd);
        NG_OK(ng_polynorm_forward(c, e->queue, &p, ng_tensor_of(bx, off, xd), tw,
                                  ng_tensor_of(bdb, off, wd), ng_tensor_of(by, off, xd), tr, 0,
                                  NULL, NULL));
        NG_OK(ng_polynorm_backward(c, e->queue, &p, ng_tensor_of(by, off, xd),
                                   ng_tensor_of(bx, off, xd), tw, tr, ng_tensor_of(bdx, off, xd),
                                   tdw, tdb, 0, ng_tensor_none(), 0, NULL, NULL));
        CL_OK(clFinish(e->queue));
        cl_mem ms[] = {bx, by, bdx, bw, bdw, bdb, br};
        for (size_t i = 0; i < NG_ARRAY_LEN(ms); i++) clReleaseMemObject(ms[i]);
      }
  NG_OK(ng_context_get_stats(c, &after));
  assert_int_equal(after.programs_built, before.programs_built);
  assert_int_equal(after.disk_hits, before.disk_hits);
  assert_int_equal(after.disk_misses, before.disk_misses);
  ng_context_release(c);
}

static void test_errors(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_context *ctx = e->ctx;
  cl_command_queue q = e->queue;
  float vals[40];
  for (int i = 0; i < 40; i++) vals[i] = 0.5f + 0.01f * (float)i;
  cl_mem x = ng_test_upload(NG_F32, vals, 40, 0, 0), dy = ng_test_upload(NG_F32, vals, 40, 0, 0);
  cl_mem w = ng_test_upload(NG_F32, vals, 3, 0, 0), b = ng_test_upload(NG_F32, vals, 1, 0, 0);
  cl_mem wh = ng_test_upload(NG_BF16, vals, 3, 0, 0);
  cl_mem y = ng_test_upload(NG_F32, NULL, 40, 0, 0), r = ng_test_upload(NG_F32, NULL, 12, 0, 0);
  cl_mem dx = ng_test_upload(NG_F32, NULL, 40, 0, 0), dw = ng_test_upload(NG_F32, NULL, 3, 0, 0);
  cl_mem db = ng_test_upload(NG_F32, NULL, 1, 0, 0), sc = ng_test_upload(NG_F32, NULL, 1, 0, 0);
  const ng_polynorm_params ok = {4, 10, 1e-6f};
  const ng_tensor X = ng_tensor_of(x, 0, NG_F32), W = ng_tensor_of(w, 0, NG_F32);
  const ng_tensor Bi = ng_tensor_of(b, 0, NG_F32), Y = ng_tensor_of(y, 0, NG_F32);
  const ng_tensor R = ng_tensor_of(r, 0, NG_F32), DY = ng_tensor_of(dy, 0, NG_F32);
  const ng_tensor DX = ng_tensor_of(dx, 0, NG_F32), DW = ng_tensor_of(dw, 0, NG_F32);
  const ng_tensor DB = ng_tensor_of(db, 0, NG_F32), N0 = ng_tensor_none();
#define FWD(pp, x_, w_, b_, y_, r_)                                                                \
  ng_polynorm_forward(ctx, q, pp, x_, w_, b_, y_, r_, 0, NULL, NULL)
#define BWD(pp, dy_, x_, w_, r_, dx_, dw_, db_, fl_, s_)                                           \
  ng_polynorm_backward(ctx, q, pp, dy_, x_, w_, r_, dx_, dw_, db_, fl_, s_, 0, NULL, NULL)
  NG_EXPECT_STATUS(ng_polynorm_forward(NULL, q, &ok, X, W, Bi, Y, R, 0, NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_polynorm_forward(ctx, NULL, &ok, X, W, Bi, Y, R, 0, NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(FWD(NULL, X, W, Bi, Y, R), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(BWD(NULL, DY, X, W, R, DX, DW, DB, 0, N0), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_polynorm_backward_scratch_size(ctx, &ok, 1, 1, NULL), NG_ERR_NULL_HANDLE);
  ng_polynorm_params p = ok;
  p.rows = 0;
  NG_EXPECT_STATUS(FWD(&p, X, W, Bi, Y, R), NG_ERR_INVALID_SHAPE);
  NG_EXPECT_STATUS(BWD(&p, DY, X, W, R, DX, DW, DB, 0, N0), NG_ERR_INVALID_SHAPE);
  p = ok, p.n = 0;
  NG_EXPECT_STATUS(FWD(&p, X, W, Bi, Y, R), NG_ERR_INVALID_SHAPE);
  p = ok, p.n = (size_t)UINT32_MAX + 1;
  NG_EXPECT_STATUS(FWD(&p, X, W, Bi, Y, R), NG_ERR_INDEX_OVERFLOW);
  p = ok, p.rows = UINT32_MAX / 2;
  NG_EXPECT_STATUS(FWD(&p, X, W, Bi, Y, R), NG_ERR_INDEX_OVERFLOW);
  const float bad_eps[] = {-1.0f, NAN, INFINITY};
  for (size_t i = 0; i < NG_ARRAY_LEN(bad_eps); i++) {
    p = ok, p.eps = bad_eps[i];
    NG_EXPECT_STATUS(FWD(&p, X, W, Bi, Y, R), NG_ERR_INVALID_VALUE);
    NG_EXPECT_STATUS(BWD(&p, DY, X, W, R, DX, DW, DB, 0, N0), NG_ERR_INVALID_VALUE);
  }
  /* NULL buffers (the weight is required; the bias is not) */
  NG_EXPECT_STATUS(FWD(&ok, N0, W, Bi, Y, R), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(FWD(&ok, X, N0, Bi, Y, R), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, N0, R), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, Y, N0), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(BWD(&ok, N0, X, W, R, DX, DW, DB, 0, N0), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(BWD(&ok, DY, N0, W, R, DX, DW, DB, 0, N0), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, N0, R, DX, DW, DB, 0, N0), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, N0, DX, DW, DB, 0, N0), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, R, N0, DW, DB, 0, N0), NG_ERR_NULL_BUFFER);
  /* sizes and offsets */
  p = ok, p.n = 11;
  NG_EXPECT_STATUS(FWD(&p, X, W, Bi, Y, R), NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(BWD(&p, DY, X, W, R, DX, DW, DB, 0, N0), NG_ERR_BUFFER_TOO_SMALL);
  p = ok, p.rows = 5, p.n = 8; /* x fits, rstd[5, 3] does not */
  NG_EXPECT_STATUS(FWD(&p, X, W, Bi, Y, R), NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(FWD(&ok, ng_tensor_of(x, 40, NG_F32), W, Bi, Y, R), NG_ERR_OFFSET_OUT_OF_RANGE);
  NG_EXPECT_STATUS(FWD(&ok, X, ng_tensor_of(w, 1, NG_F32), Bi, Y, R), NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(FWD(&ok, X, W, ng_tensor_of(b, 1, NG_F32), Y, R), NG_ERR_OFFSET_OUT_OF_RANGE);
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, ng_tensor_of(y, 1, NG_F32), R), NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, R, DX, ng_tensor_of(dw, 1, NG_F32), DB, 0, N0),
                   NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, R, DX, DW, ng_tensor_of(db, 1, NG_F32), 0, N0),
                   NG_ERR_OFFSET_OUT_OF_RANGE);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, R, DX, DW, DB, 0, ng_tensor_of(sc, 0, NG_F32)),
                   NG_ERR_BUFFER_TOO_SMALL);
  /* dtypes */
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, ng_tensor_of(y, 0, NG_F16), R), NG_ERR_DTYPE_MISMATCH);
  NG_EXPECT_STATUS(FWD(&ok, X, ng_tensor_of(wh, 0, NG_BF16), Bi, Y, R), NG_ERR_DTYPE_MISMATCH);
  NG_EXPECT_STATUS(FWD(&ok, ng_tensor_of(x, 0, NG_I64), W, Bi, Y, R), NG_ERR_UNSUPPORTED_DTYPE);
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, Y, ng_tensor_of(r, 0, NG_F16)), NG_ERR_UNSUPPORTED_DTYPE);
  NG_EXPECT_STATUS(BWD(&ok, ng_tensor_of(dy, 0, NG_BF16), X, W, R, DX, DW, DB, 0, N0),
                   NG_ERR_DTYPE_MISMATCH);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, R, ng_tensor_of(dx, 0, NG_F16), DW, DB, 0, N0),
                   NG_ERR_DTYPE_MISMATCH);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, R, DX, ng_tensor_of(dw, 0, NG_BF16), DB, 0, N0),
                   NG_ERR_DTYPE_MISMATCH);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, R, DX, DW, ng_tensor_of(db, 0, NG_F16), 0, N0),
                   NG_ERR_DTYPE_MISMATCH);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, ng_tensor_of(r, 0, NG_BF16), DX, DW, DB, 0, N0),
                   NG_ERR_UNSUPPORTED_DTYPE);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, R, DX, DW, DB, 0, ng_tensor_of(wh, 0, NG_BF16)),
                   NG_ERR_UNSUPPORTED_DTYPE);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, R, DX, DW, DB, 4u, N0), NG_ERR_INVALID_VALUE);
  const struct {
    cl_mem m;
    size_t n;
  } outs[] = {{y, 40}, {r, 12}, {dx, 40}, {dw, 3}, {db, 1}};
  for (size_t i = 0; i < NG_ARRAY_LEN(outs); i++)
    if (!ng_test_guard_intact(outs[i].m, NG_F32, 0, 0, outs[i].n))
      fail_msg("a failed call wrote output %zu", i);
  NG_OK(FWD(&ok, X, W, Bi, Y, R));
  NG_OK(FWD(&ok, X, W, N0, Y, R));
  NG_OK(BWD(&ok, DY, X, W, R, DX, DW, DB, 0, N0));
  CL_OK(clFinish(q));
#undef FWD
#undef BWD
  cl_mem all[] = {x, dy, w, b, wh, y, r, dx, dw, db, sc};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++) clReleaseMemObject(all[i]);
}

static int reset_overrides(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_test_reset_overrides(e->ctx);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  ng_test_env_release();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup(f, reset_overrides)
      T(test_errors),
      T(test_matrix),
      T(test_f16_range),
      T(test_workgroup_shape),
      T(test_finite_difference),
      T(test_deterministic),
      T(test_prebuild),
      T(test_shapes),
      T(test_fused_reduce),
      T(test_split_rows),
#undef T
  };
  return NG_RUN_GROUP_TESTS(tests, NULL, teardown);
}
