/* Fused linear + cross-entropy against the double-precision reference (tests/ref/ref_flce.c, which
 * materializes the logits): every option and their combinations, chunk boundaries, every frozen
 * combination, accumulation, all-ignored batches, awkward shapes, input dtypes, both kernel
 * shapes, exactness of the true-class gradient, determinism, every error path (and that a failed
 * call wrote nothing), and the proof that no CLBlast temporary grows with V·H. */
#include "ng_test.h"
#include "ref_flce.h"

#include "ng_gemm.h"

#include <clblast_c.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct flce_case {
  size_t bt, h, v;
  ng_dtype xd, td;
  ng_reduction red;
  float eps, softcap, lambda;
  bool bias, cew;
  int64_t ignore_index;
  double ignore_frac; /* fraction of rows set to ignore_index (1 = all) */
  bool dx, dw, db;    /* gradients wanted */
  bool z_out, acc_out;
  bool accumulate;
  bool go_tensor; /* mean/sum: grad_output as a device [1] tensor */
  float go;
  size_t chunk, vb, off;
  size_t w_off;  /* extra offset of weight/dweight */
  size_t budget; /* scratch_budget (0: automatic) */
  uint64_t seed;
  float logit_std;
} flce_case;

typedef struct flce_result {
  float *loss, *z_loss, *acc, *dx, *dw, *db;
  ng_flce_info info;
} flce_result;

static void result_free(flce_result *r) {
  free(r->loss), free(r->z_loss), free(r->acc), free(r->dx), free(r->dw), free(r->db);
  memset(r, 0, sizeof *r);
}

static const char *red_name(ng_reduction r) {
  return r == NG_REDUCTION_MEAN ? "mean" : r == NG_REDUCTION_SUM ? "sum" : "none";
}

static void describe(const flce_case *c, char *buf, size_t len) {
  snprintf(buf, len,
           "bt=%zu h=%zu v=%zu x=%s t=%s red=%s eps=%g cap=%g lam=%g bias=%d cew=%d ign=%lld "
           "frac=%g dx=%d dw=%d db=%d acc=%d chunk=%zu vb=%zu off=%zu",
           c->bt, c->h, c->v, ng_dtype_name(c->xd), ng_dtype_name(c->td), red_name(c->red),
           (double)c->eps, (double)c->softcap, (double)c->lambda, c->bias, c->cew,
           (long long)c->ignore_index, c->ignore_frac, c->dx, c->dw, c->db, c->accumulate,
           c->chunk, c->vb, c->off);
}

/* |got − ref| ≤ rtol·|ref| + k·scale[i] + atol for every element (scale may be NULL). */
static void check_scaled(const char *what, const float *got, const double *ref,
                         const double *scale, size_t n, double rtol, double k, double atol) {
  size_t bad = 0, worst = 0;
  double wr = 0;
  for (size_t i = 0; i < n; i++) {
    double lim = rtol * fabs(ref[i]) + (scale ? k * scale[i] : 0) + atol;
    double d = fabs((double)got[i] - ref[i]);
    double r = lim > 0 ? d / lim : (d == 0 ? 0 : INFINITY);
    if (!(d <= lim)) bad++;
    if (!(r <= wr)) wr = r, worst = i;
  }
  if (getenv("FLCE_TOL_REPORT")) fprintf(stderr, "tol %.3f %.60s\n", wr, what);
  if (bad)
    fail_msg("%s: %zu of %zu out of tolerance; worst [%zu] got %.9g want %.9g (%.3gx limit, "
             "scale %.3g)",
             what, bad, n, worst, (double)got[worst], ref[worst], wr,
             scale ? scale[worst] : 0.0);
}

static void check_guard(const char *what, cl_mem m, ng_dtype dt, size_t off, size_t count,
                        size_t guard) {
  if (!ng_test_guard_intact(m, dt, off, count, off + count + guard))
    fail_msg("%s: an element outside the output range was written", what);
}

#define GUARD 8

static int64_t *make_targets(const flce_case *c, ng_rng *rng) {
  int64_t *t = malloc(c->bt * sizeof *t);
  assert_non_null(t);
  for (size_t i = 0; i < c->bt; i++) {
    t[i] = (int64_t)(ng_rng_uniform(rng) * (double)c->v);
    if (ng_rng_uniform(rng) < c->ignore_frac) t[i] = c->ignore_index;
  }
  return t;
}

static cl_mem upload_targets_g(const flce_case *c, const int64_t *t, size_t off, size_t guard) {
  ng_test_env *e = ng_test_env_get();
  const size_t es = ng_dtype_size(c->td), total = off + c->bt + guard;
  unsigned char *raw = calloc(total, es);
  assert_non_null(raw);
  for (size_t i = 0; i < c->bt; i++) {
    if (c->td == NG_I64) ((int64_t *)raw)[off + i] = t[i];
    else ((int32_t *)raw)[off + i] = (int32_t)t[i];
  }
  cl_int err;
  cl_mem m = clCreateBuffer(e->cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, total * es, raw,
                            &err);
  free(raw);
  if (!m) fail_msg("clCreateBuffer targets: %d", err);
  return m;
}
static cl_mem upload_targets(const flce_case *c, const int64_t *t, size_t off) {
  return upload_targets_g(c, t, off, GUARD);
}

/* Run one case on the device, compare with the reference; returns the downloaded outputs. */
static void run_case(const flce_case *c, flce_result *res) {
  ng_test_env *e = ng_test_env_get();
  char name[512];
  describe(c, name, sizeof name);
  const size_t bt = c->bt, h = c->h, v = c->v, off = c->off, woff = c->off + c->w_off;
  const bool none = c->red == NG_REDUCTION_NONE;
  const size_t out_n = none ? bt : 1;
  ng_rng rng;
  ng_rng_seed(&rng, c->seed);
  const float lstd = c->logit_std > 0 ? c->logit_std : 2.0f;
  float *x = ng_test_random(&rng, c->xd, bt * h, 0.0, 1.0);
  float *w = ng_test_random(&rng, NG_F32, v * h, 0.0, lstd / sqrt((double)h));
  float *b = c->bias ? ng_test_random(&rng, NG_F32, v, 0.0, 0.5) : NULL;
  float *cw = NULL;
  if (c->cew) {
    cw = malloc(v * sizeof(float));
    for (size_t j = 0; j < v; j++) cw[j] = (float)(0.2 + 1.8 * ng_rng_uniform(&rng));
  }
  int64_t *tg = make_targets(c, &rng);
  float *gov = NULL;
  if (none) {
    gov = ng_test_random(&rng, NG_F32, bt, 1.0, 0.5);
  } else if (c->go_tensor) {
    gov = malloc(sizeof(float));
    gov[0] = c->go;
  }
  float *dw0 = c->accumulate ? ng_test_random(&rng, NG_F32, v * h, 0.0, 0.1) : NULL;
  float *db0 = c->accumulate ? ng_test_random(&rng, NG_F32, v, 0.0, 0.1) : NULL;

  ref_flce rp = {bt, h, v, c->ignore_index, c->eps, c->softcap, c->lambda, c->red, b, cw, gov,
                 c->go};
  double *loss = malloc(out_n * sizeof(double)), *zl = malloc(out_n * sizeof(double));
  double *acc = malloc(out_n * sizeof(double));
  double *dx = malloc(bt * h * sizeof(double)), *dxs = malloc(bt * h * sizeof(double));
  double *dw = malloc(v * h * sizeof(double)), *dws = malloc(v * h * sizeof(double));
  double *db = malloc(v * sizeof(double)), *dbs = malloc(v * sizeof(double));
  ref_flce_out ro = {loss, zl, acc, dx, dw, db, dxs, dws, dbs, 0};
  ref_flce_run(&rp, x, w, tg, &ro);
  if (c->accumulate) {
    for (size_t i = 0; i < v * h; i++) dw[i] += dw0[i];
    for (size_t j = 0; j < v; j++) db[j] += db0[j];
  }

  cl_mem bx = ng_test_upload(c->xd, x, bt * h, off, GUARD);
  cl_mem bw = ng_test_upload(NG_F32, w, v * h, woff, GUARD);
  cl_mem bt_ = upload_targets(c, tg, off);
  cl_mem bb = b ? ng_test_upload(NG_F32, b, v, off, GUARD) : NULL;
  cl_mem bcw = cw ? ng_test_upload(NG_F32, cw, v, off, GUARD) : NULL;
  cl_mem bgo = gov ? ng_test_upload(NG_F32, gov, none ? bt : 1, off, GUARD) : NULL;
  cl_mem bl = ng_test_upload(NG_F32, NULL, out_n, off, GUARD);
  cl_mem bz = c->z_out ? ng_test_upload(NG_F32, NULL, out_n, off, GUARD) : NULL;
  cl_mem ba = c->acc_out ? ng_test_upload(NG_F32, NULL, out_n, off, GUARD) : NULL;
  cl_mem bdx = c->dx ? ng_test_upload(c->xd, NULL, bt * h, off, GUARD) : NULL;
  cl_mem bdw = c->dw ? ng_test_upload(NG_F32, dw0, v * h, woff, GUARD) : NULL;
  cl_mem bdb = c->db ? ng_test_upload(NG_F32, db0, v, off, GUARD) : NULL;

  ng_flce_params p = ng_flce_params_default(bt, h, v);
  p.ignore_index = c->ignore_index;
  p.label_smoothing = c->eps;
  p.reduction = c->red;
  p.softcap = c->softcap;
  p.lse_square_scale = c->lambda;
  p.grad_output = c->go;
  p.chunk_rows = c->chunk;
  p.v_block = c->vb;
  p.scratch_budget = c->budget;
  ng_flce_tensors t;
  memset(&t, 0, sizeof t);
  t.input = ng_tensor_of(bx, off, c->xd);
  t.weight = ng_tensor_of(bw, woff, NG_F32);
  t.target = ng_tensor_of(bt_, off, c->td);
  t.bias = bb ? ng_tensor_of(bb, off, NG_F32) : ng_tensor_none();
  t.ce_weight = bcw ? ng_tensor_of(bcw, off, NG_F32) : ng_tensor_none();
  t.grad_output = bgo ? ng_tensor_of(bgo, off, NG_F32) : ng_tensor_none();
  t.loss = ng_tensor_of(bl, off, NG_F32);
  t.z_loss = bz ? ng_tensor_of(bz, off, NG_F32) : ng_tensor_none();
  t.accuracy = ba ? ng_tensor_of(ba, off, NG_F32) : ng_tensor_none();
  t.dinput = bdx ? ng_tensor_of(bdx, off, c->xd) : ng_tensor_none();
  t.dweight = bdw ? ng_tensor_of(bdw, woff, NG_F32) : ng_tensor_none();
  t.dbias = bdb ? ng_tensor_of(bdb, off, NG_F32) : ng_tensor_none();
  t.scratch = ng_tensor_none();
  cl_event ev = NULL;
  memset(res, 0, sizeof *res);
  NG_OK(ng_flce(e->ctx, e->queue, &p, &t, c->accumulate ? NG_ACCUMULATE_GRAD : 0, &res->info, 0,
                NULL, &ev));
  assert_non_null(ev);
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);

  /* Tolerances from the size of the logits: f32 GEMM error on a logit is about
   * u·√h·Σ|x·w|; every loss and gradient term inherits a few of those. */
  const double dz = 1.2e-7 * sqrt((double)h) * ro.logit_scale + 1e-7;
  const double lam_f = 1 + 2 * c->lambda * (ro.logit_scale + 5);
  const double wmax = c->cew ? 2.0 : 1.0;
  char what[640];
  res->loss = malloc(out_n * sizeof(float));
  ng_test_download(bl, NG_F32, off, out_n, res->loss);
  snprintf(what, sizeof what, "loss [%s]", name);
  double latol = 2 * dz * wmax * lam_f;
  if (c->red == NG_REDUCTION_SUM) latol *= 2 * sqrt((double)bt) + 1;
  check_scaled(what, res->loss, loss, NULL, out_n, 3e-6, 0, latol);
  check_guard(what, bl, NG_F32, off, out_n, GUARD);
  if (bz) {
    res->z_loss = malloc(out_n * sizeof(float));
    ng_test_download(bz, NG_F32, off, out_n, res->z_loss);
    snprintf(what, sizeof what, "z_loss [%s]", name);
    check_scaled(what, res->z_loss, zl, NULL, out_n, 3e-6, 0, latol);
    check_guard(what, bz, NG_F32, off, out_n, GUARD);
  }
  if (ba) {
    res->acc = malloc(out_n * sizeof(float));
    ng_test_download(ba, NG_F32, off, out_n, res->acc);
    snprintf(what, sizeof what, "accuracy [%s]", name);
    check_scaled(what, res->acc, acc, NULL, out_n, 1e-6, 0, 1e-7);
    check_guard(what, ba, NG_F32, off, out_n, GUARD);
  }
  /* a gradient entry is off by about its terms' scale times the relative error of g */
  const double gk = 8 * dz * lam_f + 2e-6;
  if (bdx) {
    res->dx = malloc(bt * h * sizeof(float));
    ng_test_download(bdx, c->xd, off, bt * h, res->dx);
    snprintf(what, sizeof what, "dinput [%s]", name);
    const double rt = c->xd == NG_BF16 ? 1.0 / 128 : c->xd == NG_F16 ? 1.0 / 1024 : 2e-6;
    check_scaled(what, res->dx, dx, dxs, bt * h, rt, gk, c->xd == NG_F16 ? 1.2e-7 : 0);
    check_guard(what, bdx, c->xd, off, bt * h, GUARD);
  }
  if (bdw) {
    res->dw = malloc(v * h * sizeof(float));
    ng_test_download(bdw, NG_F32, woff, v * h, res->dw);
    snprintf(what, sizeof what, "dweight [%s]", name);
    check_scaled(what, res->dw, dw, dws, v * h, 2e-6, gk, c->accumulate ? 1e-7 : 0);
    check_guard(what, bdw, NG_F32, woff, v * h, GUARD);
  }
  if (bdb) {
    res->db = malloc(v * sizeof(float));
    ng_test_download(bdb, NG_F32, off, v, res->db);
    snprintf(what, sizeof what, "dbias [%s]", name);
    check_scaled(what, res->db, db, dbs, v, 2e-6, gk, c->accumulate ? 1e-7 : 0);
    check_guard(what, bdb, NG_F32, off, v, GUARD);
  }
  /* inputs are untouched */
  snprintf(what, sizeof what, "weight [%s]", name);
  check_guard(what, bw, NG_F32, woff, v * h, GUARD);

  cl_mem all[] = {bx, bw, bt_, bb, bcw, bgo, bl, bz, ba, bdx, bdw, bdb};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++)
    if (all[i]) clReleaseMemObject(all[i]);
  free(x), free(w), free(b), free(cw), free(tg), free(gov), free(dw0), free(db0);
  free(loss), free(zl), free(acc), free(dx), free(dxs), free(dw), free(dws), free(db), free(dbs);
}

static flce_case base_case(size_t bt, size_t h, size_t v, uint64_t seed) {
  flce_case c;
  memset(&c, 0, sizeof c);
  c.bt = bt, c.h = h, c.v = v;
  c.xd = NG_F32, c.td = NG_I64;
  c.red = NG_REDUCTION_MEAN;
  c.ignore_index = -100;
  c.ignore_frac = 0.15;
  c.dx = c.dw = c.db = true;
  c.z_out = c.acc_out = true;
  c.go = 1.0f;
  c.seed = seed;
  return c;
}

/* reduction × label smoothing × class weights × softcap × z-loss × bias, with ignored rows and
 * an ignore_index inside [0, V) on every other case; three chunks (16, 16, 5). */
static void test_options(void **state) {
  (void)state;
  uint64_t seed = 1;
  for (int red = 0; red < 3; red++)
    for (int sm = 0; sm < 2; sm++)
      for (int cw = 0; cw < 2; cw++)
        for (int sc = 0; sc < 2; sc++)
          for (int zl = 0; zl < 2; zl++)
            for (int bi = 0; bi < 2; bi++) {
              flce_case c = base_case(37, 24, 83, seed++);
              c.red = (ng_reduction)red;
              c.eps = sm ? 0.1f : 0.0f;
              c.cew = cw;
              c.softcap = sc ? 3.0f : 0.0f;
              c.lambda = zl ? 0.02f : 0.0f;
              c.bias = bi;
              c.db = bi;
              c.chunk = 16;
              if (seed % 2) c.ignore_index = 5; /* an ignored class that is a real index */
              c.go = red == 1 ? 0.5f : 1.5f;
              c.go_tensor = red == 0 && seed % 3 == 0;
              flce_result r;
              run_case(&c, &r);
              result_free(&r);
            }
}

/* Every combination of dinput / dweight / dbias wanted: each skipped gradient skips its own work
 * only (GEMM list, temporaries), and what is computed has the same bits in every combination. */
static void test_frozen(void **state) {
  (void)state;
  flce_result ref;
  flce_case c = base_case(29, 40, 70, 77);
  c.bias = true;
  c.eps = 0.05f;
  c.lambda = 0.01f;
  c.chunk = 8;
  run_case(&c, &ref);
  for (int m = 0; m < 8; m++) {
    c.dx = m & 1, c.dw = (m >> 1) & 1, c.db = (m >> 2) & 1;
    flce_result r;
    run_case(&c, &r);
    assert_memory_equal(r.loss, ref.loss, sizeof(float));
    if (c.dx) assert_memory_equal(r.dx, ref.dx, c.bt * c.h * sizeof(float));
    if (c.dw) assert_memory_equal(r.dw, ref.dw, c.v * c.h * sizeof(float));
    if (c.db) assert_memory_equal(r.db, ref.db, c.v * sizeof(float));
    /* the GEMMs of frozen gradients are not planned, not run, and need no temporary */
    assert_int_equal(r.info.gemm_strategy[1] != 0, c.dx);
    assert_int_equal(r.info.gemm_strategy[2] != 0, c.dw);
    if (!c.dx) assert_int_equal(r.info.gemm_temp_max[1], 0);
    if (!c.dw) assert_int_equal(r.info.gemm_temp_max[2], 0);
    assert_true(r.info.gemm_strategy[0] != 0);
    result_free(&r);
  }
  result_free(&ref);
}

/* Chunk boundaries: one row per chunk, a chunk that does not divide BT, one chunk, auto; and
 * the V-split GEMM paths forced by a small v_block. */
static void test_chunks(void **state) {
  (void)state;
  const size_t chunks[] = {1, 5, 36, 37, 100, NG_FLCE_AUTO};
  for (size_t i = 0; i < NG_ARRAY_LEN(chunks); i++) {
    flce_case c = base_case(37, 19, 61, 300 + i);
    c.bias = true;
    c.chunk = chunks[i];
    c.eps = 0.1f;
    c.cew = i % 2;
    c.red = (ng_reduction)(i % 3);
    flce_result r;
    run_case(&c, &r);
    assert_int_equal(r.info.chunk_rows, chunks[i] == NG_FLCE_AUTO || chunks[i] > 37 ? 37 : chunks[i]);
    assert_int_equal(r.info.chunks, (37 + r.info.chunk_rows - 1) / r.info.chunk_rows);
    result_free(&r);
  }
  /* a scratch budget that forces several chunks: the chunk is the largest granule that fits */
  for (size_t div = 2; div <= 8; div *= 2) {
    flce_case c = base_case(300, 16, 64, 450 + div);
    c.xd = NG_BF16;
    c.bias = true;
    flce_result r;
    run_case(&c, &r);
    const size_t whole = r.info.peak_bytes;
    assert_int_equal(r.info.chunks, 1);
    result_free(&r);
    c.budget = whole / div;
    run_case(&c, &r);
    assert_true(r.info.peak_bytes <= c.budget);
    assert_true(r.info.chunks >= 2);
    assert_true(r.info.chunk_rows % 64 == 0 || r.info.chunk_rows < 64);
    result_free(&r);
  }
  const size_t vbs[] = {1, 7, 16, 60};
  for (size_t i = 0; i < NG_ARRAY_LEN(vbs); i++) {
    flce_case c = base_case(23, 17, 61, 400 + i);
    c.vb = vbs[i];
    c.chunk = 10;
    c.bias = true;
    c.w_off = 3;
    flce_result r;
    run_case(&c, &r);
    assert_int_equal(r.info.v_block, vbs[i]);
    result_free(&r);
  }
}

/* dweight/dbias added to what the buffers hold, across chunks and calls; without the flag, a
 * NaN-filled gradient buffer is overwritten (CLBlast's beta 0 ignores C). */
static void test_accumulate(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  flce_case c = base_case(30, 20, 50, 501);
  c.bias = true;
  c.accumulate = true;
  c.chunk = 7;
  flce_result r;
  run_case(&c, &r);
  result_free(&r);

  /* NaN poison, no accumulate */
  const size_t bt = 9, h = 5, v = 11;
  ng_rng rng;
  ng_rng_seed(&rng, 9);
  float *x = ng_test_random(&rng, NG_F32, bt * h, 0, 1), *w = ng_test_random(&rng, NG_F32, v * h, 0, 1);
  float *b = ng_test_random(&rng, NG_F32, v, 0, 1);
  float nan = NAN;
  float *poison = malloc(v * h * sizeof(float));
  for (size_t i = 0; i < v * h; i++) poison[i] = nan;
  int64_t tg[9] = {0, 1, 2, 3, 4, 5, 6, 7, 10};
  flce_case tc = base_case(bt, h, v, 1);
  cl_mem bx = ng_test_upload(NG_F32, x, bt * h, 0, 0), bw = ng_test_upload(NG_F32, w, v * h, 0, 0);
  cl_mem bb = ng_test_upload(NG_F32, b, v, 0, 0), btg = upload_targets(&tc, tg, 0);
  cl_mem bl = ng_test_upload(NG_F32, NULL, 1, 0, 0);
  cl_mem bdw = ng_test_upload(NG_F32, poison, v * h, 0, 0), bdb = ng_test_upload(NG_F32, poison, v, 0, 0);
  ng_flce_params p = ng_flce_params_default(bt, h, v);
  p.chunk_rows = 4;
  ng_flce_tensors t;
  memset(&t, 0, sizeof t);
  t.input = ng_tensor_of(bx, 0, NG_F32);
  t.weight = ng_tensor_of(bw, 0, NG_F32);
  t.target = ng_tensor_of(btg, 0, NG_I64);
  t.bias = ng_tensor_of(bb, 0, NG_F32);
  t.loss = ng_tensor_of(bl, 0, NG_F32);
  t.dweight = ng_tensor_of(bdw, 0, NG_F32);
  t.dbias = ng_tensor_of(bdb, 0, NG_F32);
  NG_OK(ng_flce(e->ctx, e->queue, &p, &t, 0, NULL, 0, NULL, NULL));
  float *got = malloc(v * h * sizeof(float));
  ng_test_download(bdw, NG_F32, 0, v * h, got);
  for (size_t i = 0; i < v * h; i++)
    if (!isfinite(got[i])) fail_msg("dweight[%zu] = %g after a non-accumulating call", i, got[i]);
  ng_test_download(bdb, NG_F32, 0, v, got);
  for (size_t i = 0; i < v; i++)
    if (!isfinite(got[i])) fail_msg("dbias[%zu] = %g after a non-accumulating call", i, got[i]);
  /* twice with the flag = 2x once without */
  float *once = malloc(v * h * sizeof(float)), *once_b = malloc(v * sizeof(float));
  ng_test_download(bdw, NG_F32, 0, v * h, once);
  ng_test_download(bdb, NG_F32, 0, v, once_b);
  NG_OK(ng_flce(e->ctx, e->queue, &p, &t, NG_ACCUMULATE_GRAD, NULL, 0, NULL, NULL));
  ng_test_download(bdw, NG_F32, 0, v * h, got);
  for (size_t i = 0; i < v * h; i++)
    if (fabsf(got[i] - 2 * once[i]) > 1e-6f * (1 + fabsf(once[i])))
      fail_msg("dweight[%zu]: %g after accumulating twice, %g once", i, got[i], once[i]);
  ng_test_download(bdb, NG_F32, 0, v, got);
  for (size_t i = 0; i < v; i++)
    if (fabsf(got[i] - 2 * once_b[i]) > 1e-6f * (1 + fabsf(once_b[i])))
      fail_msg("dbias[%zu]: %g after accumulating twice, %g once", i, got[i], once_b[i]);
  free(x), free(w), free(b), free(poison), free(got), free(once), free(once_b);
  clReleaseMemObject(bx), clReleaseMemObject(bw), clReleaseMemObject(bb);
  clReleaseMemObject(btg), clReleaseMemObject(bl), clReleaseMemObject(bdw), clReleaseMemObject(bdb);
}

/* Every target ignored: loss, z-loss and accuracy 0, every gradient 0 (torch would give NaN). */
static void test_all_ignored(void **state) {
  (void)state;
  for (int red = 0; red < 3; red++) {
    flce_case c = base_case(13, 9, 17, 600 + red);
    c.ignore_frac = 1.0;
    c.red = (ng_reduction)red;
    c.bias = true;
    c.cew = true;
    c.eps = 0.2f;
    c.lambda = 0.1f;
    c.chunk = 5;
    flce_result r;
    run_case(&c, &r);
    const size_t out_n = red == 2 ? c.bt : 1;
    for (size_t i = 0; i < out_n; i++)
      if (r.loss[i] != 0 || r.z_loss[i] != 0 || r.acc[i] != 0) fail_msg("non-zero loss %zu", i);
    for (size_t i = 0; i < c.bt * c.h; i++)
      if (r.dx[i] != 0) fail_msg("dinput[%zu] = %g", i, r.dx[i]);
    for (size_t i = 0; i < c.v * c.h; i++)
      if (r.dw[i] != 0) fail_msg("dweight[%zu] = %g", i, r.dw[i]);
    for (size_t i = 0; i < c.v; i++)
      if (r.db[i] != 0) fail_msg("dbias[%zu] = %g", i, r.db[i]);
    result_free(&r);
  }
}

/* BT = 1, H = 1, V = 1, prime V, i32 and i64 targets, f16 and bf16 input, buffer offsets. */
static void test_shapes(void **state) {
  (void)state;
  const size_t shapes[][3] = {{1, 1, 1},   {1, 1, 7},  {1, 33, 5},  {5, 1, 13},
                              {3, 7, 1009}, {64, 3, 2}, {17, 130, 257}};
  for (size_t i = 0; i < NG_ARRAY_LEN(shapes); i++)
    for (int xd = 0; xd < 3; xd++) {
      flce_case c = base_case(shapes[i][0], shapes[i][1], shapes[i][2], 700 + i * 3 + xd);
      c.xd = (ng_dtype)xd;
      c.td = (i + xd) % 2 ? NG_I32 : NG_I64;
      c.off = (i % 2) ? 5 : 0;
      c.bias = xd != 1;
      c.db = c.bias;
      c.eps = xd == 2 ? 0.1f : 0.0f;
      c.softcap = i % 3 == 1 ? 4.0f : 0.0f;
      c.lambda = i % 2 ? 0.01f : 0.0f;
      c.red = (ng_reduction)((i + xd) % 3);
      c.ignore_frac = shapes[i][0] > 2 ? 0.2 : 0.0;
      c.chunk = i % 2 ? 2 : NG_FLCE_AUTO;
      flce_result r;
      run_case(&c, &r);
      result_free(&r);
    }
}

/* Products large enough for CLBlast's indirect kernel on PoCL, so that its copies, the aligned
 * leading part + blocks split (V = 1030: 1024 + 6) and the block split (prime V, H not a
 * multiple of 64, an offset weight) all run. */
static void test_indirect_gemms(void **state) {
  (void)state;
  struct {
    size_t bt, h, v, chunk, w_off, vb;
  } s[] = {{600, 520, 1031, 512, 0, 1024}, {520, 512, 1030, 512, 0, 0}, {512, 512, 1024, 512, 3, 768}};
  for (size_t i = 0; i < NG_ARRAY_LEN(s); i++) {
    flce_case c = base_case(s[i].bt, s[i].h, s[i].v, 800 + i);
    c.chunk = s[i].chunk;
    c.w_off = s[i].w_off;
    c.vb = s[i].vb;
    c.bias = true;
    c.xd = i == 1 ? NG_BF16 : NG_F32;
    c.eps = 0.1f;
    c.red = (ng_reduction)i;
    flce_result r;
    run_case(&c, &r);
    print_message("[ info ] bt=%zu h=%zu v=%zu w_off=%zu: strategies logits %d dinput %d "
                  "dweight %d, %zu GEMM calls, CLBlast temp %zu B, peak %zu B (V·H·4 = %zu)\n",
                  s[i].bt, s[i].h, s[i].v, s[i].w_off, r.info.gemm_strategy[0],
                  r.info.gemm_strategy[1], r.info.gemm_strategy[2], r.info.gemm_calls,
                  r.info.gemm_temp_bytes, r.info.peak_bytes, s[i].v * s[i].h * 4);
    result_free(&r);
  }
}

/* The GPU-shaped row kernels (a row per work-group, local-memory reductions) on this device. */
static void test_workgroup_shape(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  /* 96: a multiple of 32 that the row ops take as it is; FLCE's sums take powers of two, so it
   * runs on 64 (NG_ROWS_POW2_WG) */
  const unsigned wgs[] = {64, 4, 96};
  for (size_t i = 0; i < NG_ARRAY_LEN(wgs); i++) {
    NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, wgs[i]));
    for (int m = 0; m < 4; m++) {
      flce_case c = base_case(21, 12, m == 3 ? 3 : 150, 900 + i * 4 + m);
      c.red = (ng_reduction)(m % 3);
      c.bias = m != 1;
      c.db = c.bias;
      c.cew = m >= 1;
      c.eps = m == 2 ? 0.0f : 0.1f;
      c.softcap = m == 1 ? 2.0f : 0.0f;
      c.lambda = 0.01f;
      c.chunk = 8;
      flce_result r;
      run_case(&c, &r);
      result_free(&r);
    }
  }
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, NG_TUNE_AUTO));
}

/* p_t ≈ 1: the true-class gradient p_t − 1 ≈ −(V−1)·e^−margin must keep its relative accuracy
 * (1 − p_t formed by subtraction would be 0 or a multiple of 2^-24). Logits come from the bias:
 * H = 1 with a zero input. */
static void test_true_class_exact(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  const size_t v = 50, bt = 2;
  const float margins[2] = {30.0f, 12.0f};
  float x[2] = {0, 0}, w[50], b[50 * 2];
  for (size_t j = 0; j < v; j++) w[j] = 0.0f;
  (void)b;
  for (int mi = 0; mi < 2; mi++) {
    float bias[50];
    for (size_t j = 0; j < v; j++) bias[j] = (float)j * 1e-3f;
    bias[7] = margins[mi];
    int64_t tg[2] = {7, 7};
    flce_case tc = base_case(bt, 1, v, 1);
    cl_mem bx = ng_test_upload(NG_F32, x, bt, 0, 0), bw = ng_test_upload(NG_F32, w, v, 0, 0);
    cl_mem bb = ng_test_upload(NG_F32, bias, v, 0, 0), btg = upload_targets(&tc, tg, 0);
    cl_mem bl = ng_test_upload(NG_F32, NULL, 1, 0, 0), bdb = ng_test_upload(NG_F32, NULL, v, 0, 0);
    ng_flce_params p = ng_flce_params_default(bt, 1, v);
    p.reduction = NG_REDUCTION_SUM;
    ng_flce_tensors t;
    memset(&t, 0, sizeof t);
    t.input = ng_tensor_of(bx, 0, NG_F32);
    t.weight = ng_tensor_of(bw, 0, NG_F32);
    t.target = ng_tensor_of(btg, 0, NG_I64);
    t.bias = ng_tensor_of(bb, 0, NG_F32);
    t.loss = ng_tensor_of(bl, 0, NG_F32);
    t.dbias = ng_tensor_of(bdb, 0, NG_F32);
    NG_OK(ng_flce(e->ctx, e->queue, &p, &t, 0, NULL, 0, NULL, NULL));
    float db[50], loss;
    ng_test_download(bdb, NG_F32, 0, v, db);
    ng_test_download(bl, NG_F32, 0, 1, &loss);
    double rest = 0;
    for (size_t j = 0; j < v; j++)
      if (j != 7) rest += exp((double)bias[j] - (double)bias[7]);
    const double want = -2.0 * rest / (1.0 + rest); /* two rows: Σ (p_t − 1) */
    if (fabs(db[7] - want) > 1e-5 * fabs(want))
      fail_msg("margin %g: dbias[target] = %.9g, want %.9g", (double)margins[mi], db[7], want);
    const double lwant = 2.0 * log1p(rest);
    if (fabs(loss - lwant) > 1e-5 * lwant)
      fail_msg("margin %g: loss = %.9g, want %.9g", (double)margins[mi], loss, lwant);
    clReleaseMemObject(bx), clReleaseMemObject(bw), clReleaseMemObject(bb);
    clReleaseMemObject(btg), clReleaseMemObject(bl), clReleaseMemObject(bdb);
  }
}

/* The reference's gradient is the gradient of its loss: central differences in double over every
 * option at once (this is what makes the reference's hand-derived formula trustworthy). */
static void test_reference_gradient(void **state) {
  (void)state;
  const size_t bt = 4, h = 3, v = 6;
  ng_rng rng;
  ng_rng_seed(&rng, 1234);
  for (int red = 0; red < 3; red++) {
    float *x = ng_test_random(&rng, NG_F32, bt * h, 0, 1), *w = ng_test_random(&rng, NG_F32, v * h, 0, 1);
    float *b = ng_test_random(&rng, NG_F32, v, 0, 1), cw[6] = {0.5f, 1, 1.5f, 2, 0.25f, 1};
    float go[4] = {0.7f, -1.2f, 0.3f, 2.0f};
    int64_t tg[4] = {1, 5, -100, 2};
    ref_flce p = {bt, h, v, -100, 0.2, 2.5, 0.05, (ng_reduction)red, b, cw,
                  red == 2 ? go : NULL, 0.8};
    double dx[12], dw[18], db[6];
    ref_flce_out o;
    memset(&o, 0, sizeof o);
    o.dinput = dx, o.dweight = dw, o.dbias = db;
    ref_flce_run(&p, x, w, tg, &o);
    double xd[12], wd[18], bd[6];
    for (size_t i = 0; i < bt * h; i++) xd[i] = x[i];
    for (size_t i = 0; i < v * h; i++) wd[i] = w[i];
    for (size_t i = 0; i < v; i++) bd[i] = b[i];
    const double hh = 1e-6;
    double *vars[3] = {xd, wd, bd}, *grads[3] = {dx, dw, db};
    size_t ns[3] = {bt * h, v * h, v};
    for (int k = 0; k < 3; k++)
      for (size_t i = 0; i < ns[k]; i++) {
        const double keep = vars[k][i];
        vars[k][i] = keep + hh;
        const double lp = ref_flce_objective(&p, xd, wd, bd, tg);
        vars[k][i] = keep - hh;
        const double lm = ref_flce_objective(&p, xd, wd, bd, tg);
        vars[k][i] = keep;
        const double fd = (lp - lm) / (2 * hh);
        if (fabs(fd - grads[k][i]) > 1e-6 * (1 + fabs(fd)))
          fail_msg("reduction %d, tensor %d [%zu]: analytic %.9g, finite difference %.9g", red, k,
                   i, grads[k][i], fd);
      }
    free(x), free(w), free(b);
  }
}

/* Same inputs, same bits (no float atomics; fixed-order sums everywhere). */
static void test_deterministic(void **state) {
  (void)state;
  flce_case c = base_case(70, 33, 129, 1000);
  c.bias = true;
  c.eps = 0.1f;
  c.chunk = 16;
  flce_result a, b;
  run_case(&c, &a);
  run_case(&c, &b);
  assert_memory_equal(a.loss, b.loss, sizeof(float));
  assert_memory_equal(a.dx, b.dx, c.bt * c.h * sizeof(float));
  assert_memory_equal(a.dw, b.dw, c.v * c.h * sizeof(float));
  assert_memory_equal(a.db, b.db, c.v * sizeof(float));
  result_free(&a);
  result_free(&b);
}

/* ---- the memory bound ------------------------------------------------------------------------ */
static size_t up(size_t x, size_t m) { return (x + m - 1) / m * m; }

static size_t clblast_temp(ng_test_env *e, const ng_gemm *g) {
  size_t sz = 0;
  CLBlastTranspose ta = g->ta ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastTranspose tb = g->tb ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastStatusCode st =
      g->col_major
          ? CLBlastSGemmTempBufferSize(CLBlastLayoutColMajor, tb, ta, g->n, g->m, g->k, g->b_off,
                                       g->ldb, g->a_off, g->lda, g->c_off, g->ldc, &e->queue, &sz)
          : CLBlastSGemmTempBufferSize(CLBlastLayoutRowMajor, ta, tb, g->m, g->n, g->k, g->a_off,
                                       g->lda, g->b_off, g->ldb, g->c_off, g->ldc, &e->queue, &sz);
  if (st != CLBlastSuccess) fail_msg("CLBlastSGemmTempBufferSize: %d", st);
  return sz;
}

/* Whether CLBlast copies the operand `which` (0 A, 1 B, 2 C) of g, asked of CLBlast directly:
 * with a temporary at all, an operand at a non-zero offset is copied; at offset 0 it is copied iff
 * forcing an offset costs nothing more. */
static bool clblast_copies(ng_test_env *e, const ng_gemm *g, int which) {
  const size_t t0 = clblast_temp(e, g);
  if (t0 == 0) return false;
  ng_gemm p = *g;
  size_t *o = which == 0 ? &p.a_off : which == 1 ? &p.b_off : &p.c_off;
  if (*o != 0) return true;
  *o = 1;
  return clblast_temp(e, &p) == t0;
}

/* Every CLBlast call of the op, asked of CLBlast itself, on shapes with prime and
 * non-multiple-of-64 sizes and unaligned weight offsets: each temporary is at most
 *   4·(c'·(V' + H') + b'·H')  bytes, x' = x rounded up to 256, c the chunk, b the V-block
 * (itself at most max(c', c·V/(4H)) rows), and a call that spans more than one V-block does not
 * copy the weight (or its gradient) at all. Where that bound is below V·H·4, every temporary is
 * too. */
static void test_gemm_temporaries(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  struct {
    size_t bt, h, v, chunk, w_off;
  } s[] = {{256, 1031, 8191, 64, 0},    {300, 1024, 4096, 128, 0}, {200, 768, 50257, 100, 0},
           {1000, 4096, 32000, 256, 3}, {64, 64, 100003, 64, 0},   {7, 1, 5, 3, 1},
           {512, 512, 4096, 512, 0},    {130, 4096, 128256, 1000, 0}, {1, 4099, 1031, 1, 0}};
  for (size_t i = 0; i < NG_ARRAY_LEN(s); i++) {
    for (int xd = 0; xd < 2; xd++) {
      ng_flce_params p = ng_flce_params_default(s[i].bt, s[i].h, s[i].v);
      p.chunk_rows = s[i].chunk;
      ng_flce_tensors t;
      memset(&t, 0, sizeof t);
      cl_mem ph = (cl_mem)e->queue; /* presence only: ng_flce_plan never inspects buffers */
      const ng_dtype dt = xd ? NG_BF16 : NG_F32;
      t.input = ng_tensor_of(ph, 2, dt);
      t.weight = ng_tensor_of(ph, s[i].w_off, NG_F32);
      t.target = ng_tensor_of(ph, 0, NG_I32);
      t.loss = ng_tensor_of(ph, 0, NG_F32);
      t.dinput = ng_tensor_of(ph, 0, dt);
      t.dweight = ng_tensor_of(ph, s[i].w_off, NG_F32);
      ng_gemm *calls = NULL;
      int *which = NULL;
      size_t n = 0, vb = 0, c = 0;
      NG_OK(ng_flce_list_gemms(e->ctx, e->queue, &p, &t, 0, &calls, &which, &n, &vb, &c));
      ng_flce_info info;
      NG_OK(ng_flce_plan(e->ctx, e->queue, &p, &t, 0, &info));
      const size_t V = s[i].v, H = s[i].h;
      const size_t bound = 4 * (up(c, 256) * (up(V, 256) + up(H, 256)) + up(vb, 256) * up(H, 256));
      /* the V-block itself is chunk-sized: at most the chunk (rounded up to 256) or a quarter
       * of the logits chunk */
      if (vb * H > up(c, 256) * H && vb * H > c * V / 4)
        fail_msg("shape %zu: V-block %zu rows of %zu is not bounded by the chunk %zu", i, vb, H, c);
      const bool strict = bound < V * H * 4;
      size_t worst = 0, seen[3] = {0, 0, 0};
      for (size_t k = 0; k < n; k++) {
        const ng_gemm *g = &calls[k];
        const size_t tb = clblast_temp(e, g);
        seen[which[k]]++;
        if (tb > worst) worst = tb;
        if (tb > bound)
          fail_msg("shape %zu call %zu (product %d): %zu temporary bytes > bound %zu", i, k,
                   which[k], tb, bound);
        if (strict && tb >= V * H * 4)
          fail_msg("shape %zu call %zu (product %d): %zu temporary bytes >= V*H*4", i, k,
                   which[k], tb);
        const size_t span = which[k] == 0 ? g->n : which[k] == 1 ? g->k : g->m;
        const int big = which[k] == 2 ? 2 : 1;
        if (span > vb && clblast_copies(e, g, big))
          fail_msg("shape %zu call %zu (product %d) spans %zu rows of the weight and CLBlast "
                   "copies them",
                   i, k, which[k], span);
      }
      assert_true(seen[0] > 0 && seen[1] > 0 && seen[2] > 0);
      assert_int_equal(info.gemm_calls, n);
      assert_true(info.gemm_temp_bytes >= worst);
      assert_int_equal(info.peak_bytes, info.scratch_bytes + info.gemm_temp_bytes);
      /* What the obvious row-major dW[V,H] += gᵀ·x call would ask for, for the record. */
      ng_gemm naive;
      memset(&naive, 0, sizeof naive);
      naive.ta = true, naive.m = V, naive.n = H, naive.k = c, naive.lda = V, naive.ldb = H;
      naive.ldc = H;
      if (xd == 0)
        print_message("[ info ] V=%zu H=%zu chunk=%zu w_off=%zu: %zu calls, largest temporary "
                      "%zu B, bound %zu B, V*H*4 = %zu B; the plain row-major dW call asks %zu B; "
                      "strategies %d/%d/%d\n",
                      V, H, c, s[i].w_off, n, worst, bound, V * H * 4, clblast_temp(e, &naive),
                      info.gemm_strategy[0], info.gemm_strategy[1], info.gemm_strategy[2]);
      free(calls);
      free(which);
    }
  }
}

/* ---- errors ---------------------------------------------------------------------------------- */
typedef struct err_env {
  cl_mem x, w, tg, b, cw, go, l, z, a, dx, dw, db;
  ng_flce_params p;
  ng_flce_tensors t;
} err_env;

static void err_setup(err_env *s, ng_reduction red) {
  const size_t bt = 6, h = 4, v = 5;
  flce_case c = base_case(bt, h, v, 1);
  int64_t tg[6] = {0, 1, 4, -100, 2, 3};
  s->x = ng_test_upload(NG_F32, NULL, bt * h, 0, 0);
  s->w = ng_test_upload(NG_F32, NULL, v * h, 0, 0);
  s->tg = upload_targets_g(&c, tg, 0, 0);
  s->b = ng_test_upload(NG_F32, NULL, v, 0, 0);
  s->cw = ng_test_upload(NG_F32, NULL, v, 0, 0);
  s->go = ng_test_upload(NG_F32, NULL, bt, 0, 0);
  s->l = ng_test_upload(NG_F32, NULL, bt, 0, 0);
  s->z = ng_test_upload(NG_F32, NULL, bt, 0, 0);
  s->a = ng_test_upload(NG_F32, NULL, bt, 0, 0);
  s->dx = ng_test_upload(NG_F32, NULL, bt * h, 0, 0);
  s->dw = ng_test_upload(NG_F32, NULL, v * h, 0, 0);
  s->db = ng_test_upload(NG_F32, NULL, v, 0, 0);
  s->p = ng_flce_params_default(bt, h, v);
  s->p.reduction = red;
  s->p.chunk_rows = 4;
  memset(&s->t, 0, sizeof s->t);
  s->t.input = ng_tensor_of(s->x, 0, NG_F32);
  s->t.weight = ng_tensor_of(s->w, 0, NG_F32);
  s->t.target = ng_tensor_of(s->tg, 0, NG_I64);
  s->t.bias = ng_tensor_of(s->b, 0, NG_F32);
  s->t.ce_weight = ng_tensor_of(s->cw, 0, NG_F32);
  s->t.grad_output = ng_tensor_of(s->go, 0, NG_F32);
  s->t.loss = ng_tensor_of(s->l, 0, NG_F32);
  s->t.z_loss = ng_tensor_of(s->z, 0, NG_F32);
  s->t.accuracy = ng_tensor_of(s->a, 0, NG_F32);
  s->t.dinput = ng_tensor_of(s->dx, 0, NG_F32);
  s->t.dweight = ng_tensor_of(s->dw, 0, NG_F32);
  s->t.dbias = ng_tensor_of(s->db, 0, NG_F32);
}

/* Every output still holds the poison: the failed call wrote nothing. */
static void err_untouched(err_env *s, const char *what) {
  const size_t bt = 6, h = 4, v = 5;
  struct {
    cl_mem m;
    size_t n;
  } outs[] = {{s->l, bt}, {s->z, bt}, {s->a, bt}, {s->dx, bt * h}, {s->dw, v * h}, {s->db, v}};
  for (size_t i = 0; i < NG_ARRAY_LEN(outs); i++)
    if (!ng_test_guard_intact(outs[i].m, NG_F32, 0, 0, outs[i].n))
      fail_msg("%s: output %zu was written by a failed call", what, i);
}

static void err_teardown(err_env *s) {
  cl_mem all[] = {s->x, s->w, s->tg, s->b, s->cw, s->go, s->l, s->z, s->a, s->dx, s->dw, s->db};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++) clReleaseMemObject(all[i]);
}

#define EXPECT_FAIL(s, want, what)                                                                 \
  do {                                                                                             \
    ng_test_env *e_ = ng_test_env_get();                                                           \
    NG_EXPECT_STATUS(ng_flce(e_->ctx, e_->queue, &(s)->p, &(s)->t, 0, NULL, 0, NULL, NULL), want); \
    err_untouched(s, what);                                                                        \
  } while (0)

static void test_errors(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  err_env s;
  err_setup(&s, NG_REDUCTION_NONE);
  /* handles */
  NG_EXPECT_STATUS(ng_flce(NULL, e->queue, &s.p, &s.t, 0, NULL, 0, NULL, NULL), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_flce(e->ctx, NULL, &s.p, &s.t, 0, NULL, 0, NULL, NULL), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_flce(e->ctx, e->queue, NULL, &s.t, 0, NULL, 0, NULL, NULL), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_flce(e->ctx, e->queue, &s.p, NULL, 0, NULL, 0, NULL, NULL), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_flce(e->ctx, e->queue, &s.p, &s.t, 4, NULL, 0, NULL, NULL), NG_ERR_INVALID_VALUE);
  err_untouched(&s, "handles");

  /* targets out of range: nothing written, the row named */
  int64_t bad[3] = {5, -1, 1000000};
  for (int i = 0; i < 3; i++) {
    int64_t tg[6] = {0, 1, 4, -100, 2, 3};
    tg[4] = bad[i];
    flce_case c = base_case(6, 4, 5, 1);
    cl_mem m = upload_targets(&c, tg, 0);
    ng_tensor keep = s.t.target;
    s.t.target = ng_tensor_of(m, 0, NG_I64);
    EXPECT_FAIL(&s, NG_ERR_TARGET_OUT_OF_RANGE, "target out of range");
    assert_non_null(strstr(ng_last_error_detail(), "target[4]"));
    s.t.target = keep;
    clReleaseMemObject(m);
  }
  /* i32 targets too */
  {
    int64_t tg[6] = {0, 1, 4, -100, 2, 7};
    flce_case c = base_case(6, 4, 5, 1);
    c.td = NG_I32;
    cl_mem m = upload_targets(&c, tg, 0);
    ng_tensor keep = s.t.target;
    s.t.target = ng_tensor_of(m, 0, NG_I32);
    EXPECT_FAIL(&s, NG_ERR_TARGET_OUT_OF_RANGE, "i32 target out of range");
    s.t.target = keep;
    clReleaseMemObject(m);
  }

  /* NULL required buffers */
  ng_tensor *req[] = {&s.t.input, &s.t.weight, &s.t.target, &s.t.loss, &s.t.grad_output};
  for (size_t i = 0; i < NG_ARRAY_LEN(req); i++) {
    ng_tensor keep = *req[i];
    req[i]->mem = NULL;
    EXPECT_FAIL(&s, NG_ERR_NULL_BUFFER, "null buffer");
    *req[i] = keep;
  }
  /* too small (offset pushes past the end by one element) */
  ng_tensor *all[] = {&s.t.input, &s.t.weight, &s.t.target, &s.t.bias, &s.t.ce_weight,
                      &s.t.grad_output, &s.t.loss, &s.t.z_loss, &s.t.accuracy, &s.t.dinput,
                      &s.t.dweight, &s.t.dbias};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++) {
    ng_tensor keep = *all[i];
    all[i]->offset = 1;
    EXPECT_FAIL(&s, NG_ERR_BUFFER_TOO_SMALL, "too small");
    all[i]->offset = 1000;
    EXPECT_FAIL(&s, NG_ERR_OFFSET_OUT_OF_RANGE, "offset out of range");
    *all[i] = keep;
  }
  /* dtypes */
  struct {
    ng_tensor *t;
    ng_dtype d;
    ng_status want;
  } dts[] = {{&s.t.input, NG_I32, NG_ERR_UNSUPPORTED_DTYPE},
             {&s.t.weight, NG_BF16, NG_ERR_UNSUPPORTED_DTYPE},
             {&s.t.target, NG_F32, NG_ERR_UNSUPPORTED_DTYPE},
             {&s.t.bias, NG_F16, NG_ERR_UNSUPPORTED_DTYPE},
             {&s.t.ce_weight, NG_BF16, NG_ERR_UNSUPPORTED_DTYPE},
             {&s.t.loss, NG_BF16, NG_ERR_UNSUPPORTED_DTYPE},
             {&s.t.z_loss, NG_F16, NG_ERR_UNSUPPORTED_DTYPE},
             {&s.t.grad_output, NG_I64, NG_ERR_UNSUPPORTED_DTYPE},
             {&s.t.dinput, NG_BF16, NG_ERR_DTYPE_MISMATCH},
             {&s.t.dweight, NG_BF16, NG_ERR_UNSUPPORTED_DTYPE},
             {&s.t.dbias, NG_F16, NG_ERR_UNSUPPORTED_DTYPE}};
  for (size_t i = 0; i < NG_ARRAY_LEN(dts); i++) {
    ng_tensor keep = *dts[i].t;
    dts[i].t->dtype = dts[i].d;
    EXPECT_FAIL(&s, dts[i].want, "dtype");
    *dts[i].t = keep;
  }
  /* options */
  struct {
    float *f;
    float v;
  } fo[] = {{&s.p.label_smoothing, 1.5f}, {&s.p.label_smoothing, -0.1f},
            {&s.p.label_smoothing, NAN},  {&s.p.softcap, -1.0f},
            {&s.p.lse_square_scale, NAN}, {&s.p.lse_square_scale, -1.0f},
            {&s.p.grad_output, INFINITY}};
  for (size_t i = 0; i < NG_ARRAY_LEN(fo); i++) {
    float keep = *fo[i].f;
    *fo[i].f = fo[i].v;
    EXPECT_FAIL(&s, NG_ERR_INVALID_VALUE, "option");
    *fo[i].f = keep;
  }
  s.p.reduction = (ng_reduction)7;
  EXPECT_FAIL(&s, NG_ERR_INVALID_VALUE, "reduction");
  s.p.reduction = NG_REDUCTION_NONE;
  size_t *dims[] = {&s.p.bt, &s.p.h, &s.p.v};
  for (size_t i = 0; i < 3; i++) {
    size_t keep = *dims[i];
    *dims[i] = 0;
    EXPECT_FAIL(&s, NG_ERR_INVALID_SHAPE, "zero size");
    *dims[i] = keep;
  }
  /* dbias without bias */
  {
    ng_tensor keep = s.t.bias;
    s.t.bias = ng_tensor_none();
    EXPECT_FAIL(&s, NG_ERR_INVALID_VALUE, "dbias without bias");
    s.t.bias = keep;
  }
  /* scratch: not at offset 0, too small; budget too small */
  {
    cl_mem sc = ng_test_upload(NG_F32, NULL, 16, 0, 0);
    s.t.scratch = ng_tensor_of(sc, 1, NG_F32);
    EXPECT_FAIL(&s, NG_ERR_INVALID_VALUE, "scratch offset");
    s.t.scratch = ng_tensor_of(sc, 0, NG_F32);
    EXPECT_FAIL(&s, NG_ERR_BUFFER_TOO_SMALL, "scratch too small");
    s.t.scratch = ng_tensor_none();
    clReleaseMemObject(sc);
    s.p.chunk_rows = NG_FLCE_AUTO;
    s.p.scratch_budget = 100;
    EXPECT_FAIL(&s, NG_ERR_INVALID_VALUE, "budget");
    s.p.scratch_budget = NG_FLCE_AUTO;
    s.p.chunk_rows = 4;
  }
  /* the call itself works with these buffers (so the failures above were the arguments') */
  NG_OK(ng_flce(e->ctx, e->queue, &s.p, &s.t, 0, NULL, 0, NULL, NULL));
  err_teardown(&s);

  /* mean/sum: grad_output [1] too small at an offset */
  err_setup(&s, NG_REDUCTION_MEAN);
  s.t.loss.offset = 5;
  s.t.z_loss.offset = 5;
  s.t.accuracy.offset = 5;
  s.t.grad_output.offset = 6;
  EXPECT_FAIL(&s, NG_ERR_OFFSET_OUT_OF_RANGE, "grad_output scalar");
  s.t.grad_output.offset = 5;
  NG_OK(ng_flce(e->ctx, e->queue, &s.p, &s.t, 0, NULL, 0, NULL, NULL));
  err_teardown(&s);

  /* CLBlast's 32-bit indexing, and the query's own checks */
  {
    ng_flce_params p = ng_flce_params_default(8, 40000, 70000);
    ng_flce_tensors t;
    memset(&t, 0, sizeof t);
    cl_mem ph = (cl_mem)e->queue;
    t.input = ng_tensor_of(ph, 0, NG_F32);
    t.weight = ng_tensor_of(ph, 0, NG_F32);
    t.target = ng_tensor_of(ph, 0, NG_I32);
    t.loss = ng_tensor_of(ph, 0, NG_F32);
    ng_flce_info info;
    NG_EXPECT_STATUS(ng_flce_plan(e->ctx, e->queue, &p, &t, 0, &info), NG_ERR_INDEX_OVERFLOW);
    NG_EXPECT_STATUS(ng_flce_plan(e->ctx, e->queue, &p, &t, 0, NULL), NG_ERR_NULL_HANDLE);
  }
}

/* dinput may be the input itself. */
static void test_in_place_dinput(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  const size_t bt = 11, h = 6, v = 9;
  ng_rng rng;
  ng_rng_seed(&rng, 42);
  float *x = ng_test_random(&rng, NG_F32, bt * h, 0, 1), *w = ng_test_random(&rng, NG_F32, v * h, 0, 1);
  int64_t tg[11] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1};
  flce_case c = base_case(bt, h, v, 1);
  cl_mem bx = ng_test_upload(NG_F32, x, bt * h, 0, 0), bw = ng_test_upload(NG_F32, w, v * h, 0, 0);
  cl_mem btg = upload_targets(&c, tg, 0), bl = ng_test_upload(NG_F32, NULL, 1, 0, 0);
  cl_mem bdw = ng_test_upload(NG_F32, NULL, v * h, 0, 0);
  cl_mem bdx = ng_test_upload(NG_F32, NULL, bt * h, 0, 0), bdw2 = ng_test_upload(NG_F32, NULL, v * h, 0, 0);
  ng_flce_params p = ng_flce_params_default(bt, h, v);
  p.chunk_rows = 3;
  ng_flce_tensors t;
  memset(&t, 0, sizeof t);
  t.input = ng_tensor_of(bx, 0, NG_F32);
  t.weight = ng_tensor_of(bw, 0, NG_F32);
  t.target = ng_tensor_of(btg, 0, NG_I64);
  t.loss = ng_tensor_of(bl, 0, NG_F32);
  t.dinput = ng_tensor_of(bdx, 0, NG_F32);
  t.dweight = ng_tensor_of(bdw, 0, NG_F32);
  NG_OK(ng_flce(e->ctx, e->queue, &p, &t, 0, NULL, 0, NULL, NULL));
  t.dinput = ng_tensor_of(bx, 0, NG_F32);
  t.dweight = ng_tensor_of(bdw2, 0, NG_F32);
  NG_OK(ng_flce(e->ctx, e->queue, &p, &t, 0, NULL, 0, NULL, NULL));
  float *a = malloc(v * h * sizeof(float)), *b = malloc(v * h * sizeof(float));
  float *dx1 = malloc(bt * h * sizeof(float)), *dx2 = malloc(bt * h * sizeof(float));
  ng_test_download(bdw, NG_F32, 0, v * h, a);
  ng_test_download(bdw2, NG_F32, 0, v * h, b);
  assert_memory_equal(a, b, v * h * sizeof(float));
  ng_test_download(bdx, NG_F32, 0, bt * h, dx1);
  ng_test_download(bx, NG_F32, 0, bt * h, dx2);
  assert_memory_equal(dx1, dx2, bt * h * sizeof(float));
  free(x), free(w), free(a), free(b), free(dx1), free(dx2);
  clReleaseMemObject(bx), clReleaseMemObject(bw), clReleaseMemObject(btg), clReleaseMemObject(bl);
  clReleaseMemObject(bdw), clReleaseMemObject(bdx), clReleaseMemObject(bdw2);
}

static int teardown(void **state) {
  (void)state;
  ng_test_env_release();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_gradient), cmocka_unit_test(test_errors),
      cmocka_unit_test(test_options),            cmocka_unit_test(test_frozen),
      cmocka_unit_test(test_chunks),             cmocka_unit_test(test_accumulate),
      cmocka_unit_test(test_all_ignored),        cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_true_class_exact),   cmocka_unit_test(test_workgroup_shape),
      cmocka_unit_test(test_deterministic),      cmocka_unit_test(test_in_place_dinput),
      cmocka_unit_test(test_gemm_temporaries),   cmocka_unit_test(test_indirect_gemms),
  };
  return NG_RUN_GROUP_TESTS(tests, NULL, teardown);
}
