/* normgrad-cli fused-add-rmsnorm and layernorm end to end (the real binary, NORMGRAD_CLI, run with
 * posix_spawn): results against the double-precision references, optional and frozen tensors
 * absent from the output, usage errors with exit code 2, a message naming the problem and no
 * output file, and bench --json with the bytes and kernel counts of each pass. */
#include "ng_cli_test.h"
#include "ng_test.h"
#include "ref_fused_add_rmsnorm.h"
#include "ref_layernorm.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Write the input file and free its tensors. */
static void write_input(cli_tensors *in) {
  ng_cli_write(ng_cli_in, in);
  cli_tensors_free(in);
}

static cli_tensors run_ok(const char *const *args) {
  unlink(ng_cli_out);
  ng_cli_proc p = ng_cli_run(args);
  if (p.code != 0) fail_msg("%s %s exited %d: %s", args[0], args[1], p.code, p.err);
  ng_cli_proc_free(&p);
  cli_tensors out = {0};
  ng_cli_read(ng_cli_out, &out);
  return out;
}

/* |got − ref| ≤ rtol·|ref| + atol for every element */
static void close_to(const char *what, const cli_tensor *t, const double *ref, double rtol,
                     double atol) {
  const size_t n = cli_tensor_numel(t);
  for (size_t i = 0; i < n; i++) {
    const double g = cli_tensor_get(t, i), lim = rtol * fabs(ref[i]) + atol;
    if (!(fabs(g - ref[i]) <= lim))
      fail_msg("%s[%zu]: got %.9g, want %.9g (limit %.3g)", what, i, g, ref[i], lim);
  }
}

static double *widen(const float *v, size_t n) {
  double *d = malloc(n * sizeof(double));
  assert_non_null(d);
  for (size_t i = 0; i < n; i++) d[i] = v[i];
  return d;
}

static double rtol_of(ng_dtype dt) {
  return dt == NG_BF16 ? 1.0 / 128 : dt == NG_F16 ? 1.0 / 1024 : 2e-6;
}

/* ---- fused-add-rmsnorm ----------------------------------------------------------------------- */
static void fa_case(ng_dtype xd, ng_dtype wd, bool with_dy, bool with_ds, bool freeze,
                    const char *mode, float offset) {
  const size_t B = 2, T = 3, N = 40, rows = B * T, cnt = rows * N;
  const int64_t xs[3] = {(int64_t)B, (int64_t)T, (int64_t)N}, ws[1] = {(int64_t)N};
  const int64_t rs[2] = {(int64_t)B, (int64_t)T};
  ng_rng rng;
  ng_rng_seed(&rng, 11 + xd * 3 + wd);
  float *x = ng_test_random(&rng, xd, cnt, 0.2, 1.0), *res = ng_test_random(&rng, xd, cnt, 0, 1);
  float *w = ng_test_random(&rng, wd, N, offset != 0 ? 0 : 1, 0.3);
  float *dy = ng_test_random(&rng, xd, cnt, 0, 1), *ds = ng_test_random(&rng, xd, cnt, 0, 0.5);
  cli_tensors in = {0};
  ng_cli_add(&in, "x", xd, 3, xs, x);
  ng_cli_add(&in, "residual", xd, 3, xs, res);
  ng_cli_add(&in, "weight", wd, 1, ws, w);
  if (with_dy) ng_cli_add(&in, "dy", xd, 3, xs, dy);
  if (with_ds) ng_cli_add(&in, "ds_out", xd, 3, xs, ds);
  write_input(&in);
  char off[32];
  snprintf(off, sizeof off, "%g", (double)offset);
  const char *args[16] = {"run",   "fused-add-rmsnorm", "--in", ng_cli_in, "--out", ng_cli_out,
                          "--casting-mode", mode, "--offset", off};
  if (freeze) args[10] = "--freeze-weight";
  cli_tensors out = run_ok(args);

  const ng_casting_mode m = !strcmp(mode, "gemma") ? NG_CAST_GEMMA
                            : !strcmp(mode, "none") ? NG_CAST_NONE
                                                    : NG_CAST_LLAMA;
  ref_rmsnorm rp = {rows, N, 1e-6f, offset, m, xd, wd, w};
  float *s = malloc(cnt * sizeof(float)), *rstd = malloc(rows * sizeof(float));
  double *y = malloc(cnt * sizeof(double)), *dx = malloc(cnt * sizeof(double));
  double *dw = malloc(N * sizeof(double)), dx_scale = 0;
  ref_fused_add_rmsnorm_forward(&rp, x, res, s, y, rstd);
  ref_fused_add_rmsnorm_backward(&rp, dy, with_ds ? ds : NULL, s, rstd, dx, dw, NULL, NULL,
                                 &dx_scale);
  double *sd = widen(s, cnt), *rd = widen(rstd, rows);
  close_to("s", ng_cli_need(&out, "s", xd, 3, xs), sd, 0, 0);
  close_to("y", ng_cli_need(&out, "y", xd, 3, xs), y, 2 * rtol_of(xd), 1e-5);
  close_to("rstd", ng_cli_need(&out, "rstd", NG_F32, 2, rs), rd,
           m == NG_CAST_NONE ? rtol_of(xd) : 1e-5, 0);
  if (with_dy) close_to("dx", ng_cli_need(&out, "dx", xd, 3, xs), dx, rtol_of(xd), 1e-5 * dx_scale);
  else ng_cli_absent(&out, "dx");
  if (with_dy && !freeze) {
    const double lt = m == NG_CAST_LLAMA && xd != NG_F32 ? 0.05 : 1e-4;
    close_to("dweight", ng_cli_need(&out, "dweight", wd, 1, ws), dw, rtol_of(wd), lt);
  } else {
    ng_cli_absent(&out, "dweight");
  }
  cli_tensors_free(&out);
  free(x), free(res), free(w), free(dy), free(ds), free(s), free(rstd), free(y), free(dx);
  free(dw), free(sd), free(rd);
}

static void test_fused_add_run(void **state) {
  (void)state;
  fa_case(NG_BF16, NG_F32, true, true, false, "llama", 0.0f);
  fa_case(NG_F32, NG_BF16, true, false, false, "gemma", 1.0f);
  fa_case(NG_F16, NG_F16, true, true, true, "none", 0.0f);
  fa_case(NG_BF16, NG_BF16, false, false, false, "llama", 0.0f);
}

/* ---- layernorm ------------------------------------------------------------------------------- */
static void ln_case(ng_dtype xd, ng_dtype wd, bool has_w, bool has_b, bool with_dy,
                    bool freeze_w, bool freeze_b) {
  const size_t rows = 5, N = 33, cnt = rows * N;
  const int64_t xs[2] = {(int64_t)rows, (int64_t)N}, ws[1] = {(int64_t)N}, rs[1] = {(int64_t)rows};
  ng_rng rng;
  ng_rng_seed(&rng, 40 + xd * 5 + wd + has_w * 7 + has_b * 13);
  float *x = ng_test_random(&rng, xd, cnt, 0.5, 2.0), *dy = ng_test_random(&rng, xd, cnt, 0, 1);
  float *w = ng_test_random(&rng, wd, N, 1, 0.3), *b = ng_test_random(&rng, wd, N, 0, 0.3);
  cli_tensors in = {0};
  ng_cli_add(&in, "x", xd, 2, xs, x);
  if (has_w) ng_cli_add(&in, "weight", wd, 1, ws, w);
  if (has_b) ng_cli_add(&in, "bias", wd, 1, ws, b);
  if (with_dy) ng_cli_add(&in, "dy", xd, 2, xs, dy);
  write_input(&in);
  const char *args[16] = {"run",      "layernorm", "--in",  ng_cli_in,
                          "--out",    ng_cli_out,  "--eps", "1e-5"};
  size_t na = 8;
  if (freeze_w) args[na++] = "--freeze-weight";
  if (freeze_b) args[na++] = "--freeze-bias";
  cli_tensors out = run_ok(args);

  ref_layernorm rp = {rows, N, 1e-5f, xd, has_w ? w : NULL, has_b ? b : NULL};
  float *mean = malloc(rows * sizeof(float)), *rstd = malloc(rows * sizeof(float));
  double *y = malloc(cnt * sizeof(double)), *dx = malloc(cnt * sizeof(double));
  double *dw = malloc(N * sizeof(double)), *db = malloc(N * sizeof(double)), dx_scale = 0;
  ref_layernorm_forward(&rp, x, y, NULL, mean, rstd);
  ref_layernorm_backward(&rp, dy, x, mean, rstd, dx, dw, NULL, db, NULL, NULL, NULL, &dx_scale);
  double *md = widen(mean, rows), *rd = widen(rstd, rows);
  close_to("y", ng_cli_need(&out, "y", xd, 2, xs), y, rtol_of(xd), 1e-5);
  close_to("mean", ng_cli_need(&out, "mean", NG_F32, 1, rs), md, 1e-6, 1e-6);
  close_to("rstd", ng_cli_need(&out, "rstd", NG_F32, 1, rs), rd, 1e-5, 0);
  if (with_dy) close_to("dx", ng_cli_need(&out, "dx", xd, 2, xs), dx, rtol_of(xd), 1e-5 * dx_scale);
  else ng_cli_absent(&out, "dx");
  if (with_dy && has_w && !freeze_w)
    close_to("dweight", ng_cli_need(&out, "dweight", wd, 1, ws), dw, rtol_of(wd), 1e-4);
  else
    ng_cli_absent(&out, "dweight");
  if (with_dy && has_b && !freeze_b)
    close_to("dbias", ng_cli_need(&out, "dbias", wd, 1, ws), db, rtol_of(wd), 1e-4);
  else
    ng_cli_absent(&out, "dbias");
  cli_tensors_free(&out);
  free(x), free(dy), free(w), free(b), free(mean), free(rstd), free(y), free(dx), free(dw);
  free(db), free(md), free(rd);
}

static void test_layernorm_run(void **state) {
  (void)state;
  ln_case(NG_BF16, NG_F32, true, true, true, false, false);
  ln_case(NG_F16, NG_BF16, true, true, true, false, true);
  ln_case(NG_F32, NG_F16, false, true, true, false, false);
  ln_case(NG_BF16, NG_BF16, true, false, true, true, false);
  ln_case(NG_F32, NG_F32, false, false, true, false, false);
  ln_case(NG_F32, NG_F32, true, true, false, false, false);
}

/* ---- usage errors: exit 2, stderr names the problem, no output file ------------------------- */
static void expect_usage(const char *op, const char *needle) {
  unlink(ng_cli_out);
  ng_cli_proc p =
      ng_cli_run((const char *const[]){"run", op, "--in", ng_cli_in, "--out", ng_cli_out, NULL});
  if (p.code != 2) fail_msg("%s: exit %d, expected 2: %s", op, p.code, p.err);
  if (!strstr(p.err, needle)) fail_msg("%s: stderr does not mention '%s': %s", op, needle, p.err);
  if (access(ng_cli_out, F_OK) == 0) fail_msg("a failed run created its output");
  ng_cli_proc_free(&p);
}

static void small_input(const char *const *names, const ng_dtype *dts, const int64_t (*shapes)[2],
                        const int *ndims) {
  float v[64];
  for (int i = 0; i < 64; i++) v[i] = 0.1f * (float)(i % 7);
  cli_tensors in = {0};
  for (size_t i = 0; names[i]; i++) ng_cli_add(&in, names[i], dts[i], ndims[i], shapes[i], v);
  write_input(&in);
}

static void test_usage_errors(void **state) {
  (void)state;
  const ng_dtype F = NG_F32, H = NG_BF16;
  /* fused-add-rmsnorm */
  small_input((const char *const[]){"x", "weight", NULL}, (ng_dtype[]){F, F},
              (const int64_t[][2]){{3, 8}, {8, 0}}, (int[]){2, 1});
  expect_usage("fused-add-rmsnorm", "residual");
  small_input((const char *const[]){"x", "residual", "weight", "ds_out", NULL},
              (ng_dtype[]){F, F, F, F}, (const int64_t[][2]){{3, 8}, {3, 8}, {8, 0}, {3, 8}},
              (int[]){2, 2, 1, 2});
  expect_usage("fused-add-rmsnorm", "ds_out");
  small_input((const char *const[]){"x", "residual", "weight", NULL}, (ng_dtype[]){F, F, F},
              (const int64_t[][2]){{3, 8}, {4, 8}, {8, 0}}, (int[]){2, 2, 1});
  expect_usage("fused-add-rmsnorm", "residual");
  small_input((const char *const[]){"x", "residual", "weight", NULL}, (ng_dtype[]){F, H, F},
              (const int64_t[][2]){{3, 8}, {3, 8}, {8, 0}}, (int[]){2, 2, 1});
  expect_usage("fused-add-rmsnorm", "residual");
  small_input((const char *const[]){"x", "residual", "weight", "dY", NULL},
              (ng_dtype[]){F, F, F, F}, (const int64_t[][2]){{3, 8}, {3, 8}, {8, 0}, {3, 8}},
              (int[]){2, 2, 1, 2});
  expect_usage("fused-add-rmsnorm", "dY");
  /* layernorm */
  small_input((const char *const[]){"x", "weight", "bias", NULL}, (ng_dtype[]){F, F, H},
              (const int64_t[][2]){{3, 8}, {8, 0}, {8, 0}}, (int[]){2, 1, 1});
  expect_usage("layernorm", "bias");
  small_input((const char *const[]){"x", "weight", NULL}, (ng_dtype[]){F, F},
              (const int64_t[][2]){{3, 8}, {7, 0}}, (int[]){2, 1});
  expect_usage("layernorm", "weight");
  small_input((const char *const[]){"x", "dy", NULL}, (ng_dtype[]){F, F},
              (const int64_t[][2]){{3, 8}, {4, 8}}, (int[]){2, 2});
  expect_usage("layernorm", "dy");
  small_input((const char *const[]){"x", "residual", NULL}, (ng_dtype[]){F, F},
              (const int64_t[][2]){{3, 8}, {3, 8}}, (int[]){2, 2});
  expect_usage("layernorm", "residual");
  /* a good file runs (so the failures above were the inputs') */
  small_input((const char *const[]){"x", "weight", "bias", NULL}, (ng_dtype[]){F, H, H},
              (const int64_t[][2]){{3, 8}, {8, 0}, {8, 0}}, (int[]){2, 1, 1});
  cli_tensors out = run_ok((const char *const[]){"run", "layernorm", "--in", ng_cli_in, "--out",
                                                  ng_cli_out, NULL});
  cli_tensors_free(&out);
}

/* ---- bench --json ------------------------------------------------------------------------------ */
static void bench_json(const char *op, const char *pass, const char *const *flags, double bytes,
                       int kernels) {
  const char *args[16] = {"bench", op, "--rows", "16", "--hidden", "64", "--dtype", "bf16",
                          "--pass", pass, "--json"};
  size_t na = 11;
  for (size_t i = 0; flags[i]; i++) args[na++] = flags[i];
  args[na] = NULL;
  ng_cli_proc p = ng_cli_run(args);
  if (p.code != 0) fail_msg("bench %s %s: exit %d: %s", op, pass, p.code, p.err);
  cJSON *j = cJSON_Parse(p.out);
  if (!cJSON_IsObject(j)) fail_msg("not one JSON object: %s", p.out);
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "op")->valuestring, op);
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "pass")->valuestring, pass);
  const double got = cJSON_GetObjectItemCaseSensitive(j, "bytes")->valuedouble;
  if (got != bytes) fail_msg("bench %s %s: bytes %.0f, expected %.0f", op, pass, got, bytes);
  const int k = (int)cJSON_GetObjectItemCaseSensitive(j, "kernels")->valuedouble;
  if (k != kernels) fail_msg("bench %s %s: %d kernels, expected %d", op, pass, k, kernels);
  cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "median_ms");
  if (!cJSON_IsNumber(ms) || !(ms->valuedouble > 0)) fail_msg("median_ms: %s", p.out);
  if (!strcmp(op, "fused-add-rmsnorm") && !strcmp(pass, "backward")) {
    /* the report says whether the backward read ds_out (not with --no-ds-out) */
    bool without = false;
    for (size_t i = 0; flags[i]; i++) without = without || !strcmp(flags[i], "--no-ds-out");
    cJSON *ds = cJSON_GetObjectItemCaseSensitive(j, "ds_out");
    if (!cJSON_IsNumber(ds) || ds->valuedouble != (without ? 0 : 1)) fail_msg("ds_out: %s", p.out);
  }
  cJSON_Delete(j);
  ng_cli_proc_free(&p);
}

static void test_bench(void **state) {
  (void)state;
  const double x = 16 * 64 * 2, w = 64 * 4, r = 16 * 4;
  const char *none[] = {NULL}, *fw[] = {"--freeze-weight", NULL}, *fb[] = {"--freeze-bias", NULL};
  const char *both[] = {"--freeze-weight", "--freeze-bias", NULL}, *nods[] = {"--no-ds-out", NULL};
  /* each call also measures the copy bandwidth (seconds on PoCL): the passes whose kernel
   * counts say something — a frozen parameter has no reduction, and LayerNorm sums dW and dB
   * in one reduction launch */
  bench_json("fused-add-rmsnorm", "backward", none, 4 * x + 2 * w + r, 2);
  bench_json("fused-add-rmsnorm", "backward", fw, 4 * x + w + r, 1);
  bench_json("fused-add-rmsnorm", "backward", nods, 3 * x + 2 * w + r, 2); /* the last layer */
  bench_json("layernorm", "forward", none, 2 * x + 2 * w + 2 * r, 1);
  bench_json("layernorm", "backward", none, 3 * x + 3 * w + 2 * r, 2);
  bench_json("layernorm", "backward", fb, 3 * x + 2 * w + 2 * r, 2);
  bench_json("layernorm", "backward", both, 3 * x + w + 2 * r, 1);
}

int main(void) {
  if (ng_cli_test_init("cli-fa-ln")) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_usage_errors), cmocka_unit_test(test_fused_add_run),
      cmocka_unit_test(test_layernorm_run), cmocka_unit_test(test_bench)};
  int failed = NG_RUN_GROUP_TESTS(tests, NULL, NULL);
  ng_cli_test_cleanup();
  return failed;
}
