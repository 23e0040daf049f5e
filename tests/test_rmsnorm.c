/* RMSNorm forward and backward against the double-precision reference: every casting mode × x
 * dtype × weight dtype (or none) × frozen/unfrozen × accumulate, awkward shapes, buffer offsets,
 * both kernel shapes (CPU: a row per work-item; GPU: a row per work-group), a finite-difference
 * gradient check, and bit-identical dx between frozen and unfrozen runs. */
#include "ng_internal.h" /* NG_SCRATCH_VEC_PAD */
#include "ng_test.h"
#include "ref_norms.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rms_case {
  size_t rows, n;
  ng_dtype xd;
  int wd; /* ng_dtype, or -1 for no weight */
  ng_casting_mode mode;
  bool frozen, accumulate;
  size_t off; /* element offset applied to every buffer */
  float offset, eps;
  uint64_t seed;
} rms_case;

static const char *mode_name(ng_casting_mode m) {
  return m == NG_CAST_LLAMA ? "llama" : m == NG_CAST_GEMMA ? "gemma" : "none";
}

static void describe(const rms_case *c, char *buf, size_t len) {
  snprintf(buf, len, "rows=%zu n=%zu x=%s w=%s mode=%s frozen=%d acc=%d off=%zu", c->rows, c->n,
           ng_dtype_name(c->xd), c->wd < 0 ? "none" : ng_dtype_name((ng_dtype)c->wd),
           mode_name(c->mode), c->frozen, c->accumulate, c->off);
}

static void check_guard(const char *what, cl_mem m, ng_dtype dt, size_t off, size_t count) {
  if (!ng_test_guard_intact(m, dt, off, count, off + count + 16))
    fail_msg("%s: an element outside the output range was written", what);
}

static void run_case(const rms_case *c) {
  ng_test_env *e = ng_test_env_get();
  char name[256];
  describe(c, name, sizeof name);
  const size_t cnt = c->rows * c->n, off = c->off, G = 16;
  const bool has_w = c->wd >= 0;
  const ng_dtype wd = has_w ? (ng_dtype)c->wd : NG_F32;
  ng_rng rng;
  ng_rng_seed(&rng, c->seed);
  float *x = ng_test_random(&rng, c->xd, cnt, 0.3, 1.5);
  float *dy = ng_test_random(&rng, c->xd, cnt, 0.0, 1.0);
  float *w = has_w ? ng_test_random(&rng, wd, c->n, c->offset != 0 ? 0.0 : 1.0, 0.5) : NULL;
  float *dw0 = ng_test_random(&rng, wd, c->n, 0.0, 3.0);

  ref_rmsnorm rp = {c->rows, c->n, c->eps, c->offset, c->mode, c->xd, wd, w};
  double *y_ref = malloc(cnt * sizeof(double)), *dx_ref = malloc(cnt * sizeof(double));
  double *dw_ref = malloc(c->n * sizeof(double)), *dw_scale = malloc(c->n * sizeof(double));
  float *rstd_ref = malloc(c->rows * sizeof(float));
  double dx_scale = 0;
  float *got = malloc(cnt * sizeof(float)), *got2 = malloc(cnt * sizeof(float));
  assert_true(y_ref && dx_ref && dw_ref && dw_scale && rstd_ref && got && got2);
  ref_rmsnorm_forward(&rp, x, y_ref, rstd_ref);
  ref_rmsnorm_backward(&rp, dy, x, rstd_ref, dx_ref, dw_ref, c->accumulate ? dw0 : NULL,
                       dw_scale, &dx_scale);

  cl_mem bx = ng_test_upload(c->xd, x, cnt, off, G);
  cl_mem bw = has_w ? ng_test_upload(wd, w, c->n, off, G) : NULL;
  cl_mem by = ng_test_upload(c->xd, NULL, cnt, off, G);
  cl_mem br = ng_test_upload(NG_F32, NULL, c->rows, off, G);
  cl_mem bdy = ng_test_upload(c->xd, dy, cnt, off, G);
  cl_mem brr = ng_test_upload(NG_F32, rstd_ref, c->rows, off, G);
  cl_mem bdx = ng_test_upload(c->xd, NULL, cnt, off, G);
  cl_mem bdw = !c->frozen && has_w ? ng_test_upload(wd, dw0, c->n, off, G) : NULL;

  ng_rmsnorm_params p = {c->rows, c->n, c->eps, c->offset, c->mode};
  ng_tensor tw = has_w ? ng_tensor_of(bw, off, wd) : ng_tensor_none();
  NG_OK(ng_rmsnorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, off, c->xd), tw,
                           ng_tensor_of(by, off, c->xd), ng_tensor_of(br, off, NG_F32), 0, NULL,
                           NULL));
  ng_tensor tdw = bdw ? ng_tensor_of(bdw, off, wd) : ng_tensor_none();
  cl_event ev = NULL;
  NG_OK(ng_rmsnorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, off, c->xd),
                            ng_tensor_of(bx, off, c->xd), tw, ng_tensor_of(brr, off, NG_F32),
                            ng_tensor_of(bdx, off, c->xd), tdw,
                            c->accumulate ? NG_ACCUMULATE_GRAD : 0, ng_tensor_none(), 0, NULL,
                            &ev));
  assert_non_null(ev);
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);

  char what[320];
  ng_test_download(by, c->xd, off, cnt, got);
  snprintf(what, sizeof what, "y [%s]", name);
  ng_tol yt = ng_tol_for(c->xd, y_ref, cnt, 1e-6);
  if (c->mode != NG_CAST_GEMMA) yt.rtol *= 2; /* two roundings: xhat, then y */
  NG_ASSERT_CLOSE(what, got, y_ref, cnt, yt);
  check_guard(what, by, c->xd, off, cnt);

  ng_test_download(br, NG_F32, off, c->rows, got);
  double *rd = malloc(c->rows * sizeof(double));
  for (size_t r = 0; r < c->rows; r++) rd[r] = rstd_ref[r];
  snprintf(what, sizeof what, "rstd [%s]", name);
  /* f32 sums in another order, and rsqrt within 2 ulp; in `none` mode a rounding boundary of
   * the x dtype may be crossed, one unit of that dtype */
  const double sum_rel = 1e-6 + 2e-7 * sqrt((double)c->n);
  ng_tol rt = {c->mode == NG_CAST_NONE ? fmax(ng_tol_for(c->xd, rd, 0, 0).rtol, sum_rel) : sum_rel, 0};
  NG_ASSERT_CLOSE(what, got, rd, c->rows, rt);
  free(rd);
  check_guard(what, br, NG_F32, off, c->rows);

  ng_test_download(bdx, c->xd, off, cnt, got);
  snprintf(what, sizeof what, "dx [%s]", name);
  ng_tol dxt = ng_tol_for(c->xd, dx_ref, cnt, 0);
  dxt.atol += 4e-6 * dx_scale;
  NG_ASSERT_CLOSE(what, got, dx_ref, cnt, dxt);
  check_guard(what, bdx, c->xd, off, cnt);

  if (bdw) {
    ng_test_download(bdw, wd, off, c->n, got);
    double mx = 0;
    for (size_t j = 0; j < c->n; j++) mx = fmax(mx, dw_scale[j]);
    ng_tol t = ng_tol_for(wd, dw_ref, c->n, 0);
    t.atol = 2e-6 * mx * (1 + sqrt((double)c->rows) * 0.1);
    if (c->mode == NG_CAST_LLAMA && c->xd != NG_F32) t.atol += mx / 256 / sqrt((double)c->rows);
    snprintf(what, sizeof what, "dweight [%s]", name);
    NG_ASSERT_CLOSE(what, got, dw_ref, c->n, t);
    check_guard(what, bdw, wd, off, c->n);
  }

  /* Frozen and unfrozen runs give the same dx bits. */
  if (bdw) {
    cl_mem bdx2 = ng_test_upload(c->xd, NULL, cnt, off, G);
    NG_OK(ng_rmsnorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, off, c->xd),
                              ng_tensor_of(bx, off, c->xd), tw, ng_tensor_of(brr, off, NG_F32),
                              ng_tensor_of(bdx2, off, c->xd), ng_tensor_none(), 0,
                              ng_tensor_none(), 0, NULL, NULL));
    ng_test_download(bdx2, c->xd, off, cnt, got2);
    ng_test_download(bdx, c->xd, off, cnt, got);
    if (memcmp(got, got2, cnt * sizeof(float)) != 0)
      fail_msg("dx differs between frozen and unfrozen runs [%s]", name);
    clReleaseMemObject(bdx2);
  }

  clReleaseMemObject(bx);
  if (bw) clReleaseMemObject(bw);
  clReleaseMemObject(by);
  clReleaseMemObject(br);
  clReleaseMemObject(bdy);
  clReleaseMemObject(brr);
  clReleaseMemObject(bdx);
  if (bdw) clReleaseMemObject(bdw);
  free(x), free(dy), free(w), free(dw0), free(y_ref), free(dx_ref), free(dw_ref), free(dw_scale);
  free(rstd_ref), free(got), free(got2);
}

/* Every mode × x dtype × weight dtype (none, f32, bf16, f16) × frozen × accumulate, on a shape
 * that takes the vector path and one that takes the scalar path. */
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
              rms_case c = {shapes[sh][0], shapes[sh][1], xds[xi], wds[wi], (ng_casting_mode)m,
                            fr != 0, acc != 0, shapes[sh][2], m == 1 ? 1.0f : 0.0f, 1e-6f,
                            seed++};
              run_case(&c);
            }
}

/* N = 1, 7, 4097, 65536, 262144 with one row and many rows; 24584 and 32768, which bf16 rows on
 * NVIDIA hold in groups of 1024 × 4 in calls of at most a row a compute unit
 * (NG_ROWS_HOLD4_FEW) and split in longer ones (the last of 24584's four slices one vector). */
static void test_shapes(void **state) {
  (void)state;
  const size_t shapes[][2] = {{1000, 1},   {1, 1},       {1000, 7},  {1, 7},
                              {1, 4097},   {1000, 4097}, {1, 65536}, {1000, 65536},
                              {3, 262144}, {3, 24584},   {64, 32768}, {200, 24584}};
  for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
    rms_case c = {shapes[i][0], shapes[i][1], NG_BF16, NG_F32, NG_CAST_LLAMA, false, i % 2 == 0,
                  0, 0.0f, 1e-6f, 100 + i};
    run_case(&c);
    c.xd = NG_F32;
    c.wd = NG_BF16;
    c.frozen = i % 3 == 0;
    c.accumulate = false;
    c.off = 8;
    c.mode = NG_CAST_GEMMA;
    if (shapes[i][0] * shapes[i][1] <= 5000000) run_case(&c);
  }
  /* f16 rows of 2049-4096 vectors: on NVIDIA held by 1024 × 4 in every call (NG_ROWS_HOLD4) */
  rms_case f16r = {200, 24584, NG_F16, NG_F32, NG_CAST_LLAMA, false, true, 0, 0.0f, 1e-6f, 119};
  run_case(&f16r);
  /* 16-bit rows of 513-1024 vectors, more rows than an H100 has compute units: on NVIDIA the
   * forward's 256 × 4, a group a row (NG_ROWS_256X4) */
  rms_case h = {300, 6000, NG_F16, NG_F32, NG_CAST_LLAMA, false, false, 0, 0.0f, 1e-6f, 120};
  run_case(&h);
  /* bf16 rows of 257-448 vectors: on NVIDIA the forward's 128 × 4 up to 384 vectors
   * (NG_ROWS_FWD_128X4), the backward's groups of half the row, 160 × 2 at 2504 (313 vectors,
   * the last warp's second slots part idle), 192 × 2 at 3000 and 224 × 2 at 3496
   * (NG_ROWS_HALF_MID), dW summed by a separate launch; more than 16 rows an H100 compute unit
   * and one (256 × 2) */
  for (int i = 0; i < 4; i++) {
    const size_t n = i == 2 ? 3000 : i == 3 ? 3496 : 2504;
    rms_case m = {i == 1 ? 1 : 2200, n, NG_BF16, i == 2 ? NG_BF16 : NG_F32,
                  i == 2 ? NG_CAST_GEMMA : NG_CAST_LLAMA, false, false, 0, 0.0f, 1e-6f, 121 + i};
    run_case(&m);
  }
  /* f32 rows of 769-2048 vectors: on NVIDIA the backward splits them across work-groups rather
   * than holding them (NG_ROWS_F32_1SLOT), with dW and frozen */
  for (int i = 0; i < 2; i++) {
    rms_case f = {i ? 3 : 40, i ? 12288 : 7168, NG_F32, NG_BF16, NG_CAST_GEMMA, i == 1, false,
                  0, 0.0f, 1e-6f, 140 + i};
    run_case(&f);
  }
  /* f16 rows of more than 1280 vectors: on NVIDIA the backward splits them too
   * (NG_ROWS_F16_1SLOT; 1288 vectors, the second slice part-filled), with dW and frozen; f32
   * rows of 769-1024 vectors, which RMSNorm's forward streams there (NG_ROWS_F32_STREAM_1K) */
  for (int i = 0; i < 2; i++) {
    rms_case f = {i ? 5 : 150, 10304, NG_F16, NG_F32, NG_CAST_LLAMA, i == 1, i == 0, 8, 0.0f,
                  1e-6f, 142 + i};
    run_case(&f);
  }
  rms_case fs = {150, 8184, NG_F32, NG_F32, NG_CAST_LLAMA, false, false, 0, 0.0f, 1e-6f, 144};
  run_case(&fs);
  /* 16-bit rows of 513-768 vectors in the backward, more than 8 rows an H100 compute unit: on
   * NVIDIA groups of half the row rounded up to a warp, not a power of two, two a compute unit
   * (NG_ROWS_FIT2: 288 work-items of two vectors at 4608; 288 at 4160, the last 56 with one; 384
   * at 6000, the last 18 with one), dW summed by a separate launch (1, the default there) and in
   * the kernel (2, whose tree takes 256 of 288 work-items) */
  ng_test_env *e = ng_test_env_get();
  const size_t fit[][2] = {{1100, 4608}, {1100, 4160}, {1100, 6000}};
  for (size_t i = 0; i < NG_ARRAY_LEN(fit); i++)
    for (unsigned red = 1; red <= 2; red++) {
      NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, red));
      rms_case f = {fit[i][0], fit[i][1], i == 1 ? NG_F16 : NG_BF16, red == 1 ? NG_F32 : NG_BF16,
                    (ng_casting_mode)i, false, red == 2, i == 2 ? 8 : 0, 0.0f, 1e-6f,
                    130 + 2 * i + red};
      run_case(&f);
    }
  ng_test_reset_overrides(e->ctx);
}

/* The GPU-shaped kernels (a row per work-group, local-memory reductions, dW in registers or in
 * the partial row) on whatever device runs the tests. */
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
      rms_case c = {shapes[i][0], shapes[i][1], (ng_dtype)xi, NG_BF16, (ng_casting_mode)(i % 3),
                    false, xi == 2, i == 4 ? 8 : 0, 0.5f, 1e-5f, 200 + i * 3 + xi};
      run_case(&c);
    }
  /* four and eight register slots: the forward keeps 16-bit rows in their storage bits and
   * reads w' per row (whole rows, idle slots, rows beyond the registers) */
  const size_t wide[][3] = {{4, 9, 2048}, {4, 5, 1800}, {8, 3, 4096}, {8, 3, 4160}};
  /* (a partly idle last slot is where PoCL once stored past the row: NG_UNROLL_STORES) */
  for (size_t i = 0; i < NG_ARRAY_LEN(wide); i++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, (unsigned)wide[i][0]));
    rms_case c = {wide[i][1], wide[i][2], i % 2 ? NG_F16 : NG_BF16, NG_F32,
                  (ng_casting_mode)(i % 3), false, false, 0, 0.5f, 1e-5f, 400 + i};
    run_case(&c);
  }
  /* the forward's launch of 16-bit rows of 513-1024 vectors on NVIDIA (NG_ROWS_256X4): 256 × 4,
   * a group a row, the last slot partly idle (8000) or empty (6000); the backward's 512 × 2
   * groups with dW: bf16 dy and x held in their storage bits (RAW_ROWS), f16 as floats */
  const struct {
    unsigned wg, reg;
    rms_case c;
  } held[] = {
      {256, 4, {5, 8000, NG_F16, NG_F32, NG_CAST_LLAMA, false, false, 0, 0.0f, 1e-6f, 410}},
      {256, 4, {6, 6000, NG_BF16, NG_BF16, NG_CAST_GEMMA, false, false, 0, 0.0f, 1e-6f, 411}},
      {512, 2, {3, 8000, NG_BF16, NG_F32, NG_CAST_LLAMA, false, true, 8, 0.5f, 1e-6f, 412}},
      {512, 2, {4, 8192, NG_F16, NG_BF16, NG_CAST_NONE, false, false, 0, 0.0f, 1e-5f, 413}},
      /* one slot and a row shorter than the group (125 and 255 vectors): on a CPU the host
       * gives it two slots, as PoCL 3.1 stored past the row from the idle work-items */
      {128, 1, {5, 1000, NG_BF16, NG_F32, NG_CAST_LLAMA, false, false, 8, 0.5f, 1e-6f, 414}},
      {256, 1, {3, 2040, NG_F16, NG_BF16, NG_CAST_GEMMA, true, false, 0, 0.0f, 1e-6f, 415}},
      /* multiples of 32 that are not powers of two (an override's, tuning.txt's or the table's:
       * the sums fold the group into its largest power of two first; kept small here, as PoCL
       * compiles a kernel for each group size): a row held exactly (96 × 2 × 8 = 1536), one
       * beyond the registers, and 160 × 4 (5120) frozen */
      {96, 2, {7, 1536, NG_BF16, NG_F32, NG_CAST_LLAMA, false, false, 0, 0.5f, 1e-6f, 416}},
      {96, 2, {5, 1544, NG_F16, NG_BF16, NG_CAST_NONE, false, true, 8, 0.0f, 1e-5f, 417}},
      {160, 4, {4, 5120, NG_BF16, NG_BF16, NG_CAST_GEMMA, true, false, 0, 0.0f, 1e-6f, 418}},
      /* the H200 table's backward fits at their own lengths (src/tuning.c): 576 × 2 at 9216 and
       * 768 × 2 at 12288 (a power of two and an eighth, a half) */
      {576, 2, {3, 9216, NG_BF16, NG_F32, NG_CAST_LLAMA, false, false, 0, 0.0f, 1e-6f, 419}},
      {768, 2, {2, 12288, NG_F16, NG_F32, NG_CAST_GEMMA, true, false, 0, 0.0f, 1e-6f, 420}},
  };
  for (size_t i = 0; i < NG_ARRAY_LEN(held); i++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, held[i].wg));
    NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, held[i].reg));
    run_case(&held[i].c);
  }
  ng_test_reset_overrides(e->ctx);
}

/* dW summed by the backward kernel's last groups (NG_TUNE_FUSED_REDUCE, the default on NVIDIA)
 * instead of a separate kernel: the GPU shape with one group, a few, and more groups than rows;
 * vector and scalar rows; every weight dtype, accumulate, offsets. Each case launches several
 * backwards on one queue, so the kernel's counters must be back at zero after each. */
static void test_fused_reduce(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_test_fused_reduce_shape(e->ctx, 64, 2);
  /* the last: two per compute unit, where the reducers keep 16 rows in flight */
  const unsigned groups[] = {1, 5, 40, ng_test_two_per_cu()};
  const size_t shapes[][2] = {{50, 1000}, {33, 77}, {300, 8}, {1, 1024}};
  const ng_dtype wds[] = {NG_F32, NG_BF16, NG_F16};
  uint64_t seed = 700;
  for (size_t g = 0; g < NG_ARRAY_LEN(groups); g++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, groups[g]));
    for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
      rms_case c = {shapes[i][0], shapes[i][1], (ng_dtype)((g + i) % 3), wds[(g + 2 * i) % 3],
                    (ng_casting_mode)(i % 3), false, (g + i) % 2 == 1, i == 1 ? 5 : 0, 0.5f,
                    1e-5f, seed++};
      run_case(&c);
    }
  }
  ng_test_reset_overrides(e->ctx);
}

/* Rows split across work-groups that exchange their shares of the row sum, forward and backward
 * (the default for long rows on NVIDIA, NG_TUNE_FUSED_REDUCE = 2 elsewhere). With 64 work-items
 * of one vector, a row of more than 64 vectors is beyond the group; a bf16 slice is 64·4
 * vectors: n = 8·200 is one slice (the only split a CPU device takes: no group waits for another
 * there), 8·1000 four and 8·4000 sixteen (GPUs; elsewhere the column split or rows streamed
 * twice). Sets of one group, a few, more than the rows, and the device's default; every weight
 * dtype, frozen, accumulate, offsets, the casting modes; f16 rows (slices as bf16's) and f32 rows
 * (the forward's slices as bf16's, the backward's of 64·2 vectors: n = 1000, 125 vectors, is one
 * on a CPU device; 8·4000 is 32, beyond the split, so those rows take the old paths). Each case
 * runs several passes on one queue, so the kernels' counters and share banks must be back at
 * zero after each. */
static void test_split_rows(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_test_fused_reduce_shape(e->ctx, 64, 1); /* NG_TUNE_FUSED_REDUCE = 2 also splits rows */
  const size_t shapes[][2] = {{37, 1600}, {5, 8000}, {40, 8000}, {3, 32000}, {2, 1608}, {6, 1000}};
  const unsigned groups[] = {NG_TUNE_AUTO, 1, 7, 64};
  const int wds[] = {NG_F32, NG_BF16, NG_F16, -1};
  uint64_t seed = 900;
  for (size_t g = 0; g < NG_ARRAY_LEN(groups); g++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, groups[g]));
    /* the split backward's partials summed in its kernel (2) or by the separate kernel (3) */
    NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, g / 2 % 2 ? 3 : 2));
    for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
      const int wd = wds[(g + i) % 4];
      const bool frozen = wd < 0 || (g + i) % 3 == 2;
      const ng_dtype xd = (g + i) % 4 == 3 ? NG_F16 : (g + i) % 4 == 1 ? NG_F32 : NG_BF16;
      rms_case c = {shapes[i][0], shapes[i][1], xd, wd,
                    (ng_casting_mode)((g + 2 * i) % 3), frozen, !frozen && g % 2 == 1,
                    i == 1 ? 8 : 0, 0.5f, 1e-5f, seed++};
      run_case(&c);
    }
  }
  /* split kernels on groups of 96, a multiple of 32 that is not a power of two (an override's,
   * tuning.txt's or the table's), with dW summed in the kernel and by the separate one */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 96));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, NG_TUNE_AUTO));
  for (size_t k = 0; k < 3; k++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, k == 1 ? 3 : 2));
    rms_case c = {k == 2 ? 40 : 5, k == 1 ? 1544 : 8000, k == 1 ? NG_F16 : NG_BF16,
                  k == 2 ? NG_BF16 : NG_F32, (ng_casting_mode)k, k == 2, k == 0,
                  k == 1 ? 8 : 0, 0.5f, 1e-5f, seed++};
    run_case(&c);
  }
  ng_test_reset_overrides(e->ctx);
}

/* Backward is the gradient of forward: L = Σ y·g, checked by central differences in f32 with
 * the gemma mode (no intermediate rounding) and a non-trivial offset. */
static double loss(ng_test_env *e, const ng_rmsnorm_params *p, const float *x, const float *w,
                   const float *g) {
  size_t cnt = p->rows * p->n;
  cl_mem bx = ng_test_upload(NG_F32, x, cnt, 0, 0), bw = ng_test_upload(NG_F32, w, p->n, 0, 0);
  cl_mem by = ng_test_upload(NG_F32, NULL, cnt, 0, 0), br = ng_test_upload(NG_F32, NULL, p->rows, 0, 0);
  NG_OK(ng_rmsnorm_forward(e->ctx, e->queue, p, ng_tensor_of(bx, 0, NG_F32),
                           ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(by, 0, NG_F32),
                           ng_tensor_of(br, 0, NG_F32), 0, NULL, NULL));
  float *y = malloc(cnt * sizeof(float));
  ng_test_download(by, NG_F32, 0, cnt, y);
  double l = 0;
  for (size_t i = 0; i < cnt; i++) l += (double)y[i] * g[i];
  free(y);
  clReleaseMemObject(bx), clReleaseMemObject(bw), clReleaseMemObject(by), clReleaseMemObject(br);
  return l;
}

static void test_finite_difference(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_rmsnorm_params p = {3, 13, 1e-5f, 0.25f, NG_CAST_GEMMA};
  size_t cnt = p.rows * p.n;
  ng_rng rng;
  ng_rng_seed(&rng, 77);
  float *x = ng_test_random(&rng, NG_F32, cnt, 0.2, 1.0);
  float *w = ng_test_random(&rng, NG_F32, p.n, 1.0, 0.3);
  float *g = ng_test_random(&rng, NG_F32, cnt, 0.0, 1.0);
  /* analytic */
  cl_mem bx = ng_test_upload(NG_F32, x, cnt, 0, 0), bw = ng_test_upload(NG_F32, w, p.n, 0, 0);
  cl_mem by = ng_test_upload(NG_F32, NULL, cnt, 0, 0), br = ng_test_upload(NG_F32, NULL, p.rows, 0, 0);
  cl_mem bg = ng_test_upload(NG_F32, g, cnt, 0, 0), bdx = ng_test_upload(NG_F32, NULL, cnt, 0, 0);
  cl_mem bdw = ng_test_upload(NG_F32, NULL, p.n, 0, 0);
  NG_OK(ng_rmsnorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, 0, NG_F32),
                           ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(by, 0, NG_F32),
                           ng_tensor_of(br, 0, NG_F32), 0, NULL, NULL));
  NG_OK(ng_rmsnorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bg, 0, NG_F32),
                            ng_tensor_of(bx, 0, NG_F32), ng_tensor_of(bw, 0, NG_F32),
                            ng_tensor_of(br, 0, NG_F32), ng_tensor_of(bdx, 0, NG_F32),
                            ng_tensor_of(bdw, 0, NG_F32), 0, ng_tensor_none(), 0, NULL, NULL));
  float *dx = malloc(cnt * sizeof(float)), *dw = malloc(p.n * sizeof(float));
  ng_test_download(bdx, NG_F32, 0, cnt, dx);
  ng_test_download(bdw, NG_F32, 0, p.n, dw);
  const float h = 1e-2f;
  for (size_t i = 0; i < cnt; i++) {
    float keep = x[i];
    x[i] = keep + h;
    double lp = loss(e, &p, x, w, g);
    x[i] = keep - h;
    double lm = loss(e, &p, x, w, g);
    x[i] = keep;
    double fd = (lp - lm) / (2.0 * h);
    if (fabs(fd - dx[i]) > 2e-3 * (1 + fabs(fd)))
      fail_msg("dx[%zu]: backward %.6g, finite difference %.6g", i, (double)dx[i], fd);
  }
  for (size_t j = 0; j < p.n; j++) {
    float keep = w[j];
    w[j] = keep + h;
    double lp = loss(e, &p, x, w, g);
    w[j] = keep - h;
    double lm = loss(e, &p, x, w, g);
    w[j] = keep;
    double fd = (lp - lm) / (2.0 * h);
    if (fabs(fd - dw[j]) > 2e-3 * (1 + fabs(fd)))
      fail_msg("dweight[%zu]: backward %.6g, finite difference %.6g", j, (double)dw[j], fd);
  }
  free(x), free(w), free(g), free(dx), free(dw);
  clReleaseMemObject(bx), clReleaseMemObject(bw), clReleaseMemObject(by), clReleaseMemObject(br);
  clReleaseMemObject(bg), clReleaseMemObject(bdx), clReleaseMemObject(bdw);
}

/* Same inputs, same bits: dW has no float atomics. */
/* The prefetch turned off (NG_TUNE_PREFETCH = 1: on a CPU the row loops' far prefetch, on NVIDIA
 * the L2 prefetch), or on a CPU asked from another distance (64 bytes, a chunk's own line; 8 KB),
 * is a hint gone or moved: the same bits as with the default, and right against the reference. */
static void test_prefetch_off(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_rmsnorm_params p = {9, 4104, 1e-6f, 0.0f, NG_CAST_LLAMA}; /* 513 vectors: a tail */
  const size_t cnt = p.rows * p.n, off = 8;
  ng_rng rng;
  ng_rng_seed(&rng, 11);
  float *x = ng_test_random(&rng, NG_BF16, cnt, 0, 1), *dy = ng_test_random(&rng, NG_BF16, cnt, 0, 1);
  float *w = ng_test_random(&rng, NG_F32, p.n, 1, 0.1);
  cl_mem bx = ng_test_upload(NG_BF16, x, cnt, off, 0), bdy = ng_test_upload(NG_BF16, dy, cnt, off, 0);
  cl_mem bw = ng_test_upload(NG_F32, w, p.n, off, 0);
  cl_mem by = ng_test_upload(NG_BF16, NULL, cnt, off, 0), br = ng_test_upload(NG_F32, NULL, p.rows, off, 0);
  cl_mem bdx = ng_test_upload(NG_BF16, NULL, cnt, off, 0), bdw = ng_test_upload(NG_F32, NULL, p.n, off, 0);
  static const unsigned pfs[] = {NG_TUNE_AUTO, 1, 64, 8192};
  float *got[4][3];
  cl_device_type type = 0;
  clGetDeviceInfo(e->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  for (int pf = 0; pf < 4; pf++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_PREFETCH, pfs[pf]));
    ng_context_stats before, after;
    NG_OK(ng_context_get_stats(e->ctx, &before));
    NG_OK(ng_rmsnorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, off, NG_BF16),
                             ng_tensor_of(bw, off, NG_F32), ng_tensor_of(by, off, NG_BF16),
                             ng_tensor_of(br, off, NG_F32), 0, NULL, NULL));
    NG_OK(ng_rmsnorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, off, NG_BF16),
                              ng_tensor_of(bx, off, NG_BF16), ng_tensor_of(bw, off, NG_F32),
                              ng_tensor_of(br, off, NG_F32), ng_tensor_of(bdx, off, NG_BF16),
                              ng_tensor_of(bdw, off, NG_F32), 0, ng_tensor_none(), 0, NULL, NULL));
    /* on a CPU each setting is a program of its own (the distance is a build option) */
    NG_OK(ng_context_get_stats(e->ctx, &after));
    if ((type & CL_DEVICE_TYPE_CPU) && pf > 0 && after.programs_cached <= before.programs_cached)
      fail_msg("prefetch=%u built no program of its own", pfs[pf]);
    const size_t len[3] = {cnt, cnt, p.n};
    cl_mem out[3] = {by, bdx, bdw};
    const ng_dtype dt[3] = {NG_BF16, NG_BF16, NG_F32};
    for (int k = 0; k < 3; k++) {
      got[pf][k] = malloc(len[k] * sizeof(float));
      ng_test_download(out[k], dt[k], off, len[k], got[pf][k]);
    }
    if (pf)
      for (int k = 0; k < 3; k++)
        if (memcmp(got[0][k], got[pf][k], len[k] * sizeof(float)) != 0)
          fail_msg("%s differs with prefetch=%u", k == 0 ? "y" : k == 1 ? "dx" : "dweight",
                   pfs[pf]);
  }
  for (int pf = 0; pf < 4; pf++)
    for (int k = 0; k < 3; k++) free(got[pf][k]);
  rms_case c = {p.rows, p.n, NG_BF16, NG_F32, NG_CAST_LLAMA, false, false, off, 0.0f, 1e-6f, 12};
  run_case(&c); /* still under the override */
  ng_test_reset_overrides(e->ctx);
  cl_mem all[] = {bx, bdy, bw, by, br, bdx, bdw};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++) clReleaseMemObject(all[i]);
  free(x), free(dy), free(w);
}

static void test_deterministic(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_rmsnorm_params p = {513, 1000, 1e-6f, 0.0f, NG_CAST_LLAMA};
  size_t cnt = p.rows * p.n;
  ng_rng rng;
  ng_rng_seed(&rng, 5);
  float *x = ng_test_random(&rng, NG_BF16, cnt, 0, 1), *dy = ng_test_random(&rng, NG_BF16, cnt, 0, 1);
  float *w = ng_test_random(&rng, NG_F32, p.n, 1, 0.1), *r = malloc(p.rows * sizeof(float));
  for (size_t i = 0; i < p.rows; i++) r[i] = 0.9f;
  cl_mem bx = ng_test_upload(NG_BF16, x, cnt, 0, 0), bdy = ng_test_upload(NG_BF16, dy, cnt, 0, 0);
  cl_mem bw = ng_test_upload(NG_F32, w, p.n, 0, 0), br = ng_test_upload(NG_F32, r, p.rows, 0, 0);
  cl_mem bdx = ng_test_upload(NG_BF16, NULL, cnt, 0, 0), bdw = ng_test_upload(NG_F32, NULL, p.n, 0, 0);
  float *first = malloc(p.n * sizeof(float)), *again = malloc(p.n * sizeof(float));
  for (int it = 0; it < 3; it++) {
    NG_OK(ng_rmsnorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, 0, NG_BF16),
                              ng_tensor_of(bx, 0, NG_BF16), ng_tensor_of(bw, 0, NG_F32),
                              ng_tensor_of(br, 0, NG_F32), ng_tensor_of(bdx, 0, NG_BF16),
                              ng_tensor_of(bdw, 0, NG_F32), 0, ng_tensor_none(), 0, NULL, NULL));
    ng_test_download(bdw, NG_F32, 0, p.n, it ? again : first);
    if (it) assert_memory_equal(first, again, p.n * sizeof(float));
  }
  /* a caller-provided scratch buffer gives the same bits */
  size_t bytes = 0;
  NG_OK(ng_rmsnorm_backward_scratch_size(e->ctx, &p, 1, &bytes));
  assert_true(bytes > 0);
  cl_mem sc = ng_test_upload(NG_F32, NULL, bytes / 4, 8, 0);
  NG_OK(ng_rmsnorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, 0, NG_BF16),
                            ng_tensor_of(bx, 0, NG_BF16), ng_tensor_of(bw, 0, NG_F32),
                            ng_tensor_of(br, 0, NG_F32), ng_tensor_of(bdx, 0, NG_BF16),
                            ng_tensor_of(bdw, 0, NG_F32), 0, ng_tensor_of(sc, 8, NG_F32), 0, NULL,
                            NULL));
  ng_test_download(bdw, NG_F32, 0, p.n, again);
  assert_memory_equal(first, again, p.n * sizeof(float));
  /* ... and at an offset that is no multiple of 8, in a buffer of the size the query gives from
   * there: the op rounds the offset up (the partial rows are written 8 floats at a time), so dW
   * is the same bits and dx the frozen call's (which has no scratch). The offset used to turn
   * the dW call's loads scalar: on PoCL 7 of these 513 000 dx values then differed. A buffer
   * without the query's headroom is refused before anything runs. */
  cl_mem sc3 = ng_test_upload(NG_F32, NULL, bytes / 4, 3, 0);
  cl_mem sc3s = ng_test_upload(NG_F32, NULL, (bytes - NG_SCRATCH_VEC_PAD) / 4, 3, 0);
  float *dx_dw = malloc(cnt * sizeof(float)), *dx_frozen = malloc(cnt * sizeof(float));
  for (int k = 0; k < 3; k++) {
    const ng_status want = k == 2 ? NG_ERR_BUFFER_TOO_SMALL : NG_SUCCESS;
    NG_EXPECT_STATUS(ng_rmsnorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, 0, NG_BF16),
                                         ng_tensor_of(bx, 0, NG_BF16), ng_tensor_of(bw, 0, NG_F32),
                                         ng_tensor_of(br, 0, NG_F32), ng_tensor_of(bdx, 0, NG_BF16),
                                         k == 1 ? ng_tensor_none() : ng_tensor_of(bdw, 0, NG_F32),
                                         0, ng_tensor_of(k == 2 ? sc3s : sc3, 3, NG_F32), 0, NULL,
                                         NULL),
                     want);
    if (k == 2) break;
    ng_test_download(bdx, NG_BF16, 0, cnt, k ? dx_frozen : dx_dw);
    if (k) continue;
    ng_test_download(bdw, NG_F32, 0, p.n, again);
    assert_memory_equal(first, again, p.n * sizeof(float));
  }
  assert_memory_equal(dx_dw, dx_frozen, cnt * sizeof(float));
  assert_non_null(strstr(ng_last_error_detail(), "rounded up"));
  size_t frozen_bytes = 1;
  NG_OK(ng_rmsnorm_backward_scratch_size(e->ctx, &p, 0, &frozen_bytes));
  assert_int_equal(frozen_bytes, 0);
  free(x), free(dy), free(w), free(r), free(first), free(again), free(dx_dw), free(dx_frozen);
  clReleaseMemObject(bx), clReleaseMemObject(bdy), clReleaseMemObject(bw), clReleaseMemObject(br);
  clReleaseMemObject(bdx), clReleaseMemObject(bdw), clReleaseMemObject(sc);
  clReleaseMemObject(sc3), clReleaseMemObject(sc3s);
}

static int teardown(void **state) {
  (void)state;
  ng_test_env_release();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matrix),          cmocka_unit_test(test_workgroup_shape),
      cmocka_unit_test(test_finite_difference), cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_shapes),          cmocka_unit_test(test_fused_reduce),
      cmocka_unit_test(test_split_rows),
      cmocka_unit_test(test_prefetch_off),
  };
  return NG_RUN_GROUP_TESTS(tests, NULL, teardown);
}
