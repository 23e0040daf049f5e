/* normgrad-cli groupnorm and polynorm end to end: runs the real binary (NORMGRAD_CLI), checks the
 * outputs (names, dtypes, shapes, values against the double-precision references, frozen
 * parameters absent with dx unchanged), the usage errors specific to these ops (exit 2, a message
 * naming the problem, no output file), and bench --json for both. */
#include "ng_cli_test.h"
#include "ng_test.h"
#include "ref_groupnorm.h"
#include "ref_polynorm.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Run `args` (which write ng_cli_out); it must succeed, and ng_cli_out is read into *out. */
static void run_ok(const char *const *args, cli_tensors *out) {
  unlink(ng_cli_out);
  ng_cli_proc p = ng_cli_run(args);
  if (p.code != 0) fail_msg("%s %s: exit %d: %s", args[0], args[1], p.code, p.err);
  ng_cli_proc_free(&p);
  ng_cli_read(ng_cli_out, out);
}

static void expect_failure(const char *const *args, int code, const char *needle) {
  unlink(ng_cli_out);
  ng_cli_proc p = ng_cli_run(args);
  if (p.code != code) fail_msg("exit %d, expected %d; stderr: %s", p.code, code, p.err);
  if (!strstr(p.err, needle)) fail_msg("stderr does not mention '%s': %s", needle, p.err);
  if (access(ng_cli_out, F_OK) == 0) fail_msg("a failed run created its output (%s)", needle);
  ng_cli_proc_free(&p);
}

/* ---- groupnorm ------------------------------------------------------------------------------- */
typedef struct gn_run {
  int ndim;
  int64_t shape[5];
  int64_t groups;
  ng_dtype xd, wd;
  bool dy, freeze_w, freeze_b;
  uint64_t seed;
} gn_run;

/* Returns dx (NULL without dy) for bit comparisons. */
static float *check_groupnorm(const gn_run *c) {
  ng_rng rng;
  ng_rng_seed(&rng, c->seed);
  size_t cnt = 1;
  for (int d = 0; d < c->ndim; d++) cnt *= (size_t)c->shape[d];
  const size_t B = (size_t)c->shape[0], C = (size_t)c->shape[1], S = cnt / B / C;
  const size_t G = (size_t)c->groups, nb = B * G;
  float *x = ng_test_random(&rng, c->xd, cnt, 0.5, 2.0),
        *dy = ng_test_random(&rng, c->xd, cnt, 0, 1);
  float *w = ng_test_random(&rng, c->wd, C, 1.0, 0.4), *b = ng_test_random(&rng, c->wd, C, 0, 0.4);
  cli_tensors in = {0}, out = {0};
  const int64_t cs = (int64_t)C;
  ng_cli_add(&in, "x", c->xd, c->ndim, c->shape, x);
  ng_cli_add(&in, "weight", c->wd, 1, &cs, w);
  ng_cli_add(&in, "bias", c->wd, 1, &cs, b);
  if (c->dy) ng_cli_add(&in, "dy", c->xd, c->ndim, c->shape, dy);
  ng_cli_write(ng_cli_in, &in);
  char groups[32];
  snprintf(groups, sizeof groups, "%lld", (long long)c->groups);
  const char *args[16] = {"run",    "groupnorm", "--in", ng_cli_in, "--out",
                          ng_cli_out, "--groups",  groups, "--eps", "1e-5"};
  int k = 10;
  if (c->freeze_w) args[k++] = "--freeze-weight";
  if (c->freeze_b) args[k++] = "--freeze-bias";
  args[k] = NULL;
  run_ok(args, &out);
  const size_t want = 3 + (c->dy ? 1 + !c->freeze_w + !c->freeze_b : 0);
  if (out.count != want) fail_msg("groupnorm: %zu outputs, expected %zu", out.count, want);
  const int64_t ss[2] = {(int64_t)B, (int64_t)G};
  float *y = ng_cli_floats(ng_cli_need(&out, "y", c->xd, c->ndim, c->shape));
  float *mean = ng_cli_floats(ng_cli_need(&out, "mean", NG_F32, 2, ss));
  float *rstd = ng_cli_floats(ng_cli_need(&out, "rstd", NG_F32, 2, ss));
  ref_groupnorm rp = {B, C, S, G, 1e-5f, c->xd, w, b};
  float *mref = malloc(nb * sizeof(float)), *rref = malloc(nb * sizeof(float));
  double *md = malloc(nb * sizeof(double)), *rd = malloc(nb * sizeof(double));
  double *yref = malloc(cnt * sizeof(double));
  assert_true(mref && rref && md && rd && yref);
  ref_groupnorm_stats(&rp, x, mref, rref);
  for (size_t i = 0; i < nb; i++) md[i] = mref[i], rd[i] = rref[i];
  NG_ASSERT_CLOSE("groupnorm mean", mean, md, nb, ((ng_tol){2.5e-7, 4e-6}));
  NG_ASSERT_CLOSE("groupnorm rstd", rstd, rd, nb, ((ng_tol){1e-5, 0}));
  ref_groupnorm_apply(&rp, x, mean, rstd, yref);
  NG_ASSERT_CLOSE("groupnorm y", y, yref, cnt, ng_tol_for(c->xd, yref, cnt, 2e-6));
  float *dxv = NULL;
  if (c->dy) {
    double *dxref = malloc(cnt * sizeof(double)), dw[64], db[64], dws[64], dbs[64], dxs = 0;
    assert_true(dxref && C <= 64);
    ref_groupnorm_backward(&rp, dy, x, mean, rstd, dxref, dw, NULL, db, NULL, dws, dbs, &dxs);
    dxv = ng_cli_floats(ng_cli_need(&out, "dx", c->xd, c->ndim, c->shape));
    ng_tol t = ng_tol_for(c->xd, dxref, cnt, 0);
    t.atol += 4e-6 * dxs;
    NG_ASSERT_CLOSE("groupnorm dx", dxv, dxref, cnt, t);
    if (!c->freeze_w) {
      float *g = ng_cli_floats(ng_cli_need(&out, "dweight", c->wd, 1, &cs));
      ng_tol tw = ng_tol_for(c->wd, dw, C, 0);
      for (size_t i = 0; i < C; i++) tw.atol = fmax(tw.atol, 1e-5 * dws[i]);
      NG_ASSERT_CLOSE("groupnorm dweight", g, dw, C, tw);
      free(g);
    }
    if (!c->freeze_b) {
      float *g = ng_cli_floats(ng_cli_need(&out, "dbias", c->wd, 1, &cs));
      ng_tol tb = ng_tol_for(c->wd, db, C, 0);
      for (size_t i = 0; i < C; i++) tb.atol = fmax(tb.atol, 1e-5 * dbs[i]);
      NG_ASSERT_CLOSE("groupnorm dbias", g, db, C, tb);
      free(g);
    }
    free(dxref);
  }
  free(x), free(dy), free(w), free(b), free(y), free(mean), free(rstd), free(mref), free(rref);
  free(md), free(rd), free(yref);
  cli_tensors_free(&in), cli_tensors_free(&out);
  return dxv;
}

static void test_groupnorm_run(void **state) {
  (void)state;
  /* rank 4, bf16 x with f32 parameters; then both parameters frozen: same dx bits */
  gn_run c = {4, {2, 6, 5, 3, 0}, 3, NG_BF16, NG_F32, true, false, false, 21};
  float *dx = check_groupnorm(&c);
  c.freeze_w = c.freeze_b = true;
  float *dx2 = check_groupnorm(&c);
  if (memcmp(dx, dx2, 2 * 6 * 15 * sizeof(float)) != 0)
    fail_msg("groupnorm dx differs between frozen and trained runs");
  free(dx), free(dx2);
  /* rank 2 ([B, C]: S = 1), f16 with f16 parameters, groups = C, frozen weight only */
  gn_run r2 = {2, {5, 8, 0, 0, 0}, 8, NG_F16, NG_F16, true, true, false, 22};
  free(check_groupnorm(&r2));
  /* rank 5, f32, one group, no dy: only y, mean, rstd */
  gn_run r5 = {5, {1, 4, 2, 3, 4}, 1, NG_F32, NG_BF16, false, false, false, 23};
  free(check_groupnorm(&r5));
}

/* ---- polynorm -------------------------------------------------------------------------------- */
typedef struct pn_run {
  int ndim;
  int64_t shape[3];
  ng_dtype xd, wd;
  double mean, std;
  bool dy, freeze_w, freeze_b;
  uint64_t seed;
} pn_run;

static float *check_polynorm(const pn_run *c) {
  ng_rng rng;
  ng_rng_seed(&rng, c->seed);
  size_t cnt = 1;
  for (int d = 0; d < c->ndim; d++) cnt *= (size_t)c->shape[d];
  const size_t n = (size_t)c->shape[c->ndim - 1], rows = cnt / n;
  float *x = ng_test_random(&rng, c->xd, cnt, c->mean, c->std);
  float *dy = ng_test_random(&rng, c->xd, cnt, 0, 1);
  float *w = ng_test_random(&rng, c->wd, 3, 0.3, 0.3), *b = ng_test_random(&rng, c->wd, 1, 0, 0.3);
  cli_tensors in = {0}, out = {0};
  const int64_t three = 3, one = 1;
  ng_cli_add(&in, "x", c->xd, c->ndim, c->shape, x);
  ng_cli_add(&in, "weight", c->wd, 1, &three, w);
  ng_cli_add(&in, "bias", c->wd, 1, &one, b);
  if (c->dy) ng_cli_add(&in, "dy", c->xd, c->ndim, c->shape, dy);
  ng_cli_write(ng_cli_in, &in);
  const char *args[16] = {"run",      "polynorm", "--in",  ng_cli_in,
                          "--out",    ng_cli_out, "--eps", "1e-6"};
  int k = 8;
  if (c->freeze_w) args[k++] = "--freeze-weight";
  if (c->freeze_b) args[k++] = "--freeze-bias";
  args[k] = NULL;
  run_ok(args, &out);
  const size_t want = 2 + (c->dy ? 1 + !c->freeze_w + !c->freeze_b : 0);
  if (out.count != want) fail_msg("polynorm: %zu outputs, expected %zu", out.count, want);
  int64_t rshape[4];
  int rdim = c->ndim;
  for (int d = 0; d + 1 < c->ndim; d++) rshape[d] = c->shape[d];
  if (c->ndim == 1) rshape[0] = 1, rdim = 2;
  rshape[rdim - 1] = 3;
  float *y = ng_cli_floats(ng_cli_need(&out, "y", c->xd, c->ndim, c->shape));
  float *rstd = ng_cli_floats(ng_cli_need(&out, "rstd", NG_F32, rdim, rshape));
  ref_polynorm rp = {rows, n, 1e-6f, c->xd, w, b[0]};
  float *rref = malloc(rows * 3 * sizeof(float));
  double *rd = malloc(rows * 3 * sizeof(double)), *yref = malloc(cnt * sizeof(double));
  assert_true(rref && rd && yref);
  ref_polynorm_stats(&rp, x, rref);
  for (size_t i = 0; i < rows * 3; i++) rd[i] = rref[i];
  NG_ASSERT_CLOSE("polynorm rstd", rstd, rd, rows * 3,
                  ((ng_tol){1e-6 + 2e-7 * sqrt((double)n), 0}));
  ref_polynorm_apply(&rp, x, rstd, yref);
  NG_ASSERT_CLOSE("polynorm y", y, yref, cnt, ng_tol_for(c->xd, yref, cnt, 4e-6));
  float *dxv = NULL;
  if (c->dy) {
    double *dxref = malloc(cnt * sizeof(double)), dw[3], db, dws[3], dbs, dxs;
    assert_non_null(dxref);
    ref_polynorm_backward(&rp, dy, x, rstd, dxref, dw, NULL, &db, NULL, dws, &dbs, &dxs);
    dxv = ng_cli_floats(ng_cli_need(&out, "dx", c->xd, c->ndim, c->shape));
    ng_tol t = ng_tol_for(c->xd, dxref, cnt, 0);
    t.atol += 4e-6 * dxs;
    NG_ASSERT_CLOSE("polynorm dx", dxv, dxref, cnt, t);
    if (!c->freeze_w) {
      float *g = ng_cli_floats(ng_cli_need(&out, "dweight", c->wd, 1, &three));
      ng_tol tw = ng_tol_for(c->wd, dw, 3, 0);
      tw.atol += 1e-5 * fmax(dws[0], fmax(dws[1], dws[2]));
      NG_ASSERT_CLOSE("polynorm dweight", g, dw, 3, tw);
      free(g);
    }
    if (!c->freeze_b) {
      float *g = ng_cli_floats(ng_cli_need(&out, "dbias", c->wd, 1, &one));
      ng_tol tb = ng_tol_for(c->wd, &db, 1, 0);
      tb.atol += 1e-5 * dbs;
      NG_ASSERT_CLOSE("polynorm dbias", g, &db, 1, tb);
      free(g);
    }
    free(dxref);
  }
  free(x), free(dy), free(w), free(b), free(y), free(rstd), free(rref), free(rd), free(yref);
  cli_tensors_free(&in), cli_tensors_free(&out);
  return dxv;
}

static void test_polynorm_run(void **state) {
  (void)state;
  pn_run c = {3, {2, 3, 40}, NG_BF16, NG_F32, 0.1, 1.2, true, false, false, 31};
  float *dx = check_polynorm(&c);
  c.freeze_w = c.freeze_b = true;
  float *dx2 = check_polynorm(&c);
  if (memcmp(dx, dx2, 2 * 3 * 40 * sizeof(float)) != 0)
    fail_msg("polynorm dx differs between frozen and trained runs");
  free(dx), free(dx2);
  /* f16 x around 100 (x⁶ far beyond f16), frozen bias only; a 1-D x without dy */
  pn_run h = {2, {4, 33}, NG_F16, NG_F16, 100.0, 20.0, true, false, true, 32};
  free(check_polynorm(&h));
  pn_run one = {1, {17}, NG_F32, NG_BF16, 0.0, 1.0, false, false, false, 33};
  free(check_polynorm(&one));
}

/* ---- usage errors ---------------------------------------------------------------------------- */
static void write_case(ng_dtype xd, int xdim, const int64_t *xs, ng_dtype wd, int64_t wn,
                       ng_dtype bd, int64_t bn, bool with_dy) {
  cli_tensors in = {0};
  float v[256];
  for (int i = 0; i < 256; i++) v[i] = 0.01f * (float)i;
  assert_int_equal(cli_tensors_add(&in, "x", xd, xdim, xs, NULL), 0);
  ng_cli_add(&in, "weight", wd, 1, &wn, v);
  ng_cli_add(&in, "bias", bd, 1, &bn, v);
  if (with_dy) assert_int_equal(cli_tensors_add(&in, "dy", NG_F32, xdim, xs, NULL), 0);
  ng_cli_write(ng_cli_in, &in);
  cli_tensors_free(&in);
}

static void test_usage_errors(void **state) {
  (void)state;
  const int64_t x4[3] = {2, 4, 8}, x1[1] = {8};
#define GN(...)                                                                                    \
  ((const char *const[]){"run", "groupnorm", "--in", ng_cli_in, "--out", ng_cli_out, __VA_ARGS__,   \
                         NULL})
#define PN(...)                                                                                    \
  ((const char *const[]){"run", "polynorm", "--in", ng_cli_in, "--out", ng_cli_out, __VA_ARGS__,    \
                         NULL})
  write_case(NG_F32, 3, x4, NG_F32, 4, NG_F32, 4, false);
  expect_failure(GN("--eps", "1e-5"), 2, "--groups");
  expect_failure(GN("--groups", "3"), 2, "does not divide");
  expect_failure(GN("--groups", "8"), 2, "does not divide");
  write_case(NG_F32, 3, x4, NG_F32, 5, NG_F32, 4, false);
  expect_failure(GN("--groups", "2"), 2, "weight");
  write_case(NG_F32, 3, x4, NG_F32, 4, NG_BF16, 4, false);
  expect_failure(GN("--groups", "2"), 2, "bias");
  write_case(NG_F32, 1, x1, NG_F32, 8, NG_F32, 8, false);
  expect_failure(GN("--groups", "2"), 2, "rank");
  write_case(NG_F16, 3, x4, NG_F32, 4, NG_F32, 4, true); /* dy f32, x f16 */
  expect_failure(GN("--groups", "2"), 2, "dy");
  /* a missing bias */
  cli_tensors in = {0};
  assert_int_equal(cli_tensors_add(&in, "x", NG_F32, 3, x4, NULL), 0);
  const int64_t four = 4, three = 3;
  assert_int_equal(cli_tensors_add(&in, "weight", NG_F32, 1, &four, NULL), 0);
  ng_cli_write(ng_cli_in, &in);
  cli_tensors_free(&in);
  expect_failure(GN("--groups", "2"), 2, "bias");
  assert_int_equal(cli_tensors_add(&in, "x", NG_F32, 3, x4, NULL), 0);
  assert_int_equal(cli_tensors_add(&in, "weight", NG_F32, 1, &three, NULL), 0);
  ng_cli_write(ng_cli_in, &in);
  cli_tensors_free(&in);
  expect_failure(PN("--eps", "1e-6"), 2, "bias");
  /* polynorm: weight [4], bias [2], bias dtype, a stray tensor */
  write_case(NG_F32, 3, x4, NG_F32, 4, NG_F32, 1, false);
  expect_failure(PN("--eps", "1e-6"), 2, "weight");
  write_case(NG_F32, 3, x4, NG_F32, 3, NG_F32, 2, false);
  expect_failure(PN("--eps", "1e-6"), 2, "bias");
  write_case(NG_F32, 3, x4, NG_BF16, 3, NG_F32, 1, false);
  expect_failure(PN("--eps", "1e-6"), 2, "bias");
  write_case(NG_F32, 3, x4, NG_F32, 3, NG_F32, 1, false);
  expect_failure(GN("--groups", "2"), 2, "weight"); /* a polynorm file given to groupnorm */
#undef GN
#undef PN
}

/* ---- bench ----------------------------------------------------------------------------------- */
static void check_bench(const char *op, const char *pass, bool frozen_w, bool frozen_b,
                        double want_bytes) {
  const char *args[16] = {"bench",   op,     "--rows", "64", "--hidden", "512",
                          "--dtype", "bf16", "--pass", pass, "--json"};
  int k = 11;
  if (frozen_w) args[k++] = "--freeze-weight";
  if (frozen_b) args[k++] = "--freeze-bias";
  args[k] = NULL;
  ng_cli_proc p = ng_cli_run(args);
  if (p.code != 0) fail_msg("bench %s: exit %d: %s", op, p.code, p.err);
  cJSON *j = cJSON_Parse(p.out);
  if (!cJSON_IsObject(j)) fail_msg("bench --json did not print a JSON object: %s", p.out);
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "op")->valuestring, op);
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "pass")->valuestring, pass);
  assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "frozen")), frozen_w);
  assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "frozen_bias")), frozen_b);
  const double bytes = cJSON_GetObjectItemCaseSensitive(j, "bytes")->valuedouble;
  if (fabs(bytes - want_bytes) > 0.5)
    fail_msg("bench %s %s: bytes %.0f, expected %.0f", op, pass, bytes, want_bytes);
  assert_true(cJSON_GetObjectItemCaseSensitive(j, "gbps")->valuedouble > 0);
  cJSON_Delete(j);
  ng_cli_proc_free(&p);
}

static void test_bench(void **state) {
  (void)state;
  const double x = 64.0 * 512 * 2;
  /* groupnorm: x [1, 64, 512], 32 groups; weight, bias [64] f32; mean, rstd [1, 32] f32 */
  const double gw = 64 * 4, gs = 2 * 32 * 4;
  check_bench("groupnorm", "backward", false, true, 3 * x + gw + gs + gw);
  /* polynorm: weight [3], bias [1], rstd [64, 3] f32 (each bench run costs seconds on a CPU:
   * one per op) */
  const double pr = 64 * 12;
  check_bench("polynorm", "backward", true, false, 3 * x + 12 + pr + 4);
  /* --batch B: x [B, rows, hidden], statistics [B, G], reported with the groups */
  ng_cli_proc pb = ng_cli_run((const char *const[]){"bench", "groupnorm", "--rows", "64",
                                                    "--hidden", "512", "--dtype", "bf16",
                                                    "--batch", "3", "--groups", "4", "--json",
                                                    NULL});
  if (pb.code != 0) fail_msg("bench groupnorm --batch: exit %d: %s", pb.code, pb.err);
  cJSON *j = cJSON_Parse(pb.out);
  assert_true(cJSON_IsObject(j));
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(j, "batch")->valuedouble, 3);
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(j, "groups")->valuedouble, 4);
  assert_true(fabs(cJSON_GetObjectItemCaseSensitive(j, "bytes")->valuedouble -
                   (3 * 3 * x + gw + 2 * 3 * 4 * 4 + 2 * gw)) < 0.5);
  cJSON_Delete(j);
  ng_cli_proc_free(&pb);
  /* --groups must divide the rows (channels) */
  ng_cli_proc p = ng_cli_run((const char *const[]){"bench", "groupnorm", "--rows", "64",
                                                   "--hidden", "8", "--dtype", "f32", "--groups",
                                                   "5", NULL});
  assert_int_equal(p.code, 2);
  assert_non_null(strstr(p.err, "--groups"));
  ng_cli_proc_free(&p);
}

int main(void) {
  if (ng_cli_test_init("cli-gp")) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_groupnorm_run),
      cmocka_unit_test(test_polynorm_run),
      cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_bench),
  };
  int failed = NG_RUN_GROUP_TESTS(tests, NULL, NULL);
  ng_cli_test_cleanup();
  return failed;
}
