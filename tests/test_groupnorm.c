/* GroupNorm forward and backward against the double-precision reference: x dtype × parameter
 * dtype (or none) × frozen weight × frozen bias × accumulate, inputs of rank 2 to 5 (S = 1, odd,
 * vector-aligned), G from 1 to C, buffer offsets with guard checks, the whole-block path and the
 * path that splits groups over several work-groups, both kernel shapes (CPU: a unit per
 * work-item; GPU: a unit per work-group), a group of more than a million elements with a large
 * mean, a finite-difference check, determinism, bit-identical dx across frozen combinations, and
 * every validation error (which must leave every buffer untouched). */
#include "ng_test.h"
#include "ref_groupnorm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gn_case {
  size_t B, C, S, G;
  ng_dtype xd;
  int wd; /* parameters' dtype; -1 = no weight (a bias, when present, is then f32) */
  bool has_b;
  bool freeze_w, freeze_b, accumulate;
  size_t off; /* element offset applied to every buffer */
  float eps;
  double mean, std; /* of x */
  uint64_t seed;
} gn_case;

static void describe(const gn_case *c, char *buf, size_t len) {
  snprintf(buf, len,
           "B=%zu C=%zu S=%zu G=%zu x=%s w=%s bias=%d frozen_w=%d frozen_b=%d acc=%d off=%zu", c->B,
           c->C, c->S, c->G, ng_dtype_name(c->xd),
           c->wd < 0 ? "none" : ng_dtype_name((ng_dtype)c->wd), c->has_b, c->freeze_w, c->freeze_b,
           c->accumulate, c->off);
}

#define GUARD 16

static void check_guard(const char *what, cl_mem m, ng_dtype dt, size_t off, size_t count) {
  if (!ng_test_guard_intact(m, dt, off, count, off + count + GUARD))
    fail_msg("%s: an element outside the output range was written", what);
}

static double *to_double(const float *v, size_t n) {
  double *d = malloc((n ? n : 1) * sizeof(double));
  assert_non_null(d);
  for (size_t i = 0; i < n; i++) d[i] = v[i];
  return d;
}

static double max_abs(const double *v, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs(v[i]));
  return m;
}

static void run_case(const gn_case *c) {
  ng_test_env *e = ng_test_env_get();
  char name[320], what[400];
  describe(c, name, sizeof name);
  const size_t cnt = c->B * c->C * c->S, off = c->off, nb = c->B * c->G, C = c->C;
  const size_t n = c->C / c->G * c->S;
  const bool has_w = c->wd >= 0, has_b = c->has_b;
  const ng_dtype pd = has_w ? (ng_dtype)c->wd : NG_F32;
  const bool dw_on = has_w && !c->freeze_w, db_on = !c->freeze_b;
  ng_rng rng;
  ng_rng_seed(&rng, c->seed);
  float *x = ng_test_random(&rng, c->xd, cnt, c->mean, c->std);
  float *dy = ng_test_random(&rng, c->xd, cnt, 0.0, 1.0);
  float *w = ng_test_random(&rng, pd, C, 1.0, 0.5);
  float *b = ng_test_random(&rng, pd, C, 0.0, 0.5);
  float *dw0 = ng_test_random(&rng, pd, C, 0.0, 3.0), *db0 = ng_test_random(&rng, pd, C, 0.0, 3.0);
  ref_groupnorm rp = {c->B, c->C, c->S, c->G, c->eps, c->xd, has_w ? w : NULL, has_b ? b : NULL};
  float *mean_ref = malloc(nb * sizeof(float)), *rstd_ref = malloc(nb * sizeof(float));
  float *mean_got = malloc(nb * sizeof(float)), *rstd_got = malloc(nb * sizeof(float));
  double *y_ref = malloc(cnt * sizeof(double)), *dx_ref = malloc(cnt * sizeof(double));
  double *dw_ref = malloc(C * sizeof(double)), *db_ref = malloc(C * sizeof(double));
  double *dw_scale = malloc(C * sizeof(double)), *db_scale = malloc(C * sizeof(double));
  float *got = malloc(cnt * sizeof(float)), *got2 = malloc(cnt * sizeof(float));
  double dx_scale = 0;
  assert_true(mean_ref && rstd_ref && mean_got && rstd_got && y_ref && dx_ref && dw_ref && db_ref &&
              dw_scale && db_scale && got && got2);
  ref_groupnorm_stats(&rp, x, mean_ref, rstd_ref);

  cl_mem bx = ng_test_upload(c->xd, x, cnt, off, GUARD);
  cl_mem bw = has_w ? ng_test_upload(pd, w, C, off, GUARD) : NULL;
  cl_mem bb = has_b ? ng_test_upload(pd, b, C, off, GUARD) : NULL;
  cl_mem by = ng_test_upload(c->xd, NULL, cnt, off, GUARD);
  cl_mem bm = ng_test_upload(NG_F32, NULL, nb, off, GUARD);
  cl_mem br = ng_test_upload(NG_F32, NULL, nb, off, GUARD);
  ng_groupnorm_params p = {c->B, c->C, c->S, c->G, c->eps};
  ng_tensor tw = has_w ? ng_tensor_of(bw, off, pd) : ng_tensor_none();
  ng_tensor tb = has_b ? ng_tensor_of(bb, off, pd) : ng_tensor_none();
  cl_event ev = NULL;
  NG_OK(ng_groupnorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, off, c->xd), tw, tb,
                             ng_tensor_of(by, off, c->xd), ng_tensor_of(bm, off, NG_F32),
                             ng_tensor_of(br, off, NG_F32), ng_tensor_none(), 0, NULL, &ev));
  assert_non_null(ev);
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);

  /* statistics against double precision */
  ng_test_download(bm, NG_F32, off, nb, mean_got);
  ng_test_download(br, NG_F32, off, nb, rstd_got);
  double max_sd = 0;
  for (size_t i = 0; i < nb; i++) max_sd = fmax(max_sd, 1.0 / rstd_ref[i]);
  double *md = to_double(mean_ref, nb), *rd = to_double(rstd_ref, nb);
  snprintf(what, sizeof what, "mean [%s]", name);
  NG_ASSERT_CLOSE(what, mean_got, md, nb, ((ng_tol){2.5e-7, 1e-6 * max_sd}));
  snprintf(what, sizeof what, "rstd [%s]", name);
  NG_ASSERT_CLOSE(what, rstd_got, rd, nb, ((ng_tol){2e-6 + 1e-8 * sqrt((double)n), 0}));
  check_guard("mean", bm, NG_F32, off, nb);
  check_guard("rstd", br, NG_F32, off, nb);
  free(md), free(rd);

  /* y against the reference formed from the statistics the device saved */
  ref_groupnorm_apply(&rp, x, mean_got, rstd_got, y_ref);
  ng_test_download(by, c->xd, off, cnt, got);
  snprintf(what, sizeof what, "y [%s]", name);
  NG_ASSERT_CLOSE(what, got, y_ref, cnt, ng_tol_for(c->xd, y_ref, cnt, 2e-6));
  check_guard(what, by, c->xd, off, cnt);

  /* backward from the reference statistics */
  ref_groupnorm_backward(&rp, dy, x, mean_ref, rstd_ref, dx_ref, dw_ref, c->accumulate ? dw0 : NULL,
                         db_ref, c->accumulate ? db0 : NULL, dw_scale, db_scale, &dx_scale);
  cl_mem bdy = ng_test_upload(c->xd, dy, cnt, off, GUARD);
  cl_mem bmr = ng_test_upload(NG_F32, mean_ref, nb, off, GUARD);
  cl_mem brr = ng_test_upload(NG_F32, rstd_ref, nb, off, GUARD);
  cl_mem bdx = ng_test_upload(c->xd, NULL, cnt, off, GUARD);
  cl_mem bdw = dw_on ? ng_test_upload(pd, dw0, C, off, GUARD) : NULL;
  cl_mem bdb = db_on ? ng_test_upload(pd, db0, C, off, GUARD) : NULL;
  ng_tensor tdw = dw_on ? ng_tensor_of(bdw, off, pd) : ng_tensor_none();
  ng_tensor tdb = db_on ? ng_tensor_of(bdb, off, pd) : ng_tensor_none();
  NG_OK(ng_groupnorm_backward(
      e->ctx, e->queue, &p, ng_tensor_of(bdy, off, c->xd), ng_tensor_of(bx, off, c->xd), tw,
      ng_tensor_of(bmr, off, NG_F32), ng_tensor_of(brr, off, NG_F32), ng_tensor_of(bdx, off, c->xd),
      tdw, tdb, c->accumulate ? NG_ACCUMULATE_GRAD : 0, ng_tensor_none(), 0, NULL, &ev));
  assert_non_null(ev);
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);

  ng_test_download(bdx, c->xd, off, cnt, got);
  snprintf(what, sizeof what, "dx [%s]", name);
  ng_tol dxt = ng_tol_for(c->xd, dx_ref, cnt, 0);
  dxt.atol += 4e-6 * dx_scale;
  NG_ASSERT_CLOSE(what, got, dx_ref, cnt, dxt);
  check_guard(what, bdx, c->xd, off, cnt);
  /* per-channel sums over B·S terms in f32 */
  const double sum_rel = 2e-6 * (1 + 0.1 * sqrt((double)(c->B * c->S)));
  if (bdw) {
    ng_test_download(bdw, pd, off, C, got2);
    ng_tol t = ng_tol_for(pd, dw_ref, C, 0);
    t.atol += sum_rel * max_abs(dw_scale, C);
    snprintf(what, sizeof what, "dweight [%s]", name);
    NG_ASSERT_CLOSE(what, got2, dw_ref, C, t);
    check_guard(what, bdw, pd, off, C);
  }
  if (bdb) {
    ng_test_download(bdb, pd, off, C, got2);
    ng_tol t = ng_tol_for(pd, db_ref, C, 0);
    t.atol += sum_rel * max_abs(db_scale, C);
    snprintf(what, sizeof what, "dbias [%s]", name);
    NG_ASSERT_CLOSE(what, got2, db_ref, C, t);
    check_guard(what, bdb, pd, off, C);
  }

  /* dx has the same bits with both parameters frozen */
  if (bdw || bdb) {
    cl_mem bdx2 = ng_test_upload(c->xd, NULL, cnt, off, GUARD);
    NG_OK(ng_groupnorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, off, c->xd),
                                ng_tensor_of(bx, off, c->xd), tw, ng_tensor_of(bmr, off, NG_F32),
                                ng_tensor_of(brr, off, NG_F32), ng_tensor_of(bdx2, off, c->xd),
                                ng_tensor_none(), ng_tensor_none(), 0, ng_tensor_none(), 0, NULL,
                                NULL));
    ng_test_download(bdx2, c->xd, off, cnt, got2);
    if (memcmp(got, got2, cnt * sizeof(float)) != 0)
      fail_msg("dx differs between frozen and unfrozen runs [%s]", name);
    clReleaseMemObject(bdx2);
  }

  clReleaseMemObject(bx), clReleaseMemObject(by), clReleaseMemObject(bm), clReleaseMemObject(br);
  clReleaseMemObject(bdy), clReleaseMemObject(bmr), clReleaseMemObject(brr);
  clReleaseMemObject(bdx);
  if (bw) clReleaseMemObject(bw);
  if (bb) clReleaseMemObject(bb);
  if (bdw) clReleaseMemObject(bdw);
  if (bdb) clReleaseMemObject(bdb);
  free(x), free(dy), free(w), free(b), free(dw0), free(db0), free(mean_ref), free(rstd_ref);
  free(mean_got), free(rstd_got), free(y_ref), free(dx_ref), free(dw_ref), free(db_ref);
  free(dw_scale), free(db_scale), free(got), free(got2);
}

static gn_case mk(size_t B, size_t C, size_t S, size_t G, ng_dtype xd, int wd, size_t off,
                  uint64_t seed) {
  gn_case c = {B, C, S, G, xd, wd, true, false, false, false, off, 1e-5f, 0.3, 1.5, seed};
  return c;
}

/* Every x dtype × parameter dtype × frozen weight × frozen bias × accumulate on a shape that
 * takes the vector path; on the scalar path (odd S, offsets) every frozen combination with f32 x
 * and both extremes with the 16-bit ones (each combination is a program build on PoCL). */
static void test_matrix(void **state) {
  (void)state;
  const ng_dtype xds[] = {NG_F32, NG_F16, NG_BF16};
  const int wds[] = {NG_F32, NG_BF16, NG_F16};
  const size_t shapes[][5] = {{3, 12, 40, 4, 0}, {2, 6, 35, 3, 3}};
  uint64_t seed = 1;
  for (int sh = 0; sh < 2; sh++)
    for (int xi = 0; xi < 3; xi++)
      for (int wi = 0; wi < 3; wi++)
        for (int fw = 0; fw < 2; fw++)
          for (int fb = 0; fb < 2; fb++)
            for (int acc = 0; acc < 2; acc++) {
              if (fw && fb && acc) continue; /* nothing to accumulate into */
              if (sh == 1 && xi > 0 && fw != fb) continue;
              gn_case c = mk(shapes[sh][0], shapes[sh][1], shapes[sh][2], shapes[sh][3], xds[xi],
                             wds[wi], shapes[sh][4], seed++);
              c.freeze_w = fw, c.freeze_b = fb, c.accumulate = acc;
              run_case(&c);
            }
  /* no weight, with and without a bias */
  for (int xi = 0; xi < 3; xi++)
    for (int hb = 0; hb < 2; hb++) {
      gn_case c = mk(2, 8, 24, 2, xds[xi], -1, 0, seed++);
      c.has_b = hb, c.freeze_b = hb == 0;
      run_case(&c);
    }
}

/* x of rank 2 ([B, C]: S = 1), 3, 4 and 5; groups 1, a divisor, C. */
static void test_shapes(void **state) {
  (void)state;
  const size_t shapes[][3] = {/* B, C, S */
                              {4, 12, 1}, {1, 12, 1},        {3, 6, 17}, {2, 8, 64},
                              {2, 6, 60}, {1, 4, 3 * 4 * 5}, {5, 1, 9},  {1, 2, 4097}};
  uint64_t seed = 100;
  for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
    const size_t C = shapes[i][1];
    const size_t gs[] = {1, C % 2 == 0 && C > 2 ? C / 2 : 1, C};
    for (int gi = 0; gi < 3; gi++) {
      gn_case c = mk(shapes[i][0], C, shapes[i][2], gs[gi], (ng_dtype)(seed % 3),
                     (int)((seed / 3) % 3), gi == 1 ? 8 : 0, seed);
      c.freeze_w = seed % 4 == 1;
      c.freeze_b = seed % 5 == 2;
      c.accumulate = seed % 2 == 0;
      seed++;
      run_case(&c);
    }
  }
}

/* Few large groups: each is cut into several units (pieces of channels or runs of whole
 * channels) whose partials the second kernel merges. NG_TUNE_GROUPS forces it on small shapes. */
static void test_split(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, 40));
  /* B, C, S, G: pieces of one channel; several pieces per channel; runs of channels; S = 1 */
  const size_t shapes[][4] = {
      {1, 1, 1000, 1}, {2, 4, 203, 2}, {2, 64, 16, 1}, {1, 60, 1, 3}, {3, 6, 48, 3}};
  for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++)
    for (int xi = 0; xi < 3; xi++) {
      gn_case c = mk(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], (ng_dtype)xi,
                     NG_F32 + (int)(i % 2) * NG_BF16, i == 4 ? 5 : 0, 300 + i * 3 + xi);
      c.accumulate = xi == 1;
      c.freeze_b = xi == 2;
      run_case(&c);
    }
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, NG_TUNE_AUTO));
}

/* A shape of the GPU-path tests: sizes, the element offset of every buffer, and x's dtype. */
typedef struct gn_shape {
  size_t B, C, S, G, off;
  ng_dtype xd;
} gn_shape;

/* The GPU-shaped kernels (a unit per work-group, local-memory merges and sums) on whatever device
 * runs the tests, whole-block and split; each shape with one x dtype to keep PoCL's builds few. */
static void test_workgroup_shape(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 64));
  const gn_shape shapes[] = {{3, 12, 40, 4, 0, NG_BF16},
                {2, 6, 35, 3, 8, NG_F16},
                {1, 4, 1031, 2, 0, NG_F32},
                {4, 12, 1, 12, 0, NG_F32},
                {2, 2, 2048, 1, 0, NG_BF16}};
  /* 5 groups: whole blocks; 24: a few units per block; 200: more units per block than
   * work-items, so each work-item merges several partials */
  const unsigned group_counts[] = {5, 24, 200};
  for (int forced = 0; forced < 3; forced++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, group_counts[forced]));
    for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++)
      for (int v = 0; v < 2; v++) {
        gn_case c = mk(shapes[i].B, shapes[i].C, shapes[i].S, shapes[i].G, shapes[i].xd,
                       v ? NG_F32 : NG_BF16, shapes[i].off, 400 + forced * 50 + i * 2 + v);
        c.accumulate = v == 1;
        c.freeze_w = i == 0 && v == 0;
        run_case(&c);
      }
  }
  /* 96: a multiple of 32 that the row ops take as it is; GroupNorm's sums take powers of two,
   * so it runs on 64 (NG_ROWS_POW2_WG, one_wg) */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 96));
  for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
    gn_case c = mk(shapes[i].B, shapes[i].C, shapes[i].S, shapes[i].G, shapes[i].xd, NG_F32,
                   shapes[i].off, 560 + i);
    c.accumulate = true; /* the programs of the loop's last cases: nothing new to build */
    run_case(&c);
  }
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, NG_TUNE_AUTO));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, NG_TUNE_AUTO));
}

/* The one-pass kernels (units held in registers, the units of a block exchanging statistics
 * through global memory), forced on: units of 32 or 64 work-items × 1 to 8 slots, so that a
 * block is one unit or several, and grids of fewer groups than units, so that groups take
 * several tickets. The host allows one unit per block on a CPU device (a block's units wait for
 * each other), so there a larger block takes the two kernels; a GPU takes up to half its compute
 * units. */
static void test_one_pass(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, 2));
  const gn_shape shapes[] = {{3, 12, 40, 4, 0, NG_BF16},  {2, 8, 64, 2, 8, NG_F16},   {1, 4, 1032, 2, 0, NG_F32},
                {2, 6, 2048, 3, 16, NG_BF16}, {4, 12, 8, 12, 0, NG_F32}, {1, 2, 4096, 1, 0, NG_F16}};
  const unsigned shape[][3] = {{32, 1, 0}, {64, 8, 0}, {32, 2, 5}, {64, 0, 3}}; /* wg, slots, groups */
  uint64_t seed = 900;
  for (size_t k = 0; k < NG_ARRAY_LEN(shape); k++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, shape[k][0]));
    NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, shape[k][1]));
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, shape[k][2]));
    for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
      gn_case c = mk(shapes[i].B, shapes[i].C, shapes[i].S, shapes[i].G, shapes[i].xd,
                     k % 2 ? NG_F32 : NG_BF16, shapes[i].off, seed++);
      c.accumulate = k == 1;
      c.freeze_w = i == 0;
      c.mean = i == 5 ? 100.0 : c.mean;
      run_case(&c);
    }
  }
}

/* Whether the forward (fwd) or the backward of a bf16 [B, C, S] call with G groups runs the
 * kernel `want` (a profiling queue of its own records the kernels' names). */
static bool takes_kernel(size_t B, size_t C, size_t S, size_t G, bool fwd, const char *want) {
  ng_test_env *e = ng_test_env_get();
  cl_int err;
  cl_command_queue pq = clCreateCommandQueue(e->cl_ctx, e->device, CL_QUEUE_PROFILING_ENABLE, &err);
  assert_non_null(pq);
  const size_t cnt = B * C * S;
  cl_mem bx = ng_test_upload(NG_BF16, NULL, cnt, 0, 0);
  cl_mem bdx = ng_test_upload(NG_BF16, NULL, cnt, 0, 0);
  cl_mem bw = ng_test_upload(NG_F32, NULL, C, 0, 0), bdw = ng_test_upload(NG_F32, NULL, C, 0, 0);
  cl_mem bm = ng_test_upload(NG_F32, NULL, B * G, 0, 0);
  ng_groupnorm_params p = {B, C, S, G, 1e-5f};
  NG_OK(ng_profile_begin());
  if (fwd)
    NG_OK(ng_groupnorm_forward(e->ctx, pq, &p, ng_tensor_of(bx, 0, NG_BF16),
                               ng_tensor_of(bw, 0, NG_F32), ng_tensor_none(),
                               ng_tensor_of(bdx, 0, NG_BF16), ng_tensor_of(bm, 0, NG_F32),
                               ng_tensor_of(bdw, 0, NG_F32), ng_tensor_none(), 0, NULL, NULL));
  else
    NG_OK(ng_groupnorm_backward(e->ctx, pq, &p, ng_tensor_of(bx, 0, NG_BF16),
                                ng_tensor_of(bx, 0, NG_BF16), ng_tensor_of(bw, 0, NG_F32),
                                ng_tensor_of(bm, 0, NG_F32), ng_tensor_of(bm, 0, NG_F32),
                                ng_tensor_of(bdx, 0, NG_BF16), ng_tensor_of(bdw, 0, NG_F32),
                                ng_tensor_none(), 0, ng_tensor_none(), 0, NULL, NULL));
  const char *names[4] = {NULL, NULL, NULL, NULL};
  unsigned kernels = 0;
  NG_OK(ng_profile_end_each(NULL, &kernels, NULL, names, 4));
  bool found = false;
  for (unsigned i = 0; i < kernels && i < 4; i++)
    found = found || strcmp(names[i], want) == 0;
  clReleaseMemObject(bx), clReleaseMemObject(bdx), clReleaseMemObject(bw);
  clReleaseMemObject(bdw), clReleaseMemObject(bm);
  clReleaseCommandQueue(pq);
  return found;
}

/* Whether the call runs the one-launch kernel, ng_groupnorm_fwd_lag or ng_groupnorm_bwd_lag. */
static bool takes_lag(size_t B, size_t C, size_t S, size_t G, bool fwd) {
  return takes_kernel(B, C, S, G, fwd, fwd ? "ng_groupnorm_fwd_lag" : "ng_groupnorm_bwd_lag");
}

/* The forward of a bf16 [B, C, S] call with G groups gives the same bits with the library's
 * scratch and with the caller's at an element offset of 5 (the one-launch kernel reads a unit's
 * statistics as one 16-byte load where they are aligned, one by one where not; on NVIDIA they
 * go through tagged words instead and the scratch is not read, so there this checks only that
 * the call takes either scratch). */
static void fwd_same_bits_any_scratch(size_t B, size_t C, size_t S, size_t G) {
  ng_test_env *e = ng_test_env_get();
  ng_groupnorm_params p = {B, C, S, G, 1e-5f};
  const size_t cnt = B * C * S, nb = B * G;
  ng_rng rng;
  ng_rng_seed(&rng, 77);
  float *x = ng_test_random(&rng, NG_BF16, cnt, 3, 2), *w = ng_test_random(&rng, NG_F32, C, 1, 0.2);
  cl_mem bx = ng_test_upload(NG_BF16, x, cnt, 0, 0), bw = ng_test_upload(NG_F32, w, C, 0, 0);
  cl_mem by = ng_test_upload(NG_BF16, NULL, cnt, 0, 0), bm = ng_test_upload(NG_F32, NULL, nb, 0, 0);
  cl_mem br = ng_test_upload(NG_F32, NULL, nb, 0, 0);
  size_t bytes = 0;
  NG_OK(ng_groupnorm_forward_scratch_size(e->ctx, &p, &bytes));
  assert_true(bytes > 0);
  cl_mem sc = ng_test_upload(NG_F32, NULL, bytes / 4, 5, 0);
  float *out[2];
  for (int k = 0; k < 2; k++) {
    NG_OK(ng_groupnorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, 0, NG_BF16),
                               ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(bw, 0, NG_F32),
                               ng_tensor_of(by, 0, NG_BF16), ng_tensor_of(bm, 0, NG_F32),
                               ng_tensor_of(br, 0, NG_F32),
                               k ? ng_tensor_of(sc, 5, NG_F32) : ng_tensor_none(), 0, NULL, NULL));
    out[k] = malloc((cnt + 2 * nb) * sizeof(float));
    ng_test_download(by, NG_BF16, 0, cnt, out[k]);
    ng_test_download(bm, NG_F32, 0, nb, out[k] + cnt);
    ng_test_download(br, NG_F32, 0, nb, out[k] + cnt + nb);
  }
  assert_memory_equal(out[0], out[1], (cnt + 2 * nb) * sizeof(float));
  free(out[0]), free(out[1]), free(x), free(w);
  clReleaseMemObject(bx), clReleaseMemObject(bw), clReleaseMemObject(by);
  clReleaseMemObject(bm), clReleaseMemObject(br), clReleaseMemObject(sc);
}

/* The split backward in one launch (ng_groupnorm_bwd_lag: tickets, each unit's dx a lag after
 * its sums, units walked in chunks), forced on, against the reference: units of pieces of a
 * channel (one chunk or a hundred), of whole channels a whole number of chunks long, shapes on
 * the vector and the scalar path; grids of fewer groups than units, about as many, and more
 * units per block than work-items. Each shape must take the kernel (checked by name) or, where
 * its units straddle chunks, the two kernels. run_case checks dx against the reference and
 * against the frozen run (the same bits from another program), and dweight / dbias, which the
 * kernel writes itself (the last of a run of channels' B·P units sums their partial rows), in
 * every gradient dtype, accumulated or not, with B = 1 to 3 and pieces of channels. */
static void test_one_launch_backward(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 64));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, 2));
  const gn_shape shapes[] = {{1, 1, 1000, 1, 0, NG_F32},  {2, 4, 256, 2, 3, NG_BF16},
                             {2, 64, 16, 1, 0, NG_F16},   {3, 6, 48, 3, 5, NG_BF16},
                             {1, 4, 20000, 1, 0, NG_BF16}, {2, 8, 64, 2, 0, NG_BF16},
                             {1, 6, 200, 1, 0, NG_F32}};
  const unsigned grids[] = {3, 24, 200};
  uint64_t seed = 1200;
  for (size_t gi = 0; gi < NG_ARRAY_LEN(grids); gi++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, grids[gi]));
    for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
      const gn_shape *sh = &shapes[i];
      /* every gradient dtype: the kernel writes dweight and dbias itself */
      const ng_dtype wd[] = {NG_F32, NG_BF16, NG_F16};
      gn_case c = mk(sh->B, sh->C, sh->S, sh->G, sh->xd, wd[(gi + 2 * i) % 3], sh->off, seed++);
      c.freeze_w = (gi + i) % 3 == 0;
      c.accumulate = (gi + i) % 4 == 1;
      run_case(&c);
    }
  }
  /* the kernel's own units (the grid not forced): one round of chunks each, pieces of a channel
   * (S = 16384) or runs of whole channels (S = 1024: a whole number of chunks of 32 lanes × 4
   * vectors on NVIDIA); make_plan splits blocks of 32768 elements and more on any device */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, NG_TUNE_AUTO));
  const gn_shape own[] = {{1, 4, 16384, 1, 0, NG_BF16}, {1, 32, 1024, 1, 0, NG_F16},
                          {1, 3, 20000, 1, 1, NG_F32}};
  for (size_t i = 0; i < NG_ARRAY_LEN(own); i++) {
    gn_case c = mk(own[i].B, own[i].C, own[i].S, own[i].G, own[i].xd, i ? NG_F32 : NG_BF16,
                   own[i].off, seed++);
    c.accumulate = i == 1;
    run_case(&c);
  }
  assert_true(takes_lag(1, 4, 16384, 1, false));
  assert_true(takes_lag(1, 32, 1024, 1, false));
  /* and writes dweight itself, with no ng_reduce_partials after it: directly where a channel has
   * one partial row (one sample, units of whole channels), else its channels' last unit sums them */
  assert_false(takes_kernel(1, 32, 1024, 1, false, "ng_reduce_partials"));
  assert_false(takes_kernel(1, 4, 16384, 1, false, "ng_reduce_partials"));
  /* the forward's one-launch kernel (vector rows; x's block in units of wg · 4 vectors), where
   * the one-pass kernel cannot take the call (one register slot makes its U 128, beyond any
   * GPU's resident groups) and the block has at most wg units (U = 32 here; 128 units of 64
   * work-items take the two kernels) */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, 1));
  assert_true(takes_lag(1, 4, 16384, 1, true));
  assert_false(takes_lag(1, 4, 65536, 1, true));
  /* twice, on other data: the second call must not see the first's statistics (on NVIDIA they
   * are tagged words in the queue's counter area, which each launch leaves at zero) */
  for (int k = 0; k < 2; k++) {
    gn_case fc = mk(1, 4, 16384, 1, NG_BF16, NG_F32, 0, seed++);
    run_case(&fc);
  }
  /* f32 and f16 x through the same kernel (on NVIDIA the default for f32 x too, before the
   * one-pass kernel), at an offset */
  const ng_dtype lag_xd[] = {NG_F32, NG_F16};
  for (size_t k = 0; k < NG_ARRAY_LEN(lag_xd); k++) {
    gn_case fc = mk(1, 4, 16384, 1, lag_xd[k], NG_BF16, 8, seed++);
    fc.freeze_w = k == 1;
    run_case(&fc);
  }
  fwd_same_bits_any_scratch(1, 4, 16384, 1);
  /* which shapes take the backward kernel (bf16, vector rows where S allows): pieces of a
   * channel, and channels of whole chunks, yes; S = 16 (two vectors a channel, units of several
   * channels) and units of 2 × 2500 vectors (1250 chunks of 4 on a CPU, channels not a whole
   * number of 128-vector chunks on NVIDIA), no */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, 24));
  assert_true(takes_lag(1, 1, 1000, 1, false));
  assert_true(takes_lag(2, 8, 64, 2, false));
  assert_false(takes_lag(2, 64, 16, 1, false));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, 3));
  assert_false(takes_lag(1, 4, 20000, 1, false));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, 1));
  assert_false(takes_lag(1, 1, 1000, 1, false));
  assert_false(takes_lag(1, 4, 65536, 1, true));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, NG_TUNE_AUTO));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, NG_TUNE_AUTO));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, NG_TUNE_AUTO));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, NG_TUNE_AUTO));
}

/* The held kernels (ng_groupnorm_fwd_held, ng_groupnorm_bwd_held: a whole block in one
 * work-group's registers, each channel's gradient sums from T work-items) on 64 work-items holding
 * 2 or 8 vectors each (forced: a CPU device's launch holds one), and 128 × 8 for channels of 1024
 * vectors: one sample (the kernel writes dweight / dbias) and several (partial rows, summed by
 * the grid's last groups, or by ng_reduce_partials); T = 1 (more channels in a block than
 * work-items), up to 32, and beyond (on NVIDIA the warps' sums meet in local memory); more
 * blocks than groups (the two buffers of per-vector
 * sums); every x dtype and gradient dtype, frozen combinations, accumulation, offsets, no weight
 * (dbias alone), blocks around 1000 (the statistics' plain f32 sums). Each call must take the
 * kernels where they can (checked by name) and not beyond the registers, on unaligned rows or
 * with the waiting kernels forced on. */
static bool on_nvidia(void);

static void test_held(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 64));
  /* B, C, S, G, offset, x dtype; the last two take 8 register slots, the others 2 */
  const gn_shape shapes[] = {{1, 8, 256, 4, 0, NG_BF16},  {3, 12, 256, 3, 8, NG_F32},
                             {2, 96, 8, 1, 0, NG_F16},    {4, 6, 512, 6, 16, NG_BF16},
                             {1, 2, 2048, 1, 0, NG_BF16}, {2, 4, 1024, 2, 8, NG_F16}};
  const unsigned grids[] = {0, 3};
  const ng_dtype wd[] = {NG_F32, NG_BF16, NG_F16};
  uint64_t seed = 1500;
  for (size_t gi = 0; gi < NG_ARRAY_LEN(grids); gi++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, grids[gi]));
    for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
      const gn_shape *sh = &shapes[i];
      NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, i >= 4 ? 8 : 2));
      for (int v = 0; v < 2; v++) {
        gn_case c = mk(sh->B, sh->C, sh->S, sh->G, sh->xd, wd[(gi + i + v) % 3], sh->off, seed++);
        c.freeze_w = v == 1 && i % 2 == 0;
        c.freeze_b = v == 1 && i % 2 == 1;
        c.accumulate = (gi + i + v) % 2 == 1;
        c.mean = i == 4 ? 1000.0 : i == 5 ? 50.0 : c.mean;
        run_case(&c);
      }
    }
  }
  /* no weight (w = 1): dbias alone, with one sample (written by the kernel) and with two */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, 2));
  for (int v = 0; v < 2; v++) {
    gn_case c = mk(v + 1, 8, 256, 4, v ? NG_F16 : NG_BF16, -1, v ? 8 : 0, seed++);
    c.has_b = v == 1;
    c.accumulate = v == 1;
    run_case(&c);
  }
  /* channels of 1024 vectors on 128 work-items: on NVIDIA a channel's 64 work-items (two warps,
   * 16 vectors each) meet through local memory */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, NG_TUNE_AUTO));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 128));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, 8));
  for (int v = 0; v < 2; v++) {
    gn_case c = mk(v + 1, v + 1, 8192, v + 1, v ? NG_F32 : NG_BF16, NG_F32, 0, seed++);
    c.accumulate = v == 1;
    c.mean = v ? 1000.0 : c.mean; /* the statistics' f32 sums, without the split's compensation */
    run_case(&c);
  }
  assert_true(takes_kernel(1, 1, 8192, 1, false, "ng_groupnorm_bwd_held"));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 64));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, 2));
  assert_true(takes_kernel(1, 8, 256, 4, true, "ng_groupnorm_fwd_held"));
  assert_true(takes_kernel(1, 8, 256, 4, false, "ng_groupnorm_bwd_held"));
  assert_true(takes_kernel(3, 12, 256, 3, false, "ng_groupnorm_bwd_held"));
  assert_true(takes_kernel(2, 96, 8, 1, true, "ng_groupnorm_fwd_held"));
  /* several samples: the cases above had their partial rows summed by the held kernel itself
   * where that is the default (NVIDIA, and a CPU, which holds blocks only when forced); with
   * NG_TUNE_FUSED_REDUCE = 1 by ng_reduce_partials */
  cl_device_type type = 0;
  assert_int_equal(clGetDeviceInfo(e->device, CL_DEVICE_TYPE, sizeof type, &type, NULL),
                   CL_SUCCESS);
  const bool in_kernel = (type & CL_DEVICE_TYPE_CPU) || on_nvidia();
  assert_true(takes_kernel(3, 12, 256, 3, false, "ng_reduce_partials") == !in_kernel);
  NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, 1));
  assert_true(takes_kernel(3, 12, 256, 3, false, "ng_reduce_partials"));
  assert_true(takes_kernel(3, 12, 256, 3, false, "ng_groupnorm_bwd_held"));
  for (int v = 0; v < 2; v++) {
    gn_case c = mk(3, v ? 96 : 12, v ? 8 : 256, 3, NG_BF16, v ? NG_BF16 : NG_F32, v ? 8 : 0,
                   seed++);
    c.freeze_b = v == 1;
    c.accumulate = v == 1;
    run_case(&c);
  }
  NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, NG_TUNE_AUTO));
  /* blocks beyond the registers, unaligned rows, and the waiting kernels forced on: not held */
  assert_false(takes_kernel(1, 2, 2048, 1, true, "ng_groupnorm_fwd_held"));
  assert_false(takes_kernel(1, 8, 255, 4, true, "ng_groupnorm_fwd_held"));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, 2));
  assert_false(takes_kernel(1, 8, 256, 4, true, "ng_groupnorm_fwd_held"));
  assert_false(takes_kernel(1, 8, 256, 4, false, "ng_groupnorm_bwd_held"));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, NG_TUNE_AUTO));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, NG_TUNE_AUTO));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, NG_TUNE_AUTO));
}

/* Whether the tests run on an NVIDIA device that the library treats as one (its vendor and
 * cl_nv_device_attribute_query, as src/context.c asks): the 16-bit rules for wide blocks. */
static bool on_nvidia(void) {
  cl_device_id d = ng_test_env_get()->device;
  char vendor[256] = "";
  size_t len = 0;
  clGetDeviceInfo(d, CL_DEVICE_VENDOR, sizeof vendor, vendor, NULL);
  assert_int_equal(clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &len), CL_SUCCESS);
  char *ext = calloc(len + 1, 1);
  assert_non_null(ext);
  assert_int_equal(clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, len, ext, NULL), CL_SUCCESS);
  const bool nv = strstr(vendor, "NVIDIA") && strstr(ext, "cl_nv_device_attribute_query");
  free(ext);
  return nv;
}

/* Held blocks on wide launches:
 *  - one buffer of per-vector sums (a launch of more than 2560 vectors: 512 × 8 forced here),
 *    with more blocks than groups, so that a group's next block waits for its channel sums;
 *  - blocks of 20480-40960 elements on the device's own launch: on NVIDIA, 16-bit x takes the
 *    held kernels there with as many slots as a block needs (5 of 512, 3-5 of 1024; the
 *    backward up to 32768 elements, 6-8 slots of 512 with one buffer), elsewhere the others. */
static void test_held_wide(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  uint64_t seed = 1600;
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 512));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_REG_COLS, 8));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, 2));
  for (int v = 0; v < 3; v++) { /* blocks of 1280 vectors, 10 channels of 128 */
    gn_case c = mk(3, 20, 1024, 2, v == 1 ? NG_F16 : NG_BF16, v == 2 ? NG_BF16 : NG_F32,
                   v ? 8 : 0, seed++);
    c.freeze_w = v == 2;
    c.accumulate = v == 1;
    run_case(&c);
  }
  gn_case one = mk(1, 10, 1024, 1, NG_BF16, NG_F32, 0, seed++); /* dweight written directly */
  run_case(&one);
  assert_true(takes_kernel(3, 20, 1024, 2, false, "ng_groupnorm_bwd_held"));
  ng_test_reset_overrides(e->ctx);

  /* B, C, S, G, offset, x dtype: blocks of 20480, 24576, 32768 and 40960 */
  const gn_shape shapes[] = {{2, 40, 1024, 2, 0, NG_BF16}, {1, 12, 4096, 2, 8, NG_F16},
                             {2, 32, 2048, 2, 0, NG_BF16}, {1, 20, 4096, 2, 0, NG_BF16}};
  for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
    const gn_shape *sh = &shapes[i];
    for (int v = 0; v < 2; v++) {
      gn_case c = mk(sh->B, sh->C, sh->S, sh->G, sh->xd, v ? NG_BF16 : NG_F32, sh->off, seed++);
      c.freeze_w = v == 1 && i % 2 == 0;
      c.freeze_b = v == 1;
      c.accumulate = (i + v) % 2 == 1;
      c.mean = i == 2 && v == 0 ? 1000.0 : c.mean;
      run_case(&c);
    }
  }
  const bool nv = on_nvidia();
  assert_true(takes_kernel(2, 40, 1024, 2, true, "ng_groupnorm_fwd_held") == nv);
  assert_true(takes_kernel(2, 40, 1024, 2, false, "ng_groupnorm_bwd_held") == nv);
  assert_true(takes_kernel(2, 32, 2048, 2, false, "ng_groupnorm_bwd_held") == nv);
  assert_true(takes_kernel(1, 20, 4096, 2, true, "ng_groupnorm_fwd_held") == nv);
  /* beyond the wide launches: 40960 backward, 49152 forward */
  assert_false(takes_kernel(1, 20, 4096, 2, false, "ng_groupnorm_bwd_held"));
  assert_false(takes_kernel(1, 24, 4096, 2, true, "ng_groupnorm_fwd_held"));
}

/* A group of 1.2 million elements around 1000 with unit spread: E[x²] − mean² in f32 would lose
 * every digit of the variance; the mean must stay within an ulp or two. */
static void test_large_group(void **state) {
  (void)state;
  gn_case c = mk(1, 4, 300000, 1, NG_F32, NG_F32, 0, 500);
  c.mean = 1000.0, c.std = 1.0;
  run_case(&c);
  c = mk(2, 4, 150001, 2, NG_F32, NG_BF16, 3, 501); /* two groups, odd S: scalar path */
  c.mean = -300.0, c.std = 0.5;
  c.accumulate = true;
  run_case(&c);
  c = mk(1, 2, 2 * 65536, 1, NG_BF16, NG_F32, 0, 502);
  c.freeze_b = true;
  run_case(&c);
}

/* Backward is the gradient of forward: L = Σ y·g by central differences in f32. */
static double loss(ng_test_env *e, const ng_groupnorm_params *p, const float *x, const float *w,
                   const float *b, const float *g) {
  const size_t cnt = p->batch * p->channels * p->spatial, nb = p->batch * p->groups;
  cl_mem bx = ng_test_upload(NG_F32, x, cnt, 0, 0),
         bw = ng_test_upload(NG_F32, w, p->channels, 0, 0);
  cl_mem bb = ng_test_upload(NG_F32, b, p->channels, 0, 0);
  cl_mem by = ng_test_upload(NG_F32, NULL, cnt, 0, 0), bm = ng_test_upload(NG_F32, NULL, nb, 0, 0);
  cl_mem br = ng_test_upload(NG_F32, NULL, nb, 0, 0);
  NG_OK(ng_groupnorm_forward(e->ctx, e->queue, p, ng_tensor_of(bx, 0, NG_F32),
                             ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(bb, 0, NG_F32),
                             ng_tensor_of(by, 0, NG_F32), ng_tensor_of(bm, 0, NG_F32),
                             ng_tensor_of(br, 0, NG_F32), ng_tensor_none(), 0, NULL, NULL));
  float *y = malloc(cnt * sizeof(float));
  ng_test_download(by, NG_F32, 0, cnt, y);
  double l = 0;
  for (size_t i = 0; i < cnt; i++) l += (double)y[i] * g[i];
  free(y);
  clReleaseMemObject(bx), clReleaseMemObject(bw), clReleaseMemObject(bb);
  clReleaseMemObject(by), clReleaseMemObject(bm), clReleaseMemObject(br);
  return l;
}

static void fd_check(ng_test_env *e, const ng_groupnorm_params *p, float *x, float *w, float *b,
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
  ng_groupnorm_params p = {2, 4, 3, 2, 1e-5f};
  const size_t cnt = 24, C = 4, nb = 4;
  ng_rng rng;
  ng_rng_seed(&rng, 77);
  float *x = ng_test_random(&rng, NG_F32, cnt, 0.2, 1.0);
  float *w = ng_test_random(&rng, NG_F32, C, 1.0, 0.3),
        *b = ng_test_random(&rng, NG_F32, C, 0, 0.3);
  float *g = ng_test_random(&rng, NG_F32, cnt, 0.0, 1.0);
  cl_mem bx = ng_test_upload(NG_F32, x, cnt, 0, 0), bw = ng_test_upload(NG_F32, w, C, 0, 0);
  cl_mem bb = ng_test_upload(NG_F32, b, C, 0, 0), by = ng_test_upload(NG_F32, NULL, cnt, 0, 0);
  cl_mem bm = ng_test_upload(NG_F32, NULL, nb, 0, 0), br = ng_test_upload(NG_F32, NULL, nb, 0, 0);
  cl_mem bg = ng_test_upload(NG_F32, g, cnt, 0, 0), bdx = ng_test_upload(NG_F32, NULL, cnt, 0, 0);
  cl_mem bdw = ng_test_upload(NG_F32, NULL, C, 0, 0), bdb = ng_test_upload(NG_F32, NULL, C, 0, 0);
  NG_OK(ng_groupnorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, 0, NG_F32),
                             ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(bb, 0, NG_F32),
                             ng_tensor_of(by, 0, NG_F32), ng_tensor_of(bm, 0, NG_F32),
                             ng_tensor_of(br, 0, NG_F32), ng_tensor_none(), 0, NULL, NULL));
  NG_OK(ng_groupnorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bg, 0, NG_F32),
                              ng_tensor_of(bx, 0, NG_F32), ng_tensor_of(bw, 0, NG_F32),
                              ng_tensor_of(bm, 0, NG_F32), ng_tensor_of(br, 0, NG_F32),
                              ng_tensor_of(bdx, 0, NG_F32), ng_tensor_of(bdw, 0, NG_F32),
                              ng_tensor_of(bdb, 0, NG_F32), 0, ng_tensor_none(), 0, NULL, NULL));
  float *dx = malloc(cnt * sizeof(float)), *dw = malloc(C * sizeof(float));
  float *db = malloc(C * sizeof(float));
  ng_test_download(bdx, NG_F32, 0, cnt, dx);
  ng_test_download(bdw, NG_F32, 0, C, dw);
  ng_test_download(bdb, NG_F32, 0, C, db);
  fd_check(e, &p, x, w, b, g, x, cnt, dx, "dx");
  fd_check(e, &p, x, w, b, g, w, C, dw, "dweight");
  fd_check(e, &p, x, w, b, g, b, C, db, "dbias");
  free(x), free(w), free(b), free(g), free(dx), free(dw), free(db);
  clReleaseMemObject(bx), clReleaseMemObject(bw), clReleaseMemObject(bb), clReleaseMemObject(by);
  clReleaseMemObject(bm), clReleaseMemObject(br), clReleaseMemObject(bg), clReleaseMemObject(bdx);
  clReleaseMemObject(bdw), clReleaseMemObject(bdb);
}

/* The CPU shape's pipelined walk: a work-item takes a run of blocks and forms the next block's
 * statistics (forward) or sums (backward) while it writes the current one's output. Two and three
 * work-groups force runs of several blocks, of unequal length; S a multiple of 16 (whole chunks
 * per channel: the forward pipelines) or 8 more than one (an odd vector per channel: the backward
 * pipelines, the forward does not), blocks shorter and longer than one 128-value chunk per lane.
 * On a GPU these are the ordinary work-group kernels. */
static void test_pipelined(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  /* B, C, S, G */
  const size_t shapes[][4] = {{3, 16, 48, 4}, {3, 16, 56, 4}, {2, 8, 256, 2}, {5, 6, 16, 3},
                              {4, 4, 264, 4}};
  uint64_t seed = 500;
  for (int groups = 2; groups <= 3; groups++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, (unsigned)groups));
    for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++) {
      gn_case c = mk(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                     (ng_dtype)((seed + groups) % 3), (int)(seed % 2) * NG_BF16, i == 2 ? 8 : 0,
                     seed);
      c.freeze_w = seed % 4 == 1;
      c.freeze_b = seed % 3 == 2;
      c.accumulate = seed % 2 == 0;
      seed++;
      run_case(&c);
    }
  }
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, NG_TUNE_AUTO));
}

/* An f32 weight NaN whose payload fills the low half (0x7fffffff) must stay NaN when y and dx are
 * rounded to bf16: the kernels round without a NaN test only where no f32 operand is NaN (a
 * rounding without it would carry this pattern into the sign bit and store -0). y of that channel
 * and dx of its group are NaN, everything else finite. */
static void test_nan_weight_payload(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  const size_t B = 2, C = 8, S = 48, G = 4, cnt = B * C * S, bad = 3;
  ng_groupnorm_params p = {B, C, S, G, 1e-5f};
  ng_rng rng;
  ng_rng_seed(&rng, 77);
  float *x = ng_test_random(&rng, NG_BF16, cnt, 0, 1), *dy = ng_test_random(&rng, NG_BF16, cnt, 0, 1);
  float *w = ng_test_random(&rng, NG_F32, C, 1, 0.1), *got = malloc(cnt * sizeof(float));
  assert_non_null(got);
  const uint32_t nan_bits = 0x7fffffffu;
  memcpy(&w[bad], &nan_bits, sizeof nan_bits);
  cl_mem bx = ng_test_upload(NG_BF16, x, cnt, 0, 0), bdy = ng_test_upload(NG_BF16, dy, cnt, 0, 0);
  cl_mem bw = ng_test_upload(NG_F32, w, C, 0, 0), by = ng_test_upload(NG_BF16, NULL, cnt, 0, 0);
  cl_mem bdx = ng_test_upload(NG_BF16, NULL, cnt, 0, 0);
  cl_mem bm = ng_test_upload(NG_F32, NULL, B * G, 0, 0), br = ng_test_upload(NG_F32, NULL, B * G, 0, 0);
  for (unsigned groups = 1; groups <= 2; groups++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, groups));
    NG_OK(ng_groupnorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, 0, NG_BF16),
                               ng_tensor_of(bw, 0, NG_F32), ng_tensor_none(),
                               ng_tensor_of(by, 0, NG_BF16), ng_tensor_of(bm, 0, NG_F32),
                               ng_tensor_of(br, 0, NG_F32), ng_tensor_none(), 0, NULL, NULL));
    ng_test_download(by, NG_BF16, 0, cnt, got);
    for (size_t i = 0; i < cnt; i++)
      if (isnan(got[i]) != (i / S % C == bad))
        fail_msg("y[%zu] (channel %zu) is %g with %u work-groups", i, i / S % C, (double)got[i],
                 groups);
    NG_OK(ng_groupnorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, 0, NG_BF16),
                                ng_tensor_of(bx, 0, NG_BF16), ng_tensor_of(bw, 0, NG_F32),
                                ng_tensor_of(bm, 0, NG_F32), ng_tensor_of(br, 0, NG_F32),
                                ng_tensor_of(bdx, 0, NG_BF16), ng_tensor_none(), ng_tensor_none(), 0,
                                ng_tensor_none(), 0, NULL, NULL));
    ng_test_download(bdx, NG_BF16, 0, cnt, got);
    for (size_t i = 0; i < cnt; i++)
      if (isnan(got[i]) != (i / S % C / (C / G) == bad / (C / G)))
        fail_msg("dx[%zu] (channel %zu) is %g with %u work-groups", i, i / S % C, (double)got[i],
                 groups);
  }
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, NG_TUNE_AUTO));
  free(x), free(dy), free(w), free(got);
  clReleaseMemObject(bx), clReleaseMemObject(bdy), clReleaseMemObject(bw), clReleaseMemObject(by);
  clReleaseMemObject(bdx), clReleaseMemObject(bm), clReleaseMemObject(br);
}

/* Same inputs, same bits (no float atomics), with the library's scratch or the caller's; on the
 * whole-block and the split path. Frozen parameters need no scratch. */
static void test_deterministic(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_groupnorm_params p = {3, 32, 300, 8, 1e-6f};
  const size_t cnt = 3 * 32 * 300, C = 32, nb = 24;
  ng_rng rng;
  ng_rng_seed(&rng, 5);
  float *x = ng_test_random(&rng, NG_BF16, cnt, 0, 1),
        *dy = ng_test_random(&rng, NG_BF16, cnt, 0, 1);
  float *w = ng_test_random(&rng, NG_F32, C, 1, 0.1);
  cl_mem bx = ng_test_upload(NG_BF16, x, cnt, 0, 0), bdy = ng_test_upload(NG_BF16, dy, cnt, 0, 0);
  cl_mem bw = ng_test_upload(NG_F32, w, C, 0, 0), bb = ng_test_upload(NG_F32, w, C, 0, 0);
  cl_mem by = ng_test_upload(NG_BF16, NULL, cnt, 0, 0);
  cl_mem bm = ng_test_upload(NG_F32, NULL, nb, 0, 0), br = ng_test_upload(NG_F32, NULL, nb, 0, 0);
  cl_mem bdx = ng_test_upload(NG_BF16, NULL, cnt, 0, 0);
  cl_mem bdw = ng_test_upload(NG_F32, NULL, C, 0, 0), bdb = ng_test_upload(NG_F32, NULL, C, 0, 0);
  float *first = malloc((cnt + 2 * C + 2 * nb) * sizeof(float));
  float *again = malloc((cnt + 2 * C + 2 * nb) * sizeof(float));
  for (int forced = 0; forced < 2; forced++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, forced ? 50 : NG_TUNE_AUTO));
    size_t fbytes = 0, bbytes = 0;
    NG_OK(ng_groupnorm_forward_scratch_size(e->ctx, &p, &fbytes));
    NG_OK(ng_groupnorm_backward_scratch_size(e->ctx, &p, 1, 1, &bbytes));
    cl_mem sc = ng_test_upload(NG_F32, NULL, (fbytes > bbytes ? fbytes : bbytes) / 4 + 1, 4, 0);
    for (int it = 0; it < 4; it++) {
      /* the last round uses the caller's scratch */
      ng_tensor ts = it == 3 ? ng_tensor_of(sc, 4, NG_F32) : ng_tensor_none();
      NG_OK(ng_groupnorm_forward(e->ctx, e->queue, &p, ng_tensor_of(bx, 0, NG_BF16),
                                 ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(bb, 0, NG_F32),
                                 ng_tensor_of(by, 0, NG_BF16), ng_tensor_of(bm, 0, NG_F32),
                                 ng_tensor_of(br, 0, NG_F32), ts, 0, NULL, NULL));
      NG_OK(ng_groupnorm_backward(e->ctx, e->queue, &p, ng_tensor_of(bdy, 0, NG_BF16),
                                  ng_tensor_of(bx, 0, NG_BF16), ng_tensor_of(bw, 0, NG_F32),
                                  ng_tensor_of(bm, 0, NG_F32), ng_tensor_of(br, 0, NG_F32),
                                  ng_tensor_of(bdx, 0, NG_BF16), ng_tensor_of(bdw, 0, NG_F32),
                                  ng_tensor_of(bdb, 0, NG_F32), 0, ts, 0, NULL, NULL));
      float *dst = it ? again : first;
      ng_test_download(bdx, NG_BF16, 0, cnt, dst);
      ng_test_download(bdw, NG_F32, 0, C, dst + cnt);
      ng_test_download(bdb, NG_F32, 0, C, dst + cnt + C);
      ng_test_download(bm, NG_F32, 0, nb, dst + cnt + 2 * C);
      ng_test_download(br, NG_F32, 0, nb, dst + cnt + 2 * C + nb);
      if (it) assert_memory_equal(first, again, (cnt + 2 * C + 2 * nb) * sizeof(float));
    }
    clReleaseMemObject(sc);
    /* nothing for frozen parameters; the partials of one parameter are B·P·C floats */
    size_t none = 1, one_w = 0, one_b = 0;
    NG_OK(ng_groupnorm_backward_scratch_size(e->ctx, &p, 0, 0, &none));
    NG_OK(ng_groupnorm_backward_scratch_size(e->ctx, &p, 1, 0, &one_w));
    NG_OK(ng_groupnorm_backward_scratch_size(e->ctx, &p, 0, 1, &one_b));
    assert_int_equal(one_w, one_b);
    assert_int_equal(bbytes - none, 2 * (one_w - none));
    if (!forced) {
      assert_int_equal(none, 0);
      /* a GPU's forward may take the one-pass kernel, whose unit statistics need scratch */
      if (e->is_cpu) assert_int_equal(fbytes, 0);
      assert_int_equal(one_w, 3 * C * 4);
    } else {
      assert_true(none > 0 && fbytes > 0);
    }
  }
  NG_OK(ng_context_override(e->ctx, NG_TUNE_GROUPS, NG_TUNE_AUTO));
  free(x), free(dy), free(w), free(first), free(again);
  clReleaseMemObject(bx), clReleaseMemObject(bdy), clReleaseMemObject(bw), clReleaseMemObject(bb);
  clReleaseMemObject(by), clReleaseMemObject(bm), clReleaseMemObject(br), clReleaseMemObject(bdx);
  clReleaseMemObject(bdw), clReleaseMemObject(bdb);
}

/* After ng_prebuild("groupnorm"), no call of any x dtype, parameter dtype, frozen combination or
 * alignment, whole-block or split, gets a program it does not already hold. */
static void test_prebuild(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_context *c = NULL; /* a context of its own: the shared one holds earlier tests' programs */
  NG_OK(ng_context_create(e->cl_ctx, e->device, &c));
  unsigned count = 0;
  NG_OK(ng_prebuild(c, "groupnorm", &count));
  /* one launch shape on a CPU: 2 alignments × 3 x dtypes × (forward + 4 backward) + 3 reductions */
  if (e->is_cpu) assert_int_equal(count, 33);
  ng_context_stats before, after;
  NG_OK(ng_context_get_stats(c, &before));
  const ng_dtype fl[] = {NG_F32, NG_F16, NG_BF16};
  for (int split = 0; split < 2; split++) {
    NG_OK(ng_context_override(c, NG_TUNE_GROUPS, split ? 40 : NG_TUNE_AUTO));
    for (int xi = 0; xi < 3; xi++)
      for (int fr = 0; fr < 4; fr++)
        for (size_t off = 0; off <= 3; off += 3) {
          const size_t B = 2, C = 4, S = 16, G = 2, cnt = B * C * S;
          const ng_dtype xd = fl[xi], wd = fl[(xi + fr) % 3];
          cl_mem bx = ng_test_upload(xd, NULL, cnt, off, 0);
          cl_mem by = ng_test_upload(xd, NULL, cnt, off, 0);
          cl_mem bdx = ng_test_upload(xd, NULL, cnt, off, 0);
          cl_mem bw = ng_test_upload(wd, NULL, C, off, 0);
          cl_mem bdw = ng_test_upload(wd, NULL, C, off, 0);
          cl_mem bdb = ng_test_upload(wd, NULL, C, off, 0);
          cl_mem bm = ng_test_upload(NG_F32, NULL, B * G, off, 0);
          cl_mem br = ng_test_upload(NG_F32, NULL, B * G, off, 0);
          ng_groupnorm_params p = {B, C, S, G, 1e-5f};
          const ng_tensor tw = ng_tensor_of(bw, off, wd), tm = ng_tensor_of(bm, off, NG_F32);
          const ng_tensor tr = ng_tensor_of(br, off, NG_F32);
          const ng_tensor tdw = fr & 1 ? ng_tensor_none() : ng_tensor_of(bdw, off, wd);
          const ng_tensor tdb = fr & 2 ? ng_tensor_none() : ng_tensor_of(bdb, off, wd);
          NG_OK(ng_groupnorm_forward(c, e->queue, &p, ng_tensor_of(bx, off, xd), tw, tw,
                                     ng_tensor_of(by, off, xd), tm, tr, ng_tensor_none(), 0, NULL,
                                     NULL));
          NG_OK(ng_groupnorm_backward(
              c, e->queue, &p, ng_tensor_of(by, off, xd), ng_tensor_of(bx, off, xd), tw, tm, tr,
              ng_tensor_of(bdx, off, xd), tdw, tdb, 0, ng_tensor_none(), 0, NULL, NULL));
          CL_OK(clFinish(e->queue));
          cl_mem ms[] = {bx, by, bdx, bw, bdw, bdb, bm, br};
          for (size_t i = 0; i < NG_ARRAY_LEN(ms); i++) clReleaseMemObject(ms[i]);
        }
  }
  NG_OK(ng_context_get_stats(c, &after));
  assert_int_equal(after.programs_built, before.programs_built);
  assert_int_equal(after.disk_hits, before.disk_hits);
  assert_int_equal(after.disk_misses, before.disk_misses);
  ng_context_release(c);
}

/* ---- validation: every error comes back before anything is written ------------------------- */
typedef struct err_bufs {
  cl_mem x, w, b, y, m, r, dy, dx, dw, db, sc, wh, small;
  size_t cnt, C, nb;
} err_bufs;

static void expect_untouched(const err_bufs *eb) {
  struct {
    cl_mem m;
    ng_dtype dt;
    size_t n;
  } outs[] = {{eb->y, NG_F32, eb->cnt},  {eb->m, NG_F32, eb->nb}, {eb->r, NG_F32, eb->nb},
              {eb->dx, NG_F32, eb->cnt}, {eb->dw, NG_F32, eb->C}, {eb->db, NG_F32, eb->C}};
  for (size_t i = 0; i < NG_ARRAY_LEN(outs); i++)
    if (!ng_test_guard_intact(outs[i].m, outs[i].dt, 0, 0, outs[i].n))
      fail_msg("a failed call wrote output %zu", i);
}

static void test_errors(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_context *ctx = e->ctx;
  cl_command_queue q = e->queue;
  err_bufs eb;
  eb.cnt = 2 * 6 * 5, eb.C = 6, eb.nb = 2 * 3;
  float ones[64];
  for (int i = 0; i < 64; i++) ones[i] = 1.0f + 0.01f * (float)i;
  eb.x = ng_test_upload(NG_F32, ones, 60, 0, 0), eb.dy = ng_test_upload(NG_F32, ones, 60, 0, 0);
  eb.w = ng_test_upload(NG_F32, ones, 6, 0, 0), eb.b = ng_test_upload(NG_F32, ones, 6, 0, 0);
  eb.wh = ng_test_upload(NG_BF16, ones, 6, 0, 0);
  eb.y = ng_test_upload(NG_F32, NULL, 60, 0, 0), eb.dx = ng_test_upload(NG_F32, NULL, 60, 0, 0);
  eb.m = ng_test_upload(NG_F32, NULL, 6, 0, 0), eb.r = ng_test_upload(NG_F32, NULL, 6, 0, 0);
  eb.dw = ng_test_upload(NG_F32, NULL, 6, 0, 0), eb.db = ng_test_upload(NG_F32, NULL, 6, 0, 0);
  eb.sc = ng_test_upload(NG_F32, NULL, 4, 0, 0), eb.small = ng_test_upload(NG_F32, NULL, 59, 0, 0);
  const ng_groupnorm_params ok = {2, 6, 5, 3, 1e-5f};
  const ng_tensor X = ng_tensor_of(eb.x, 0, NG_F32), W = ng_tensor_of(eb.w, 0, NG_F32);
  const ng_tensor Bi = ng_tensor_of(eb.b, 0, NG_F32), Y = ng_tensor_of(eb.y, 0, NG_F32);
  const ng_tensor M = ng_tensor_of(eb.m, 0, NG_F32), R = ng_tensor_of(eb.r, 0, NG_F32);
  const ng_tensor DY = ng_tensor_of(eb.dy, 0, NG_F32), DX = ng_tensor_of(eb.dx, 0, NG_F32);
  const ng_tensor DW = ng_tensor_of(eb.dw, 0, NG_F32), DB = ng_tensor_of(eb.db, 0, NG_F32);
  const ng_tensor N0 = ng_tensor_none();
#define FWD(pp, x_, w_, b_, y_, m_, r_, s_)                                                        \
  ng_groupnorm_forward(ctx, q, pp, x_, w_, b_, y_, m_, r_, s_, 0, NULL, NULL)
#define BWD(pp, dy_, x_, w_, m_, r_, dx_, dw_, db_, fl_, s_)                                       \
  ng_groupnorm_backward(ctx, q, pp, dy_, x_, w_, m_, r_, dx_, dw_, db_, fl_, s_, 0, NULL, NULL)
  /* handles */
  NG_EXPECT_STATUS(ng_groupnorm_forward(NULL, q, &ok, X, W, Bi, Y, M, R, N0, 0, NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_groupnorm_forward(ctx, NULL, &ok, X, W, Bi, Y, M, R, N0, 0, NULL, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(FWD(NULL, X, W, Bi, Y, M, R, N0), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(BWD(NULL, DY, X, W, M, R, DX, DW, DB, 0, N0), NG_ERR_NULL_HANDLE);
  size_t bytes;
  NG_EXPECT_STATUS(ng_groupnorm_backward_scratch_size(ctx, &ok, 1, 1, NULL), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_groupnorm_forward_scratch_size(NULL, &ok, &bytes), NG_ERR_NULL_HANDLE);
  /* shapes */
  ng_groupnorm_params p = ok;
  for (int i = 0; i < 4; i++) {
    p = ok;
    *(i == 0 ? &p.batch : i == 1 ? &p.channels : i == 2 ? &p.spatial : &p.groups) = 0;
    NG_EXPECT_STATUS(FWD(&p, X, W, Bi, Y, M, R, N0), NG_ERR_INVALID_SHAPE);
    NG_EXPECT_STATUS(BWD(&p, DY, X, W, M, R, DX, DW, DB, 0, N0), NG_ERR_INVALID_SHAPE);
    NG_EXPECT_STATUS(ng_groupnorm_backward_scratch_size(ctx, &p, 1, 1, &bytes),
                     NG_ERR_INVALID_SHAPE);
  }
  /* groups that do not divide the channels (the buffers would be large enough) */
  p = ok, p.groups = 4;
  NG_EXPECT_STATUS(FWD(&p, X, W, Bi, Y, M, R, N0), NG_ERR_GROUPS_NOT_DIVISIBLE);
  NG_EXPECT_STATUS(BWD(&p, DY, X, W, M, R, DX, DW, DB, 0, N0), NG_ERR_GROUPS_NOT_DIVISIBLE);
  NG_EXPECT_STATUS(ng_groupnorm_forward_scratch_size(ctx, &p, &bytes), NG_ERR_GROUPS_NOT_DIVISIBLE);
  p = ok, p.groups = 12;
  NG_EXPECT_STATUS(FWD(&p, X, W, Bi, Y, M, R, N0), NG_ERR_GROUPS_NOT_DIVISIBLE);
  /* index range */
  p = ok, p.channels = 1, p.groups = 1, p.spatial = (size_t)UINT32_MAX + 1;
  NG_EXPECT_STATUS(FWD(&p, X, W, Bi, Y, M, R, N0), NG_ERR_INDEX_OVERFLOW);
  p = ok, p.batch = SIZE_MAX / 2;
  NG_EXPECT_STATUS(FWD(&p, X, W, Bi, Y, M, R, N0), NG_ERR_INDEX_OVERFLOW);
  /* eps */
  const float bad_eps[] = {-1e-5f, NAN, INFINITY};
  for (size_t i = 0; i < NG_ARRAY_LEN(bad_eps); i++) {
    p = ok, p.eps = bad_eps[i];
    NG_EXPECT_STATUS(FWD(&p, X, W, Bi, Y, M, R, N0), NG_ERR_INVALID_VALUE);
    NG_EXPECT_STATUS(BWD(&p, DY, X, W, M, R, DX, DW, DB, 0, N0), NG_ERR_INVALID_VALUE);
  }
  /* NULL buffers */
  NG_EXPECT_STATUS(FWD(&ok, N0, W, Bi, Y, M, R, N0), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, N0, M, R, N0), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, Y, N0, R, N0), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, Y, M, N0, N0), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(BWD(&ok, N0, X, W, M, R, DX, DW, DB, 0, N0), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(BWD(&ok, DY, N0, W, M, R, DX, DW, DB, 0, N0), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, N0, R, DX, DW, DB, 0, N0), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, M, N0, DX, DW, DB, 0, N0), NG_ERR_NULL_BUFFER);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, M, R, N0, DW, DB, 0, N0), NG_ERR_NULL_BUFFER);
  /* sizes and offsets */
  const ng_tensor SMALL = ng_tensor_of(eb.small, 0, NG_F32);
  NG_EXPECT_STATUS(FWD(&ok, SMALL, W, Bi, Y, M, R, N0), NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, SMALL, M, R, N0), NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(FWD(&ok, ng_tensor_of(eb.x, 1, NG_F32), W, Bi, Y, M, R, N0),
                   NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(FWD(&ok, ng_tensor_of(eb.x, 60, NG_F32), W, Bi, Y, M, R, N0),
                   NG_ERR_OFFSET_OUT_OF_RANGE);
  NG_EXPECT_STATUS(FWD(&ok, X, ng_tensor_of(eb.w, 1, NG_F32), Bi, Y, M, R, N0),
                   NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(FWD(&ok, X, W, ng_tensor_of(eb.b, 6, NG_F32), Y, M, R, N0),
                   NG_ERR_OFFSET_OUT_OF_RANGE);
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, Y, ng_tensor_of(eb.m, 1, NG_F32), R, N0),
                   NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, Y, M, ng_tensor_of(eb.r, 9, NG_F32), N0),
                   NG_ERR_OFFSET_OUT_OF_RANGE);
  NG_EXPECT_STATUS(BWD(&ok, SMALL, X, W, M, R, DX, DW, DB, 0, N0), NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, M, R, SMALL, DW, DB, 0, N0), NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, M, R, DX, ng_tensor_of(eb.dw, 2, NG_F32), DB, 0, N0),
                   NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, M, R, DX, DW, ng_tensor_of(eb.db, 6, NG_F32), 0, N0),
                   NG_ERR_OFFSET_OUT_OF_RANGE);
  /* dtypes */
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, ng_tensor_of(eb.y, 0, NG_BF16), M, R, N0),
                   NG_ERR_DTYPE_MISMATCH);
  NG_EXPECT_STATUS(FWD(&ok, X, ng_tensor_of(eb.wh, 0, NG_BF16), Bi, Y, M, R, N0),
                   NG_ERR_DTYPE_MISMATCH);
  NG_EXPECT_STATUS(FWD(&ok, ng_tensor_of(eb.x, 0, NG_I32), W, Bi, Y, M, R, N0),
                   NG_ERR_UNSUPPORTED_DTYPE);
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, Y, ng_tensor_of(eb.m, 0, NG_BF16), R, N0),
                   NG_ERR_UNSUPPORTED_DTYPE);
  NG_EXPECT_STATUS(FWD(&ok, X, W, Bi, Y, M, ng_tensor_of(eb.r, 0, (ng_dtype)9), N0),
                   NG_ERR_UNSUPPORTED_DTYPE);
  NG_EXPECT_STATUS(BWD(&ok, ng_tensor_of(eb.dy, 0, NG_F16), X, W, M, R, DX, DW, DB, 0, N0),
                   NG_ERR_DTYPE_MISMATCH);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, M, R, ng_tensor_of(eb.dx, 0, NG_BF16), DW, DB, 0, N0),
                   NG_ERR_DTYPE_MISMATCH);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, M, R, DX, ng_tensor_of(eb.dw, 0, NG_BF16), DB, 0, N0),
                   NG_ERR_DTYPE_MISMATCH);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, M, R, DX, DW, ng_tensor_of(eb.db, 0, NG_F16), 0, N0),
                   NG_ERR_DTYPE_MISMATCH);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, ng_tensor_of(eb.m, 0, NG_F16), R, DX, DW, DB, 0, N0),
                   NG_ERR_UNSUPPORTED_DTYPE);
  /* a gradient for a weight that does not exist; unknown flags; bad scratch */
  NG_EXPECT_STATUS(BWD(&ok, DY, X, N0, M, R, DX, DW, DB, 0, N0), NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, M, R, DX, DW, DB, 2u, N0), NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, M, R, DX, DW, DB, 0, ng_tensor_of(eb.sc, 0, NG_F32)),
                   NG_ERR_BUFFER_TOO_SMALL);
  NG_EXPECT_STATUS(BWD(&ok, DY, X, W, M, R, DX, DW, DB, 0, ng_tensor_of(eb.x, 0, NG_BF16)),
                   NG_ERR_UNSUPPORTED_DTYPE);
  expect_untouched(&eb);
  /* and the same buffers do work */
  NG_OK(FWD(&ok, X, W, Bi, Y, M, R, N0));
  NG_OK(BWD(&ok, DY, X, W, M, R, DX, DW, DB, 0, N0));
  CL_OK(clFinish(q));
#undef FWD
#undef BWD
  cl_mem all[] = {eb.x,  eb.w,  eb.b,  eb.y,  eb.m,  eb.r,    eb.dy,
                  eb.dx, eb.dw, eb.db, eb.sc, eb.wh, eb.small};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++) clReleaseMemObject(all[i]);
}

/* A test that fails half-way must not leave its launch overrides to the next one. */
static int reset_overrides(void **state) {
  (void)state;
  ng_test_reset_overrides(ng_test_env_get()->ctx);
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
      T(test_errors),        T(test_matrix),          T(test_shapes),
      T(test_split),         T(test_pipelined),       T(test_nan_weight_payload),
      T(test_workgroup_shape), T(test_finite_difference),
      T(test_deterministic), T(test_large_group),     T(test_prebuild),
      T(test_one_pass),        T(test_held),            T(test_held_wide),
      T(test_one_launch_backward),
#undef T
  };
  return NG_RUN_GROUP_TESTS(tests, NULL, teardown);
}
