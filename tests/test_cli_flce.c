/* normgrad-cli flce end to end (the real binary, NORMGRAD_CLI, run with posix_spawn): results
 * against the double-precision reference for mean with every option, none with and without a
 * grad_output tensor, frozen outputs absent; usage errors with exit code 2, a message naming the
 * problem and no output file; bench --json with the GEMM-only time and the memory figures. */
#include "ng_cli_test.h"
#include "ng_test.h"
#include "ref_flce.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* got within rtol·|ref| + k·scale + atol */
static void close_to(const char *what, const cli_tensor *t, const double *ref, const double *scale,
                     double rtol, double k, double atol) {
  const size_t n = cli_tensor_numel(t);
  for (size_t i = 0; i < n; i++) {
    const double g = cli_tensor_get(t, i);
    const double lim = rtol * fabs(ref[i]) + (scale ? k * scale[i] : 0) + atol;
    if (!(fabs(g - ref[i]) <= lim))
      fail_msg("%s[%zu]: got %.9g, want %.9g (limit %.3g)", what, i, g, ref[i], lim);
  }
}

typedef struct flce_cli_case {
  size_t b, t, h, v; /* input [b, t, h] */
  ng_dtype xd, td;
  const char *reduction;
  bool bias, cew, go_tensor, freeze_w, freeze_b, no_dx;
  const char *extra[12]; /* more CLI options */
  double eps, cap, lam, go;
} flce_cli_case;

static void run_case(const flce_cli_case *c) {
  const size_t rows = c->b * c->t, h = c->h, v = c->v;
  const bool none = !strcmp(c->reduction, "none");
  ng_rng rng;
  ng_rng_seed(&rng, rows * 31 + v);
  float *x = ng_test_random(&rng, c->xd, rows * h, 0, 1);
  float *w = ng_test_random(&rng, NG_F32, v * h, 0, 2.0 / sqrt((double)h));
  float *bias = ng_test_random(&rng, NG_F32, v, 0, 0.5);
  float *cw = malloc(v * sizeof(float)), *tf = malloc(rows * sizeof(float));
  int64_t *tg = malloc(rows * sizeof(int64_t));
  float *gov = ng_test_random(&rng, NG_F32, rows, 1, 0.5);
  for (size_t j = 0; j < v; j++) cw[j] = (float)(0.3 + ng_rng_uniform(&rng));
  for (size_t i = 0; i < rows; i++) {
    tg[i] = i % 5 == 2 ? -100 : (int64_t)(ng_rng_uniform(&rng) * (double)v);
    tf[i] = (float)tg[i];
  }
  cli_tensors in = {0};
  const int64_t xs[3] = {(int64_t)c->b, (int64_t)c->t, (int64_t)h}, ws[2] = {(int64_t)v, (int64_t)h};
  const int64_t vs[1] = {(int64_t)v}, one[1] = {1};
  ng_cli_add(&in, "input", c->xd, 3, xs, x);
  ng_cli_add(&in, "weight", NG_F32, 2, ws, w);
  ng_cli_add(&in, "target", c->td, 2, xs, tf);
  if (c->bias) ng_cli_add(&in, "bias", NG_F32, 1, vs, bias);
  if (c->cew) ng_cli_add(&in, "ce_weight", NG_F32, 1, vs, cw);
  float go1 = (float)c->go;
  if (c->go_tensor) {
    if (none) ng_cli_add(&in, "grad_output", NG_F32, 2, xs, gov);
    else ng_cli_add(&in, "grad_output", NG_F32, 1, one, &go1);
  }
  ng_cli_write(ng_cli_in, &in);

  const char *args[48] = {"run", "flce", "--in", ng_cli_in, "--out", ng_cli_out, "--reduction",
                          c->reduction};
  size_t na = 8;
  char eps[32], cap[32], lam[32], go[32];
  snprintf(eps, sizeof eps, "%g", c->eps);
  snprintf(cap, sizeof cap, "%g", c->cap);
  snprintf(lam, sizeof lam, "%g", c->lam);
  snprintf(go, sizeof go, "%g", c->go);
  args[na++] = "--label-smoothing", args[na++] = eps;
  args[na++] = "--softcap", args[na++] = cap;
  args[na++] = "--lse-square-scale", args[na++] = lam;
  if (!c->go_tensor) args[na++] = "--grad-output", args[na++] = go;
  if (c->freeze_w) args[na++] = "--freeze-weight";
  if (c->freeze_b) args[na++] = "--freeze-bias";
  if (c->no_dx) args[na++] = "--no-input-grad";
  for (size_t i = 0; c->extra[i]; i++) args[na++] = c->extra[i];
  args[na] = NULL;
  ng_cli_proc p = ng_cli_run(args);
  if (p.code != 0) fail_msg("run flce exited %d: %s", p.code, p.err);

  /* reference: the f32 values of the rounded input; mean/sum go as a scalar */
  ref_flce rp = {rows, h, v, -100, c->eps, c->cap, c->lam, none ? NG_REDUCTION_NONE
                 : !strcmp(c->reduction, "sum") ? NG_REDUCTION_SUM : NG_REDUCTION_MEAN,
                 c->bias ? bias : NULL, c->cew ? cw : NULL, NULL, c->go};
  float *gofill = NULL;
  if (none) {
    gofill = malloc(rows * sizeof(float));
    for (size_t i = 0; i < rows; i++) gofill[i] = c->go_tensor ? gov[i] : (float)c->go;
    rp.grad_output = gofill;
  }
  const size_t on = none ? rows : 1;
  double *loss = malloc(on * sizeof(double)), *zl = malloc(on * sizeof(double));
  double *dx = malloc(rows * h * sizeof(double)), *dxs = malloc(rows * h * sizeof(double));
  double *dw = malloc(v * h * sizeof(double)), *dws = malloc(v * h * sizeof(double));
  double *db = malloc(v * sizeof(double)), *dbs = malloc(v * sizeof(double));
  ref_flce_out ro = {loss, zl, NULL, dx, dw, db, dxs, dws, dbs, 0};
  ref_flce_run(&rp, x, w, tg, &ro);
  cli_tensors out = {0};
  ng_cli_read(ng_cli_out, &out);
  const double dz = 1.2e-7 * sqrt((double)h) * ro.logit_scale;
  const double tol = 20 * dz * (1 + 2 * c->lam * ro.logit_scale) + 1e-6;
  close_to("loss", ng_cli_need(&out, "loss", NG_F32, none ? 2 : 0, xs), loss, NULL, 1e-5, 0,
           tol * (none ? 1 : 2));
  close_to("z_loss", ng_cli_need(&out, "z_loss", NG_F32, none ? 2 : 0, xs), zl, NULL, 1e-5, 0, tol);
  const double rt = c->xd == NG_BF16 ? 1.0 / 128 : c->xd == NG_F16 ? 1.0 / 1024 : 2e-6;
  if (c->no_dx) assert_null(cli_tensors_find(&out, "dinput"));
  else close_to("dinput", ng_cli_need(&out, "dinput", c->xd, 3, xs), dx, dxs, rt, tol, 1e-7);
  if (c->freeze_w) assert_null(cli_tensors_find(&out, "dweight"));
  else close_to("dweight", ng_cli_need(&out, "dweight", NG_F32, 2, ws), dw, dws, 2e-6, tol, 0);
  if (!c->bias || c->freeze_b) assert_null(cli_tensors_find(&out, "dbias"));
  else close_to("dbias", ng_cli_need(&out, "dbias", NG_F32, 1, vs), db, dbs, 2e-6, tol, 0);
  cli_tensors_free(&out);
  cli_tensors_free(&in);
  unlink(ng_cli_out);
  ng_cli_proc_free(&p);
  free(x), free(w), free(bias), free(cw), free(tf), free(tg), free(gov), free(gofill);
  free(loss), free(zl), free(dx), free(dxs), free(dw), free(dws), free(db), free(dbs);
}

static void test_run(void **state) {
  (void)state;
  flce_cli_case a = {3, 7, 20, 37, NG_BF16, NG_I64, "mean", true, true, false, false, false,
                     false, {"--chunk-rows", "4", NULL}, 0.1, 4.0, 0.01, 0.5};
  run_case(&a);
  flce_cli_case b = {2, 5, 16, 29, NG_F32, NG_I32, "none", true, false, true, false, true,
                     false, {NULL}, 0.0, 0.0, 0.0, 1.0};
  run_case(&b);
  flce_cli_case c = {1, 9, 8, 13, NG_F32, NG_I32, "none", false, true, false, true, false,
                     true, {"--scratch-budget", "100000000", NULL}, 0.2, 0.0, 0.1, 0.7};
  run_case(&c);
  flce_cli_case d = {2, 3, 8, 11, NG_F16, NG_I64, "sum", true, false, true, false, false,
                     false, {NULL}, 0.0, 0.0, 0.0, 2.0};
  run_case(&d);
}

/* exit 2, stderr names the problem, no output file */
static void expect_usage(const char *const *args, const char *needle) {
  unlink(ng_cli_out);
  ng_cli_proc p = ng_cli_run(args);
  if (p.code != 2) fail_msg("exit %d, expected 2: %s", p.code, p.err);
  if (!strstr(p.err, needle)) fail_msg("stderr does not mention '%s': %s", needle, p.err);
  if (access(ng_cli_out, F_OK) == 0) fail_msg("a failed run created its output");
  ng_cli_proc_free(&p);
}

static void write_small(ng_dtype wd, float bad_target, bool go_tensor, size_t go_n) {
  cli_tensors in = {0};
  float x[12] = {0}, w[20] = {0}, t[3] = {0, 1, bad_target}, g[3] = {1, 1, 1};
  const int64_t xs[2] = {3, 4}, ws[2] = {5, 4}, ts[1] = {3}, gs[1] = {(int64_t)go_n};
  ng_cli_add(&in, "input", NG_F32, 2, xs, x);
  ng_cli_add(&in, "weight", wd, 2, ws, w);
  ng_cli_add(&in, "target", NG_I32, 1, ts, t);
  if (go_tensor) ng_cli_add(&in, "grad_output", NG_F32, 1, gs, g);
  ng_cli_write(ng_cli_in, &in);
  cli_tensors_free(&in);
}

static void test_usage_errors(void **state) {
  (void)state;
  const char *base[] = {"run", "flce", "--in", ng_cli_in, "--out", ng_cli_out, NULL};
  write_small(NG_F32, 7, false, 0);
  expect_usage(base, "target[2]");
  write_small(NG_BF16, 2, false, 0);
  expect_usage(base, "weight");
  write_small(NG_F32, 2, true, 1);
  expect_usage((const char *const[]){"run", "flce", "--in", ng_cli_in, "--out", ng_cli_out,
                                     "--grad-output", "2", NULL},
               "not both");
  expect_usage((const char *const[]){"run", "flce", "--in", ng_cli_in, "--out", ng_cli_out,
                                     "--reduction", "none", NULL},
               "grad_output");
  expect_usage((const char *const[]){"run", "flce", "--in", ng_cli_in, "--out", ng_cli_out,
                                     "--chunk-rows", "0", NULL},
               "--chunk-rows");
  /* a successful run of the same file, so the failures above were the arguments' */
  ng_cli_proc p = ng_cli_run(base);
  if (p.code != 0) fail_msg("run flce exited %d: %s", p.code, p.err);
  ng_cli_proc_free(&p);
}

static void test_bench_json(void **state) {
  (void)state;
  ng_cli_proc p = ng_cli_run((const char *const[]){"bench", "flce", "--rows", "32", "--hidden",
                                                   "16", "--vocab", "300", "--dtype", "bf16",
                                                   "--json", NULL});
  if (p.code != 0) fail_msg("bench: exit %d: %s", p.code, p.err);
  cJSON *j = cJSON_Parse(p.out);
  if (!cJSON_IsObject(j)) fail_msg("not one JSON object: %s", p.out);
  const char *pos[] = {"median_ms", "sub_median_ms", "tflops", "sub_tflops", "extra_device_bytes",
                       "gemm_temp_bytes", "scratch_bytes", "vh4_bytes", "chunk_rows",
                       "gemm_calls"};
  for (size_t k = 0; k < NG_ARRAY_LEN(pos); k++) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(j, pos[k]);
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0)) fail_msg("field %s: %s", pos[k], p.out);
  }
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "sub_pass")->valuestring, "gemms");
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(j, "vocab")->valuedouble, 300);
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(j, "vh4_bytes")->valuedouble, 300 * 16 * 4);
  const double extra = cJSON_GetObjectItemCaseSensitive(j, "extra_device_bytes")->valuedouble;
  const double parts = cJSON_GetObjectItemCaseSensitive(j, "scratch_bytes")->valuedouble +
                       cJSON_GetObjectItemCaseSensitive(j, "gemm_temp_bytes")->valuedouble;
  assert_true(extra == parts);
  cJSON_Delete(j);
  ng_cli_proc_free(&p);
}

int main(void) {
  if (ng_cli_test_init("cli-flce")) return 1;
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_usage_errors), cmocka_unit_test(test_run),
                                     cmocka_unit_test(test_bench_json)};
  int failed = NG_RUN_GROUP_TESTS(tests, NULL, NULL);
  ng_cli_test_cleanup();
  return failed;
}
