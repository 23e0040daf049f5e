/* normgrad-cli end to end: runs the real binary (NORMGRAD_CLI) with posix_spawn, no shell.
 *  - rmsnorm results against the double-precision reference (bf16 and f32, casting modes,
 *    offset, no weight, frozen weight with bit-identical dx, the committed example file);
 *  - every malformed-file case of the safetensors reader, and every usage error (unknown op or
 *    option, missing --in, bad numbers, wrong dtype or shape, missing tensor, unknown device),
 *    each with its exit code, a message naming the problem, and no output file or temporary
 *    left behind; a device failure (no OpenCL platform) gives 3;
 *  - bench --json is one JSON object with the documented fields; help, version, devices,
 *    inspect;
 *  - the reader directly on malformed buffers, every truncation of a valid file, and writer
 *    round trips. */
#include "ng_cli_test.h"
#include "ng_test.h"
#include "ref_norms.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char in_dir[300], out_dir[300]; /* inputs and outputs, in the scratch folder */

/* ---- files and processes ----------------------------------------------------------------------- */
static bool exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* Names in dir other than . and .. */
static size_t dir_entries(const char *dir, char *first, size_t len) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (n++ == 0 && first) snprintf(first, len, "%s", e->d_name);
  }
  closedir(d);
  return n;
}

static void clear_dir(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  char p[600];
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (unlink(p) != 0) rmdir(p);
  }
  closedir(d);
}

static void describe_args(const char *const *args, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (; *args && used < len; args++)
    used += (size_t)snprintf(buf + used, len - used, "%s ", *args);
}

/* The run must fail with `code`, say `needle` on stderr, and leave out/ empty. */
static void expect_failure_env(const char *const *args, const char *const *env, int code,
                               const char *needle) {
  clear_dir(out_dir);
  ng_cli_proc p = ng_cli_run_env(args, env);
  char what[1024], left[256] = "";
  describe_args(args, what, sizeof what);
  if (p.code != code)
    fail_msg("`%s` exited %d, expected %d; stderr: %s", what, p.code, code, p.err);
  if (!ng_cli_contains_nocase(p.err, needle))
    fail_msg("`%s`: stderr does not mention '%s': %s", what, needle, p.err);
  if (!ng_cli_contains_nocase(p.err, "normgrad-cli:"))
    fail_msg("`%s`: stderr lacks the tool's prefix: %s", what, p.err);
  for (const char *const *a = args; *a; a++)
    if (!strcmp(*a, "--out") && a[1] && exists(a[1]))
      fail_msg("`%s` created its output %s", what, a[1]);
  if (dir_entries(out_dir, left, sizeof left) != 0)
    fail_msg("`%s` left '%s' in the output directory", what, left);
  ng_cli_proc_free(&p);
}
static void expect_failure(const char *const *args, int code, const char *needle) {
  expect_failure_env(args, NULL, code, needle);
}

/* ---- rmsnorm against the reference ---------------------------------------------------------- */
typedef struct rms_run {
  int ndim;
  int64_t shape[4];
  ng_dtype xd;
  int wd;  /* -1: no weight */
  bool dy; /* with a backward */
  const char *mode;
  float offset, eps;
  bool freeze;
  uint64_t seed;
} rms_run;

static ng_casting_mode mode_of(const char *m) {
  return !strcmp(m, "gemma") ? NG_CAST_GEMMA : !strcmp(m, "none") ? NG_CAST_NONE : NG_CAST_LLAMA;
}

/* Check a run's outputs against the reference; returns dx (as floats) for bit comparisons. */
static float *check_rmsnorm(const cli_tensors *in, const cli_tensors *out, const char *mode,
                            float offset, float eps, bool freeze, const char *label) {
  const cli_tensor *x = cli_tensors_find(in, "x"), *w = cli_tensors_find(in, "weight");
  const cli_tensor *dy = cli_tensors_find(in, "dy");
  const size_t n = (size_t)x->shape[x->ndim - 1], cnt = cli_tensor_numel(x), rows = cnt / n;
  int sdim;
  int64_t sshape[CLI_MAX_DIMS];
  cli_rows_shape(x, &sdim, sshape);
  size_t expect_count = 2 + (dy ? 1 : 0) + (dy && w && !freeze ? 1 : 0);
  if (out->count != expect_count)
    fail_msg("%s: %zu output tensors, expected %zu", label, out->count, expect_count);
  const cli_tensor *y = ng_cli_need(out, "y", x->dtype, x->ndim, x->shape);
  const cli_tensor *rs = ng_cli_need(out, "rstd", NG_F32, sdim, sshape);

  float *xv = ng_cli_floats(x), *wv = w ? ng_cli_floats(w) : NULL, *yv = ng_cli_floats(y);
  float *rv = ng_cli_floats(rs);
  ref_rmsnorm rp = {rows, n, eps, offset, mode_of(mode), x->dtype, w ? w->dtype : NG_F32, wv};
  double *yref = malloc(cnt * sizeof(double));
  float *rref = malloc(rows * sizeof(float));
  double *rd = malloc(rows * sizeof(double));
  assert_true(yref && rref && rd);
  ref_rmsnorm_forward(&rp, xv, yref, rref);
  char what[300];
  snprintf(what, sizeof what, "y [%s]", label);
  ng_tol yt = ng_tol_for(x->dtype, yref, cnt, 1e-6);
  if (rp.mode != NG_CAST_GEMMA) yt.rtol *= 2;
  NG_ASSERT_CLOSE(what, yv, yref, cnt, yt);
  for (size_t r = 0; r < rows; r++) rd[r] = rref[r];
  snprintf(what, sizeof what, "rstd [%s]", label);
  const double sum_rel = 1e-6 + 2e-7 * sqrt((double)n);
  ng_tol rt = {rp.mode == NG_CAST_NONE ? fmax(ng_tol_for(x->dtype, rd, 0, 0).rtol, sum_rel)
                                       : sum_rel,
               0};
  NG_ASSERT_CLOSE(what, rv, rd, rows, rt);

  float *dxv = NULL;
  if (dy) {
    const cli_tensor *dx = ng_cli_need(out, "dx", x->dtype, x->ndim, x->shape);
    float *dyv = ng_cli_floats(dy);
    dxv = ng_cli_floats(dx);
    double *dxref = malloc(cnt * sizeof(double)), *dwref = malloc(n * sizeof(double));
    double *dwscale = malloc(n * sizeof(double)), dxscale = 0;
    assert_true(dxref && dwref && dwscale);
    /* the backward reference gets the rstd the tool saved, as the tool's backward did */
    ref_rmsnorm_backward(&rp, dyv, xv, rv, dxref, dwref, NULL, dwscale, &dxscale);
    snprintf(what, sizeof what, "dx [%s]", label);
    ng_tol dxt = ng_tol_for(x->dtype, dxref, cnt, 0);
    dxt.atol += 4e-6 * dxscale;
    NG_ASSERT_CLOSE(what, dxv, dxref, cnt, dxt);
    if (w && !freeze) {
      const cli_tensor *dw = ng_cli_need(out, "dweight", w->dtype, 1, w->shape);
      float *dwv = ng_cli_floats(dw);
      double mx = 0;
      for (size_t j = 0; j < n; j++) mx = fmax(mx, dwscale[j]);
      ng_tol t = ng_tol_for(w->dtype, dwref, n, 0);
      t.atol = 2e-6 * mx * (1 + sqrt((double)rows) * 0.1);
      if (rp.mode == NG_CAST_LLAMA && x->dtype != NG_F32) t.atol += mx / 256 / sqrt((double)rows);
      snprintf(what, sizeof what, "dweight [%s]", label);
      NG_ASSERT_CLOSE(what, dwv, dwref, n, t);
      free(dwv);
    } else if (cli_tensors_find(out, "dweight")) {
      fail_msg("%s: dweight present although the weight is frozen or absent", label);
    }
    free(dyv), free(dxref), free(dwref), free(dwscale);
  }
  free(xv), free(wv), free(yv), free(rv), free(yref), free(rref), free(rd);
  return dxv;
}

/* Writes the input, runs the CLI, checks against the reference; returns dx (or NULL). */
static float *do_rms_run(const rms_run *c, const char *label) {
  ng_rng rng;
  ng_rng_seed(&rng, c->seed);
  cli_tensors in = {0}, out = {0};
  size_t cnt = 1;
  for (int d = 0; d < c->ndim; d++) cnt *= (size_t)c->shape[d];
  const int64_t n = c->shape[c->ndim - 1];
  float *x = ng_test_random(&rng, c->xd, cnt, 0.3, 1.5);
  ng_cli_add(&in, "x", c->xd, c->ndim, c->shape, x);
  if (c->wd >= 0) {
    float *w = ng_test_random(&rng, (ng_dtype)c->wd, (size_t)n, c->offset != 0 ? 0.0 : 1.0, 0.5);
    ng_cli_add(&in, "weight", (ng_dtype)c->wd, 1, &n, w);
    free(w);
  }
  if (c->dy) {
    float *dy = ng_test_random(&rng, c->xd, cnt, 0.0, 1.0);
    ng_cli_add(&in, "dy", c->xd, c->ndim, c->shape, dy);
    free(dy);
  }
  free(x);
  char *inp = ng_cli_path_in(in_dir, "in.safetensors");
  char *outp = ng_cli_path_in(out_dir, "out.safetensors");
  clear_dir(out_dir);
  ng_cli_write(inp, &in);
  char eps[32], off[32];
  snprintf(eps, sizeof eps, "%.9g", (double)c->eps);
  snprintf(off, sizeof off, "%.9g", (double)c->offset);
  const char *args[] = {"run", "rmsnorm", "--in", inp, "--out", outp, "--casting-mode", c->mode,
                        "--eps", eps, "--offset", off, c->freeze ? "--freeze-weight" : NULL,
                        NULL};
  ng_cli_proc p = ng_cli_run(args);
  if (p.code != 0) fail_msg("%s: exit %d: %s", label, p.code, p.err);
  assert_true(ng_cli_contains_nocase(p.out, "wrote"));
  ng_cli_proc_free(&p);
  ng_cli_read(outp, &out);
  /* exactly the output file, nothing else (no temporaries) */
  assert_int_equal(dir_entries(out_dir, NULL, 0), 1);
  float *dx = check_rmsnorm(&in, &out, c->mode, c->offset, c->eps, c->freeze, label);
  cli_tensors_free(&in);
  cli_tensors_free(&out);
  return dx;
}

static void test_rmsnorm_bf16_gemma(void **state) {
  (void)state;
  /* rank 3, odd N (scalar path), Gemma-style offset 1 */
  rms_run c = {3, {3, 5, 41, 0}, NG_BF16, NG_F32, true, "gemma", 1.0f, 1e-5f, false, 11};
  float *dx = do_rms_run(&c, "bf16 gemma offset 1");
  c.freeze = true;
  float *dx_frozen = do_rms_run(&c, "bf16 gemma offset 1 frozen");
  /* same inputs (same seed): the frozen run's dx is bit-identical */
  if (memcmp(dx, dx_frozen, 3 * 5 * 41 * sizeof(float)) != 0)
    fail_msg("dx differs between --freeze-weight and the trained run");
  free(dx), free(dx_frozen);
}

static void test_rmsnorm_f32_none(void **state) {
  (void)state;
  rms_run c = {2, {16, 64, 0, 0}, NG_F32, NG_BF16, true, "none", 0.5f, 1e-6f, false, 12};
  free(do_rms_run(&c, "f32 none offset 0.5, bf16 weight"));
  rms_run l = {2, {9, 136, 0, 0}, NG_F16, NG_F16, true, "llama", 0.0f, 1e-6f, false, 13};
  free(do_rms_run(&l, "f16 llama"));
}

static void test_rmsnorm_no_weight(void **state) {
  (void)state;
  /* 1-D x: rstd is [1]; no weight, no dy: only y and rstd */
  rms_run c = {1, {300, 0, 0, 0}, NG_F16, -1, false, "llama", 0.0f, 1e-6f, false, 14};
  free(do_rms_run(&c, "1-D f16, no weight"));
  rms_run d = {2, {4, 24, 0, 0}, NG_BF16, -1, true, "llama", 0.0f, 1e-6f, false, 15};
  free(do_rms_run(&d, "bf16 no weight with dy"));
}

/* The committed example runs with no Python and gives the reference's answer. */
static void test_example_file(void **state) {
  (void)state;
  const char *data = getenv("NORMGRAD_TEST_DATA");
  if (!data) fail_msg("NORMGRAD_TEST_DATA is not set (run through CTest)");
  char inp[600];
  snprintf(inp, sizeof inp, "%s/rmsnorm_example.safetensors", data);
  char *outp = ng_cli_path_in(out_dir, "example_out.safetensors");
  clear_dir(out_dir);
  const char *args[] = {"run", "rmsnorm", "--in", inp, "--out", outp, NULL};
  ng_cli_proc p = ng_cli_run(args);
  if (p.code != 0) fail_msg("example: exit %d: %s", p.code, p.err);
  ng_cli_proc_free(&p);
  cli_tensors in = {0}, out = {0};
  ng_cli_read(inp, &in);
  ng_cli_read(outp, &out);
  const int64_t xs[2] = {8, 256}, ws[1] = {256};
  ng_cli_need(&in, "x", NG_BF16, 2, xs);
  ng_cli_need(&in, "weight", NG_F32, 1, ws);
  ng_cli_need(&in, "dy", NG_BF16, 2, xs);
  free(check_rmsnorm(&in, &out, "llama", 0.0f, 1e-6f, false, "example file"));

  const char *ins[] = {"inspect", outp, NULL};
  p = ng_cli_run(ins);
  assert_int_equal(p.code, 0);
  const char *want[] = {"y", "rstd", "dx", "dweight", "BF16", "F32", "[8, 256]", "[8]", "mean"};
  for (size_t i = 0; i < NG_ARRAY_LEN(want); i++)
    if (!strstr(p.out, want[i])) fail_msg("inspect output lacks '%s':\n%s", want[i], p.out);
  ng_cli_proc_free(&p);
  cli_tensors_free(&in);
  cli_tensors_free(&out);
}

/* A successful run replaces an existing output; a failed one leaves it untouched. */
static void test_output_replacement(void **state) {
  (void)state;
  clear_dir(out_dir);
  char *outp = ng_cli_path_in(out_dir, "keep.safetensors");
  ng_test_write(outp, "old contents", 12);
  char *bad = ng_cli_path_in(in_dir, "bad.safetensors");
  ng_test_write(bad, "short", 5);
  const char *fail_args[] = {"run", "rmsnorm", "--in", bad, "--out", outp, NULL};
  ng_cli_proc p = ng_cli_run(fail_args);
  assert_int_equal(p.code, 2);
  ng_cli_proc_free(&p);
  char *txt = ng_cli_slurp(outp);
  assert_string_equal(txt, "old contents");
  free(txt);
  assert_int_equal(dir_entries(out_dir, NULL, 0), 1);

  const char *data = getenv("NORMGRAD_TEST_DATA");
  char inp[600];
  snprintf(inp, sizeof inp, "%s/rmsnorm_example.safetensors", data ? data : ".");
  const char *ok_args[] = {"run", "rmsnorm", "--in", inp, "--out", outp, "--freeze-weight", NULL};
  p = ng_cli_run(ok_args);
  if (p.code != 0) fail_msg("exit %d: %s", p.code, p.err);
  ng_cli_proc_free(&p);
  cli_tensors out = {0};
  ng_cli_read(outp, &out);
  assert_int_equal(out.count, 3);
  assert_null(cli_tensors_find(&out, "dweight"));
  assert_int_equal(dir_entries(out_dir, NULL, 0), 1);
  cli_tensors_free(&out);
}

/* ---- malformed files ------------------------------------------------------------------------------ */
typedef struct bad_file {
  const char *label;
  const char *json; /* NULL: raw bytes below */
  size_t data_len;  /* zero bytes appended after the header */
  uint64_t hlen_override; /* 0: the JSON's length */
  const char *raw;
  size_t raw_len;
  const char *needle;
} bad_file;

static const bad_file bad_files[] = {
    {"short file", NULL, 0, 0, "abcde", 5, "shorter than the 8-byte"},
    {"empty file", NULL, 0, 0, "", 0, "shorter than the 8-byte"},
    {"header length past end", "{}", 0, 1000, NULL, 0, "past the end of the file"},
    {"absurd header length", "{}", 0, (uint64_t)1 << 60, NULL, 0, "absurdly large"},
    {"invalid JSON", "{\"x\": {\"dtype\": \"F32\",", 0, 0, NULL, 0, "not valid JSON"},
    {"trailing data", "{} xy", 0, 0, NULL, 0, "not valid JSON"},
    {"not an object", "[1, 2]", 0, 0, NULL, 0, "not a JSON object"},
    {"entry not an object", "{\"x\": 5}", 0, 0, NULL, 0, "entry 'x' is not a JSON object"},
    {"unknown dtype", "{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16, 0,
     NULL, 0, "unsupported dtype 'F64'"},
    {"missing dtype", "{\"x\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0, NULL, 0,
     "\"dtype\""},
    {"negative dim", "{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, 0,
     NULL, 0, "shape entry 0 is not a non-negative integer"},
    {"fractional dim", "{\"x\":{\"dtype\":\"F32\",\"shape\":[4, 2.5],\"data_offsets\":[0,8]}}", 8,
     0, NULL, 0, "shape entry 1 is not a non-negative integer"},
    {"shape not an array", "{\"x\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, 0,
     NULL, 0, "\"shape\""},
    {"too many dims",
     "{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, 0,
     NULL, 0, "9 dims"},
    {"offsets not a pair", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, 0,
     NULL, 0, "data_offsets"},
    {"offsets not integers",
     "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}}", 8, 0, NULL, 0,
     "data_offsets"},
    {"end before begin", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, 0,
     NULL, 0, "end before begin"},
    {"size mismatch", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", 12, 0,
     NULL, 0, "need 8 bytes"},
    {"size overflow",
     "{\"x\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,8]}}",
     8, 0, NULL, 0, "overflows"},
    {"outside the data", "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, 0,
     NULL, 0, "outside the data section"},
    {"overlap",
     "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     12, 0, NULL, 0, "overlap"},
    {"duplicate name",
     "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
     16, 0, NULL, 0, "duplicate tensor name 'x'"},
    {"metadata not strings",
     "{\"__metadata__\":{\"a\":1},\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
     8, 0, NULL, 0, "__metadata__"},
    /* added with docs/errors.md (issue 7) */
    {"header length 1", "{}", 0, 1, NULL, 0, "too small for a JSON object"},
    {"metadata not an object", "{\"__metadata__\":[1]}", 0, 0, NULL, 0,
     "\"__metadata__\" is not a JSON object"},
    {"duplicate metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, 0, NULL, 0,
     "duplicate \"__metadata__\""},
    {"name too long",
     "{\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\":"
     "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
     4, 0, NULL, 0, "is longer than 127 bytes"},
    {"dim beyond 2^53", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4,
     0, NULL, 0, "shape entry 0 is not a non-negative integer"},
    {"offset beyond 2^53",
     "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[18446744073709551612,"
     "18446744073709551616]}}",
     4, 0, NULL, 0, "\"data_offsets\" must be [begin, end]"},
    {"rows x N bytes beyond 2^63",
     "{\"x\":{\"dtype\":\"BF16\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
     0, NULL, 0, "the shape's byte size overflows"},
    {"rows x N beyond 2^31, data absent",
     "{\"x\":{\"dtype\":\"BF16\",\"shape\":[65536,32769],\"data_offsets\":[0,4295098368]}}", 8,
     0, NULL, 0, "outside the data section"},
    {"header not UTF-8 JSON", "\xff\xfe{}", 0, 0, NULL, 0, "not valid JSON"},
};

static void make_bad(const bad_file *b, void **buf, size_t *len) {
  if (!b->json) {
    *buf = malloc(b->raw_len + 1);
    assert_non_null(*buf);
    memcpy(*buf, b->raw, b->raw_len);
    *len = b->raw_len;
    return;
  }
  size_t jl = strlen(b->json);
  uint64_t h = b->hlen_override ? b->hlen_override : jl;
  *len = 8 + jl + b->data_len;
  unsigned char *p = calloc(1, *len);
  assert_non_null(p);
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(h >> (8 * i));
  memcpy(p + 8, b->json, jl);
  *buf = p;
}

static void test_malformed_files_cli(void **state) {
  (void)state;
  char *inp = ng_cli_path_in(in_dir, "bad.safetensors");
  char *outp = ng_cli_path_in(out_dir, "out.safetensors");
  for (size_t i = 0; i < NG_ARRAY_LEN(bad_files); i++) {
    void *buf;
    size_t len;
    make_bad(&bad_files[i], &buf, &len);
    ng_test_write(inp, buf, len);
    free(buf);
    const char *args[] = {"run", "rmsnorm", "--in", inp, "--out", outp, NULL};
    expect_failure(args, 2, bad_files[i].needle);
    const char *ins[] = {"inspect", inp, NULL};
    expect_failure(ins, 2, bad_files[i].needle);
  }
}

static void test_malformed_buffers(void **state) {
  (void)state;
  for (size_t i = 0; i < NG_ARRAY_LEN(bad_files); i++) {
    void *buf;
    size_t len;
    make_bad(&bad_files[i], &buf, &len);
    cli_tensors ts = {0};
    char err[512] = "";
    int rc = cli_st_parse(buf, len, &ts, err, sizeof err);
    if (rc != CLI_USAGE) fail_msg("%s: cli_st_parse returned %d", bad_files[i].label, rc);
    if (!strstr(err, bad_files[i].needle))
      fail_msg("%s: message '%s' lacks '%s'", bad_files[i].label, err, bad_files[i].needle);
    assert_int_equal(ts.count, 0);
    free(buf);
  }
}

/* Every truncation and many single-byte corruptions of a valid file fail cleanly (or, for a
 * corruption that leaves a valid file, parse): nothing crashes, reads out of bounds or leaks
 * (ASan builds check the last two). */
static void test_truncations_and_corruptions(void **state) {
  (void)state;
  cli_tensors ts = {0};
  const int64_t s1[2] = {3, 5}, s2[1] = {5};
  float v[15];
  for (int i = 0; i < 15; i++) v[i] = (float)i - 7.5f;
  ng_cli_add(&ts, "x", NG_BF16, 2, s1, v);
  ng_cli_add(&ts, "weight", NG_F32, 1, s2, v);
  const char *meta[] = {"k", "v", NULL};
  void *buf;
  size_t len;
  char err[512];
  assert_int_equal(cli_st_serialize(&ts, meta, &buf, &len, err, sizeof err), CLI_OK);
  for (size_t cut = 0; cut < len; cut++) {
    cli_tensors got = {0};
    if (cli_st_parse(buf, cut, &got, err, sizeof err) != CLI_USAGE)
      fail_msg("a file cut to %zu of %zu bytes was accepted", cut, len);
    assert_int_equal(got.count, 0);
  }
  unsigned char *c = malloc(len);
  assert_non_null(c);
  ng_rng rng;
  ng_rng_seed(&rng, 5);
  size_t hdr_end = 8;
  for (int i = 0; i < 8; i++) hdr_end += (size_t)((unsigned char *)buf)[i] << (8 * i);
  for (int k = 0; k < 3000; k++) {
    memcpy(c, buf, len);
    size_t at = (size_t)(ng_rng_uniform(&rng) * (double)hdr_end);
    c[at] = (unsigned char)(ng_rng_uniform(&rng) * 256);
    cli_tensors got = {0};
    int rc = cli_st_parse(c, len, &got, err, sizeof err);
    assert_true(rc == CLI_OK || rc == CLI_USAGE);
    if (rc != CLI_OK) assert_int_equal(got.count, 0);
    cli_tensors_free(&got);
  }
  free(c);
  free(buf);
  cli_tensors_free(&ts);
}

/* Writer → reader gives back every name, dtype, shape and byte, including scalars, empty
 * tensors, integer tensors and names that need JSON escapes; the layout is aligned. */
static void test_round_trip(void **state) {
  (void)state;
  cli_tensors ts = {0}, back = {0};
  const int64_t sc[1] = {0}, s3[3] = {2, 1, 3}, e2[2] = {0, 4}, i1[1] = {3};
  float v[6] = {1.5f, -2.25f, 3.0f, 1e-3f, -0.0f, 65504.0f};
  ng_cli_add(&ts, "scalar", NG_F32, 0, sc, v);
  ng_cli_add(&ts, "three \"quoted\" \\ names", NG_F16, 3, s3, v);
  ng_cli_add(&ts, "empty", NG_BF16, 2, e2, v);
  int64_t iv[3] = {-100, 0, 1LL << 40};
  assert_int_equal(cli_tensors_add(&ts, "targets", NG_I64, 1, i1, iv), 0);
  int32_t jv[3] = {7, -8, 9};
  assert_int_equal(cli_tensors_add(&ts, "targets32", NG_I32, 1, i1, jv), 0);
  char err[512];
  void *buf;
  size_t len;
  const char *meta[] = {"producer", "test", NULL};
  assert_int_equal(cli_st_serialize(&ts, meta, &buf, &len, err, sizeof err), CLI_OK);
  uint64_t h = 0;
  for (int i = 7; i >= 0; i--) h = (h << 8) | ((unsigned char *)buf)[i];
  assert_int_equal((8 + h) % 8, 0);
  assert_int_equal(cli_st_parse(buf, len, &back, err, sizeof err), CLI_OK);
  assert_int_equal(back.count, ts.count);
  for (size_t i = 0; i < ts.count; i++) {
    const cli_tensor *a = &ts.items[i], *b = &back.items[i];
    assert_string_equal(a->name, b->name);
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->ndim, b->ndim);
    for (int d = 0; d < a->ndim; d++) assert_int_equal(a->shape[d], b->shape[d]);
    assert_int_equal(a->nbytes, b->nbytes);
    if (a->nbytes) assert_memory_equal(a->data, b->data, a->nbytes);
  }
  free(buf);
  cli_tensors_free(&back);

  /* to disk and back; a directory that does not exist gets nothing */
  char *p = ng_cli_path_in(out_dir, "rt.safetensors");
  clear_dir(out_dir);
  assert_int_equal(cli_st_write(p, &ts, meta, err, sizeof err), CLI_OK);
  assert_int_equal(cli_st_read(p, &back, err, sizeof err), CLI_OK);
  assert_int_equal(back.count, ts.count);
  assert_int_equal(dir_entries(out_dir, NULL, 0), 1);
  char *nodir = ng_cli_path_in(out_dir, "missing/rt.safetensors");
  assert_int_equal(cli_st_write(nodir, &ts, NULL, err, sizeof err), CLI_USAGE);
  assert_true(strstr(err, "missing") != NULL);
  assert_int_equal(cli_st_write(out_dir, &ts, NULL, err, sizeof err), CLI_USAGE);
  assert_int_equal(dir_entries(out_dir, NULL, 0), 1);
  cli_tensors_free(&back);
  cli_tensors_free(&ts);

  /* empty tensors with dimensions of 16 digits: the writer prints them exactly (cJSON's own
   * printing turned 2^53 into 9.00719925474099e+15), and refuses one a reader cannot take */
  const int64_t big[][2] = {{(int64_t)1 << 53, 0}, {((int64_t)1 << 53) - 1, 0},
                            {1000000000000001LL, 0}, {0, 4503599627370497LL}};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
    char nm[16];
    snprintf(nm, sizeof nm, "big%zu", i);
    assert_int_equal(cli_tensors_add(&ts, nm, NG_F32, 2, big[i], NULL), 0);
  }
  assert_int_equal(cli_st_serialize(&ts, NULL, &buf, &len, err, sizeof err), CLI_OK);
  assert_int_equal(cli_st_parse(buf, len, &back, err, sizeof err), CLI_OK);
  assert_int_equal(back.count, ts.count);
  for (size_t i = 0; i < ts.count; i++)
    for (int d = 0; d < 2; d++) assert_int_equal(back.items[i].shape[d], ts.items[i].shape[d]);
  free(buf);
  cli_tensors_free(&back);
  const int64_t over[2] = {((int64_t)1 << 53) + 1, 0};
  assert_int_equal(cli_tensors_add(&ts, "over", NG_F32, 2, over, NULL), 0);
  buf = NULL;
  assert_int_equal(cli_st_serialize(&ts, NULL, &buf, &len, err, sizeof err), CLI_USAGE);
  assert_null(buf);
  assert_non_null(strstr(err, "'over'"));
  cli_tensors_free(&ts);
}

/* ---- usage errors ------------------------------------------------------------------------------ */
static void test_usage_errors(void **state) {
  (void)state;
  /* a valid input for the option cases */
  cli_tensors in = {0};
  const int64_t xs[2] = {4, 16}, ws[1] = {16};
  float v[64];
  for (int i = 0; i < 64; i++) v[i] = (float)(i % 7) - 3.0f;
  ng_cli_add(&in, "x", NG_BF16, 2, xs, v);
  ng_cli_add(&in, "weight", NG_F32, 1, ws, v);
  ng_cli_add(&in, "dy", NG_BF16, 2, xs, v);
  char *good = ng_cli_path_in(in_dir, "good.safetensors");
  ng_cli_write(good, &in);
  cli_tensors_free(&in);
  char *outp = ng_cli_path_in(out_dir, "out.safetensors");

#define RUN(...) ((const char *const[]){"run", __VA_ARGS__, NULL})
  expect_failure(RUN("nosuchop", "--in", good, "--out", outp), 2, "unknown op 'nosuchop'");
  expect_failure(RUN("--in", good, "--out", outp), 2, "missing OP");
  expect_failure(RUN("rmsnorm", "--in", good, "--out", outp, "--bogus"), 2,
                 "unknown option '--bogus'");
  expect_failure(RUN("rmsnorm", "--in", good, "--out", outp, "extra"), 2,
                 "unexpected argument 'extra'");
  expect_failure(RUN("rmsnorm", "--out", outp), 2, "missing --in");
  expect_failure(RUN("rmsnorm", "--in", good), 2, "missing --out");
  expect_failure(RUN("rmsnorm", "--out", outp, "--in"), 2, "--in needs a value");
  expect_failure(RUN("rmsnorm", "--in", ng_cli_path_in(in_dir, "nope.safetensors"), "--out",
                     outp),
                 2, "cannot open");
  expect_failure(RUN("rmsnorm", "--in", in_dir, "--out", outp), 2, "not a regular file");
  const char *bad_numbers[][2] = {
      {"--eps", "abc"},      {"--eps", "1e-6x"},   {"--eps", ""},         {"--eps", "nan"},
      {"--eps", "-1"},       {"--eps", "1e999"},   {"--eps", " 1"},       {"--eps", "1e-50"},
      {"--offset", "inf"},   {"--offset", "0x"},   {"--groups", "0"},     {"--groups", "2.5"},
      {"--groups", "99999999999999999999"},        {"--ignore-index", "1e3"},
      {"--label-smoothing", "1.5"},                {"--softcap", "-1"},
      {"--lse-square-scale", "NaN"},               {"--grad-output", "x"},
      {"--casting-mode", "mistral"},               {"--reduction", "avg"}};
  for (size_t i = 0; i < NG_ARRAY_LEN(bad_numbers); i++)
    expect_failure(RUN("rmsnorm", "--in", good, "--out", outp, bad_numbers[i][0],
                       bad_numbers[i][1]),
                   2, bad_numbers[i][0]);
  expect_failure(RUN("rmsnorm", "--in", good, "--out", outp, "--eps=abc"), 2, "--eps");
  expect_failure(RUN("rmsnorm", "--in", good, "--out", outp, "--freeze-weight=yes"), 2,
                 "takes no value");

  /* input tensors */
  struct {
    const char *label, *needle;
    const char *names[3];
    ng_dtype dts[3];
    int ndims[3];
    int64_t shapes[3][3];
  } cases[] = {
      {"I32 x", "tensor 'x' has dtype I32", {"x", NULL, NULL}, {NG_I32}, {2}, {{4, 16}}},
      {"I64 weight", "tensor 'weight' has dtype I64", {"x", "weight", NULL}, {NG_F32, NG_I64},
       {2, 1}, {{4, 16}, {16}}},
      {"short weight", "tensor 'weight' has shape [15]", {"x", "weight", NULL}, {NG_F32, NG_F32},
       {2, 1}, {{4, 16}, {15}}},
      {"2-D weight", "tensor 'weight' has shape [1, 16]", {"x", "weight", NULL},
       {NG_F32, NG_F32}, {2, 2}, {{4, 16}, {1, 16}}},
      {"dy shape", "tensor 'dy' has shape [4, 15]", {"x", "weight", "dy"},
       {NG_F32, NG_F32, NG_F32}, {2, 1, 2}, {{4, 16}, {16}, {4, 15}}},
      {"dy rank", "tensor 'dy' has shape [64]", {"x", "dy", NULL}, {NG_F32, NG_F32}, {2, 1},
       {{4, 16}, {64}}},
      {"dy dtype", "tensor 'dy' has dtype BF16", {"x", "dy", NULL}, {NG_F32, NG_BF16}, {2, 2},
       {{4, 16}, {4, 16}}},
      {"missing x", "missing required tensor 'x'", {"weight", "dy", NULL}, {NG_F32, NG_F32},
       {1, 2}, {{16}, {4, 16}}},
      {"unexpected name", "unexpected tensor 'dY'", {"x", "dY", NULL}, {NG_F32, NG_F32}, {2, 2},
       {{4, 16}, {4, 16}}},
      {"scalar x", "scalar", {"x", NULL, NULL}, {NG_F32}, {0}, {{0}}},
      {"empty x", "no elements", {"x", NULL, NULL}, {NG_F32}, {2}, {{0, 16}}},
      {"zero N", "no elements", {"x", NULL, NULL}, {NG_F32}, {2}, {{4, 0}}},
  };
  char *bad = ng_cli_path_in(in_dir, "badin.safetensors");
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    cli_tensors t = {0};
    for (int k = 0; k < 3 && cases[i].names[k]; k++)
      assert_int_equal(cli_tensors_add(&t, cases[i].names[k], cases[i].dts[k], cases[i].ndims[k],
                                       cases[i].shapes[k], NULL),
                       0);
    ng_cli_write(bad, &t);
    cli_tensors_free(&t);
    expect_failure(RUN("rmsnorm", "--in", bad, "--out", outp), 2, cases[i].needle);
  }

  /* devices */
  expect_failure(RUN("rmsnorm", "--in", good, "--out", outp, "--device", "99"), 2,
                 "no device matches");
  expect_failure(RUN("rmsnorm", "--in", good, "--out", outp, "--device", "no-such-device-xyz"),
                 2, "no device matches");
  const char *env_dev[] = {"NORMGRAD_DEVICE=no-such-device-xyz", NULL};
  expect_failure_env(RUN("rmsnorm", "--in", good, "--out", outp), env_dev, 2,
                     "no device matches");
  /* no OpenCL platform at all (an empty ICD directory): a device failure, exit 3 */
  char *empty = ng_cli_path_in(ng_cli_dir, "no-icds");
  mkdir(empty, 0755);
  char icd[700];
  snprintf(icd, sizeof icd, "OCL_ICD_VENDORS=%s", empty);
  const char *env_none[] = {icd, "NORMGRAD_DEVICE=", NULL};
  expect_failure_env(RUN("rmsnorm", "--in", good, "--out", outp), env_none, 3,
                     "cannot open an OpenCL device");
  const char *dev_none[] = {"devices", NULL};
  expect_failure_env(dev_none, env_none, 3, "no OpenCL device");

  /* outputs that cannot be written */
  expect_failure(RUN("rmsnorm", "--in", good, "--out",
                     ng_cli_path_in(out_dir, "nodir/out.safetensors")),
                 2, "cannot create a temporary file");
  clear_dir(out_dir);
  char *sub = ng_cli_path_in(out_dir, "adir");
  mkdir(sub, 0755);
  ng_cli_proc p = ng_cli_run(RUN("rmsnorm", "--in", good, "--out", sub));
  assert_int_equal(p.code, 2);
  assert_true(ng_cli_contains_nocase(p.err, "cannot write"));
  ng_cli_proc_free(&p);
  assert_int_equal(dir_entries(out_dir, NULL, 0), 1); /* only adir: no temporary left */
  assert_int_equal(dir_entries(sub, NULL, 0), 0);
  rmdir(sub);
#undef RUN

  /* top level and the other subcommands */
  expect_failure((const char *const[]){"frobnicate", NULL}, 2, "unknown subcommand");
  expect_failure((const char *const[]){"--frobnicate", NULL}, 2, "unknown option");
  expect_failure((const char *const[]){"devices", "--csv", NULL}, 2, "unknown option '--csv'");
  expect_failure((const char *const[]){"inspect", NULL}, 2, "missing FILE");
  expect_failure((const char *const[]){"bench", "rmsnorm", "--hidden", "64", "--dtype", "bf16",
                                       NULL},
                 2, "missing --rows");
  expect_failure((const char *const[]){"bench", "rmsnorm", "--rows", "0", "--hidden", "64",
                                       "--dtype", "bf16", NULL},
                 2, "--rows");
  expect_failure((const char *const[]){"bench", "rmsnorm", "--rows", "4", "--hidden", "64",
                                       "--dtype", "f64", NULL},
                 2, "--dtype");
  expect_failure((const char *const[]){"bench", "nosuchop", "--rows", "4", "--hidden", "64",
                                       "--dtype", "f32", NULL},
                 2, "unknown op 'nosuchop'");
  expect_failure((const char *const[]){"bench", "rmsnorm", "--rows", "4", "--hidden", "64",
                                       "--dtype", "f32", "--pass", "sideways", NULL},
                 2, "unknown --pass 'sideways'");
  expect_failure((const char *const[]){"bench", "rmsnorm", "--rows", "4", "--hidden", "64",
                                       "--dtype", "f32", "--in", "x", NULL},
                 2, "unknown option '--in'");
  ng_cli_proc none = ng_cli_run((const char *const[]){NULL});
  assert_int_equal(none.code, 2);
  assert_true(strstr(none.err, "usage") != NULL);
  ng_cli_proc_free(&none);
}

/* ---- more bad input (docs/errors.md, issue 7) ----------------------------------------------------- */
static void test_more_usage_errors(void **state) {
  (void)state;
  cli_tensors in = {0};
  const int64_t xs[2] = {2, 8};
  float v[16];
  for (int i = 0; i < 16; i++) v[i] = (float)i - 7.0f;
  ng_cli_add(&in, "x", NG_F32, 2, xs, v);
  char *good = ng_cli_path_in(in_dir, "good2.safetensors");
  ng_cli_write(good, &in);
  cli_tensors_free(&in);
  char *outp = ng_cli_path_in(out_dir, "out.safetensors");
#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
  /* subcommands other than run */
  expect_failure(ARGS("inspect", "--bogus", good), 2, "inspect: unknown option '--bogus'");
  expect_failure(ARGS("inspect", good, "second"), 2, "unexpected argument 'second'");
  expect_failure(ARGS("inspect", "/dev/null"), 2, "not a regular file");
  expect_failure(ARGS("help", "frobnicate"), 2, "unknown subcommand 'frobnicate'");
  expect_failure(ARGS("help", "run", "extra"), 2, "unexpected argument 'extra'");
  expect_failure(ARGS("devices", "extra"), 2, "devices: unexpected argument 'extra'");
  expect_failure(ARGS("devices", "--json=yes"), 2, "takes no value");
  /* run */
  expect_failure(ARGS("run", "rmsnorm", "--in", good, "--out", outp, "-x"), 2,
                 "unknown option '-x'");
  expect_failure(ARGS("run", "rmsnorm", "--in", good, "--out", outp, "--", "--eps"), 2,
                 "unexpected argument '--eps'");
  expect_failure(ARGS("run", "rmsnorm", "--in", good, "--out", ""), 2, "names a directory");
  /* bench: sizes, a device that is not there, a buffer beyond the device's largest allocation */
  expect_failure(ARGS("bench", "rmsnorm", "--rows", "2147483648", "--hidden", "64", "--dtype",
                      "f32"),
                 2, "--rows: 2147483648 is out of range");
  expect_failure(ARGS("bench", "rmsnorm", "--rows", "8", "--hidden", "-5", "--dtype", "f32"), 2,
                 "--hidden: -5 is out of range");
  expect_failure(ARGS("bench", "rmsnorm", "--rows", "8", "--hidden", "64"), 2, "missing --dtype");
  expect_failure(ARGS("bench", "rmsnorm", "--rows", "8", "--hidden", "64", "--dtype", "f32",
                      "--json=1"),
                 2, "takes no value");
  expect_failure(ARGS("bench", "rmsnorm", "--rows", "8", "--hidden", "64", "--dtype", "f32",
                      "--device", "99"),
                 2, "no device matches");
  const char *env_dev[] = {"NORMGRAD_DEVICE=nonexistent", NULL};
  expect_failure_env(ARGS("bench", "rmsnorm", "--rows", "8", "--hidden", "64", "--dtype", "f32"),
                     env_dev, 2, "no device matches --device/NORMGRAD_DEVICE 'nonexistent'");
  /* rows·N = 2^40 bf16 elements (2 TiB) and (2^31 − 1)² f32 elements (bytes beyond 2^63):
   * refused before any host or device memory is filled, as a device failure */
  expect_failure(ARGS("bench", "rmsnorm", "--rows", "1048576", "--hidden", "1048576", "--dtype",
                      "bf16"),
                 3, "exceeds the device's largest allocation");
  expect_failure(ARGS("bench", "rmsnorm", "--rows", "2147483647", "--hidden", "2147483647",
                      "--dtype", "f32"),
                 3, "exceeds the device's largest allocation");
#undef ARGS
}

/* ---- help, version, devices, bench ---------------------------------------------------------------- */
static void test_help_and_devices(void **state) {
  (void)state;
  /* every subcommand, every way of asking: SUB --help, SUB -h, SUB ARG --help, help SUB,
   * --help SUB */
  const char *subs[] = {"devices", "run", "bench", "inspect", "cache", "help"};
  for (size_t i = 0; i < NG_ARRAY_LEN(subs); i++) {
    char want[64];
    snprintf(want, sizeof want, "usage: normgrad-cli %s", subs[i]);
    const char *const asks[][4] = {{subs[i], "--help", NULL},
                                   {subs[i], "-h", NULL},
                                   {subs[i], "x", "--help", NULL},
                                   {"help", subs[i], NULL},
                                   {"--help", subs[i], NULL}};
    for (size_t k = 0; k < NG_ARRAY_LEN(asks); k++) {
      ng_cli_proc p = ng_cli_run(asks[k]);
      if (p.code != 0 || !strstr(p.out, want) || *p.err)
        fail_msg("%s %s %s: exit %d, stdout: %s, stderr: %s", asks[k][0], asks[k][1],
                 asks[k][2] ? asks[k][2] : "", p.code, p.out, p.err);
      ng_cli_proc_free(&p);
    }
  }
  ng_cli_proc p = ng_cli_run((const char *const[]){"--help", NULL});
  assert_int_equal(p.code, 0);
  assert_non_null(strstr(p.out, "rmsnorm"));
  assert_non_null(strstr(p.out, "inspect"));
  ng_cli_proc_free(&p);
  p = ng_cli_run((const char *const[]){"--version", NULL});
  assert_int_equal(p.code, 0);
  assert_non_null(strstr(p.out, NG_VERSION_STRING));
  ng_cli_proc_free(&p);

  p = ng_cli_run((const char *const[]){"devices", "--json", NULL});
  assert_int_equal(p.code, 0);
  cJSON *j = cJSON_Parse(p.out);
  if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) < 1) fail_msg("devices --json: %s", p.out);
  int defaults = 0, idx = 0;
  for (cJSON *d = j->child; d; d = d->next, idx++) {
    const char *fields[] = {"name", "vendor", "type", "platform", "driver"};
    for (size_t k = 0; k < NG_ARRAY_LEN(fields); k++)
      assert_true(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(d, fields[k])));
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(d, "index")->valuedouble, idx);
    assert_true(cJSON_GetObjectItemCaseSensitive(d, "compute_units")->valuedouble >= 1);
    assert_true(cJSON_GetObjectItemCaseSensitive(d, "global_mem_bytes")->valuedouble > 0);
    defaults += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "default"));
  }
  assert_int_equal(defaults, 1);
  cJSON_Delete(j);
  ng_cli_proc_free(&p);
  p = ng_cli_run((const char *const[]){"devices", NULL});
  assert_int_equal(p.code, 0);
  assert_non_null(strstr(p.out, "compute units"));
  ng_cli_proc_free(&p);
}

static void check_bench_json(const char *const *args, const char *pass, bool frozen) {
  ng_cli_proc p = ng_cli_run(args);
  if (p.code != 0) fail_msg("bench: exit %d: %s", p.code, p.err);
  if (*p.err) fail_msg("bench --json wrote on stderr: '%s'", p.err); /* no progress line */
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithOpts(p.out, &end, 0);
  if (!cJSON_IsObject(j)) fail_msg("bench --json did not print a JSON object: %s", p.out);
  for (; *end; end++)
    if (*end != '\n' && *end != ' ') fail_msg("bench --json printed more than one object");
  const char *nums[] = {"rows",  "hidden",    "bytes",          "median_ms",
                        "gbps",  "copy_gbps", "copy_same_gbps", "ratio",
                        "ratio_same"};
  for (size_t k = 0; k < NG_ARRAY_LEN(nums); k++) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(j, nums[k]);
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0)) fail_msg("bench: field %s: %s", nums[k], p.out);
  }
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(j, "rows")->valuedouble, 64);
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(j, "hidden")->valuedouble, 512);
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "op")->valuestring, "rmsnorm");
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "pass")->valuestring, pass);
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "dtype")->valuestring, "bf16");
  assert_true(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "device")));
  assert_true(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(j, "frozen_bias")));
  assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "frozen")), frozen);
  /* bytes: backward = dy + x + dx (bf16) + weight (+ dweight) (f32) + rstd (f32) */
  const double x = 64.0 * 512 * 2, w = 512.0 * 4, r = 64.0 * 4;
  const double want = !strcmp(pass, "forward") ? 2 * x + w + r : 3 * x + w + r + (frozen ? 0 : w);
  assert_true(fabs(cJSON_GetObjectItemCaseSensitive(j, "bytes")->valuedouble - want) < 0.5);
  double g = cJSON_GetObjectItemCaseSensitive(j, "gbps")->valuedouble;
  double c = cJSON_GetObjectItemCaseSensitive(j, "copy_gbps")->valuedouble;
  assert_true(fabs(cJSON_GetObjectItemCaseSensitive(j, "ratio")->valuedouble - g / c) <=
              1e-9 * (g / c));
  double cs = cJSON_GetObjectItemCaseSensitive(j, "copy_same_gbps")->valuedouble;
  assert_true(fabs(cJSON_GetObjectItemCaseSensitive(j, "ratio_same")->valuedouble - g / cs) <=
              1e-9 * (g / cs));
  cJSON_Delete(j);
  ng_cli_proc_free(&p);
}

static void test_bench_json(void **state) {
  (void)state;
  check_bench_json((const char *const[]){"bench", "rmsnorm", "--rows", "64", "--hidden", "512",
                                         "--dtype", "bf16", "--json", NULL},
                   "backward", false);
  check_bench_json((const char *const[]){"bench", "rmsnorm", "--rows", "64", "--hidden", "512",
                                         "--dtype", "bf16", "--json", "--freeze-weight",
                                         "--pass", "forward", NULL},
                   "forward", true);
}

/* ---- tune and the tables ------------------------------------------------------------------ */
/* `tune --json`'s object for one pass, run with the cache folder `dir` (parsed; the caller
 * deletes it). */
static cJSON *tune_json(const char *dir, const char *pass) {
  char env[400];
  snprintf(env, sizeof env, "NORMGRAD_CACHE_DIR=%s", dir);
  const char *const args[] = {"tune",   "rmsnorm", "--hidden",  "1000", "--total", "32768",
                              "--pass", pass,      "--dry-run", "--json", NULL};
  ng_cli_proc p = ng_cli_run_env(args, (const char *const[]){env, NULL});
  if (p.code != 0) fail_msg("tune --pass %s: exit %d: %s", pass, p.code, p.err);
  cJSON *j = cJSON_Parse(p.out);
  if (!cJSON_IsObject(j)) fail_msg("tune --pass %s: not one JSON object: %s", pass, p.out);
  ng_cli_proc_free(&p);
  return j;
}

/* The launch the tables give a pass today (here a tuning.txt line of an earlier run) is one of
 * tune's candidates, reported as "table" with its time, so that a line slower than what it
 * replaces is never stored (the scans' default is the rules' launch); none without a line. A
 * frozen pass's line gives its grid. */
static void test_tune_tables_candidate(void **state) {
  (void)state;
  char with[320], without[320];
  snprintf(with, sizeof with, "%s/tune-lines", ng_cli_dir);
  snprintf(without, sizeof without, "%s/tune-none", ng_cli_dir);
  ng_context *ctx = NULL;
  NG_OK(ng_context_create_default(&ctx));
  NG_OK(ng_context_set_cache_dir(ctx, with));
  unsigned v[7] = {0};
  v[NG_TUNE_GROUPS] = 5;
  NG_OK(ng_tuning_store_dtype(ctx, "rmsnorm.fwd", NG_BF16, 1000, v, "test"));
  v[NG_TUNE_GROUPS] = 7;
  NG_OK(ng_tuning_store_dtype(ctx, "rmsnorm.bwd_frozen", NG_BF16, 1000, v, "test"));
  ng_context_release(ctx);
  const char *passes[] = {"forward", "frozen"};
  const char *lines[] = {"wg=0 reg=0 groups=5 vec=0 prefetch=0",
                         "wg=0 reg=0 groups=7 vec=0 prefetch=0"};
  for (int i = 0; i < 2; i++) {
    cJSON *a = tune_json(with, passes[i]), *b = tune_json(without, passes[i]);
    const cJSON *t = cJSON_GetObjectItem(a, "table"), *ms = cJSON_GetObjectItem(a, "table_ms");
    if (!cJSON_IsString(t) || strcmp(t->valuestring, lines[i]) || !cJSON_IsNumber(ms) ||
        !(ms->valuedouble > 0))
      fail_msg("%s: the line's launch is not reported: %s", passes[i], cJSON_PrintUnformatted(a));
    if (cJSON_GetObjectItem(a, "candidates")->valueint !=
        cJSON_GetObjectItem(b, "candidates")->valueint + 1)
      fail_msg("%s: one candidate more with the line: %s / %s", passes[i],
               cJSON_PrintUnformatted(a), cJSON_PrintUnformatted(b));
    if (!cJSON_IsNull(cJSON_GetObjectItem(b, "table")) ||
        !cJSON_IsNull(cJSON_GetObjectItem(b, "table_ms")) ||
        !cJSON_IsFalse(cJSON_GetObjectItem(b, "table_won")))
      fail_msg("%s: a table without a line: %s", passes[i], cJSON_PrintUnformatted(b));
    /* the tables' launch winning stores nothing: what it stores is another launch */
    const cJSON *won = cJSON_GetObjectItem(a, "table_won");
    if (!cJSON_IsBool(won) ||
        (cJSON_IsTrue(won) && strcmp(cJSON_GetObjectItem(a, "confirmed")->valuestring, "default")))
      fail_msg("%s: table_won: %s", passes[i], cJSON_PrintUnformatted(a));
    cJSON_Delete(a);
    cJSON_Delete(b);
  }
}

/* ---- exit codes (docs/cli.md): the same rules in every subcommand ------------------------ */
static void expect_code(const char *const *args, int code, const char *needle) {
  ng_cli_proc p = ng_cli_run(args);
  char what[512];
  describe_args(args, what, sizeof what);
  if (p.code != code || !strstr(p.err, needle) || strncmp(p.err, "normgrad-cli: ", 14) != 0)
    fail_msg("`%s`: exit %d (expected %d), stderr: %s", what, p.code, code, p.err);
  ng_cli_proc_free(&p);
}

static void test_exit_codes(void **state) {
  (void)state;
  /* an unknown option is a usage error (2) in every subcommand */
  const char *subs[] = {"devices", "run", "bench", "inspect", "cache"};
  for (size_t i = 0; i < NG_ARRAY_LEN(subs); i++)
    expect_code((const char *const[]){subs[i], "--no-such-option", NULL}, 2, "--no-such-option");
  expect_code((const char *const[]){"help", "--no-such-option", NULL}, 2, "--no-such-option");
  expect_code((const char *const[]){"--help", "frobnicate", NULL}, 2, "unknown subcommand");
  expect_code((const char *const[]){"--help", "run", "extra", NULL}, 2, "unexpected argument");
  expect_code((const char *const[]){"--version", "extra", NULL}, 2, "unexpected argument");
  /* stdout that cannot be written is a failure (2), not a silent success */
  const char *const writes[][3] = {{"--version", NULL}, {"--help", NULL}, {"help", "run", NULL},
                                   {"run", "--help", NULL}, {"devices", NULL}};
  for (size_t i = 0; i < NG_ARRAY_LEN(writes); i++) {
    ng_cli_proc p = ng_cli_run_to(writes[i], "/dev/full");
    if (p.code != 2 || !strstr(p.err, "cannot write stdout"))
      fail_msg("`%s` into /dev/full: exit %d, stderr: %s", writes[i][0], p.code, p.err);
    ng_cli_proc_free(&p);
  }
}

/* ---- the progress line of bench: on a terminal only, erased at the end, never with --json -- */
/* The text after the last '\r' and the one before it: the line must end erased, "\r   \r". */
static bool ends_erased(const char *t) {
  const size_t n = strlen(t);
  if (n < 2 || t[n - 1] != '\r') return false;
  size_t i = n - 1;
  while (i > 0 && t[i - 1] == ' ') i--;
  return i > 0 && i < n - 1 && t[i - 1] == '\r';
}

static void test_progress_line(void **state) {
  (void)state;
  const char *const args[] = {"bench",   "rmsnorm", "--rows", "64",      "--hidden", "512",
                              "--dtype", "bf16",    "--pass", "forward", NULL};
  /* stderr on a terminal: the line shows each phase, is redrawn in place, and is erased */
  ng_cli_proc p = ng_cli_run_tty(args);
  if (p.code != 0) fail_msg("bench on a tty: exit %d: %s", p.code, p.err);
  if (!strstr(p.err, "bench rmsnorm forward: timing") || !strstr(p.err, "bench: copy bandwidth"))
    fail_msg("no progress line on the terminal: '%s'", p.err);
  if (strchr(p.err, '\n')) fail_msg("the progress line printed a newline: '%s'", p.err);
  if (!ends_erased(p.err)) fail_msg("the progress line was not erased: '%s'", p.err);
  if (!strstr(p.out, "median") || strchr(p.out, '\r'))
    fail_msg("stdout of bench on a tty: '%s'", p.out);
  ng_cli_proc_free(&p);
  /* --json: nothing on the terminal, exactly one JSON object on stdout */
  const char *const json_args[] = {"bench",  "rmsnorm", "--rows",  "64",     "--hidden", "512",
                                   "--dtype", "bf16",   "--pass", "forward", "--json",   NULL};
  p = ng_cli_run_tty(json_args);
  if (p.code != 0 || *p.err) fail_msg("bench --json on a tty: exit %d, stderr '%s'", p.code, p.err);
  cJSON *j = cJSON_Parse(p.out);
  if (!cJSON_IsObject(j)) fail_msg("bench --json on a tty: stdout is not one object: %s", p.out);
  cJSON_Delete(j);
  ng_cli_proc_free(&p);
  /* not a terminal (a file here; test_bench_json checks the same of every --json run) */
  p = ng_cli_run(args);
  if (p.code != 0 || strchr(p.err, '\r') || strstr(p.err, "timing"))
    fail_msg("bench into a file: exit %d, stderr '%s'", p.code, p.err);
  ng_cli_proc_free(&p);
}

/* ---- setup ---------------------------------------------------------------------------------------- */
int main(void) {
  if (ng_cli_test_init("cli")) return 1;
  snprintf(in_dir, sizeof in_dir, "%s/in", ng_cli_dir);
  snprintf(out_dir, sizeof out_dir, "%s/out", ng_cli_dir);
  mkdir(in_dir, 0755);
  mkdir(out_dir, 0755);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_malformed_buffers),
      cmocka_unit_test(test_truncations_and_corruptions),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_help_and_devices),
      cmocka_unit_test(test_malformed_files_cli),
      cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_more_usage_errors),
      cmocka_unit_test(test_rmsnorm_bf16_gemma),
      cmocka_unit_test(test_rmsnorm_f32_none),
      cmocka_unit_test(test_rmsnorm_no_weight),
      cmocka_unit_test(test_example_file),
      cmocka_unit_test(test_output_replacement),
      cmocka_unit_test(test_bench_json),
      cmocka_unit_test(test_tune_tables_candidate),
      cmocka_unit_test(test_exit_codes),
      cmocka_unit_test(test_progress_line),
  };
  int failed = NG_RUN_GROUP_TESTS(tests, NULL, NULL);
  ng_cli_test_cleanup();
  return failed;
}
