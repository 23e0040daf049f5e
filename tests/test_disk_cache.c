/* On-disk program cache: hit/miss counters, loaded kernels giving the same bits as source-built
 * ones, corrupt / truncated / foreign / colliding entries rebuilt and replaced, entries the
 * driver refuses, a folder that cannot be written, the cache off, two processes racing on one
 * entry, LRU eviction under the size bound, listing and clearing, and ng_prebuild.
 *
 * Every context here gets its own fresh folder, so each test starts with misses; the process's
 * shared test context runs with NORMGRAD_CACHE_DIR=off. */
#include "ng_internal.h"
#include "ng_test.h"
#include "ref_norms.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROWS 5
#define N 64
#define CNT (ROWS * N)

/* ---- files and folders ----------------------------------------------------------------------- */
static char *fresh_dir(void) {
  char *t = strdup("/tmp/ng-disk-cache-XXXXXX");
  assert_non_null(t);
  assert_non_null(mkdtemp(t));
  return t;
}

/* Files in `dir` whose name starts with `prefix` ("" = all). */
static int count_files(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  for (struct dirent *de; (de = readdir(d));)
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
        strncmp(de->d_name, prefix, strlen(prefix)) == 0)
      n++;
  closedir(d);
  return n;
}

/* ---- listing --------------------------------------------------------------------------------- */
typedef struct listed {
  char path[512], program[32], options[512];
  int valid;
  uint64_t bytes;
} listed;
typedef struct listing {
  listed e[256];
  int n;
} listing;

static int collect(const ng_cache_entry *e, void *user) {
  listing *l = user;
  if (l->n == 256) return 1;
  listed *o = &l->e[l->n++];
  snprintf(o->path, sizeof o->path, "%s", e->path);
  snprintf(o->program, sizeof o->program, "%s", e->program);
  snprintf(o->options, sizeof o->options, "%s", e->options);
  o->valid = e->valid;
  o->bytes = e->bytes;
  return 0;
}

static listing *list_dir(const char *dir) {
  listing *l = calloc(1, sizeof *l);
  assert_non_null(l);
  NG_OK(ng_cache_list(dir, collect, l));
  return l;
}

/* The entry of the forward program for x dtype `xd` (f32 weight): its path, or NULL. */
static const listed *find_fwd(const listing *l, ng_dtype xd) {
  char want[64];
  snprintf(want, sizeof want, "-DDTYPE=%d -DW_DTYPE=0 -DHAS_W=1", (int)xd);
  for (int i = 0; i < l->n; i++)
    if (!strcmp(l->e[i].program, "rmsnorm") && strstr(l->e[i].options, want) &&
        !strstr(l->e[i].options, "COMPUTE_DW"))
      return &l->e[i];
  return NULL;
}

/* ---- running RMSNorm through a given context ---------------------------------------------------- */
typedef struct rms_out {
  float y[CNT], rstd[ROWS], dx[CNT], dw[N];
} rms_out;

static bool close_to(ng_dtype dt, const float *got, const double *ref, size_t n, double rel,
                     double abs_extra, const char *what, char *err, size_t errlen) {
  ng_tol t = ng_tol_for(dt, ref, n, rel);
  t.rtol *= 2;
  t.atol += abs_extra;
  for (size_t i = 0; i < n; i++)
    if (!(fabs(got[i] - ref[i]) <= t.atol + t.rtol * fabs(ref[i]))) {
      snprintf(err, errlen, "%s[%zu] = %.9g, reference %.9g", what, i, (double)got[i], ref[i]);
      return false;
    }
  return true;
}

/* Forward (and with `bwd`, backward with dweight: 3 programs) of RMSNorm on fixed data with x
 * dtype `xd` and an f32 weight, checked against the double-precision reference. Returns false
 * with err filled on any failure (usable outside cmocka, in the race children). */
static bool run_rms(ng_context *ctx, ng_dtype xd, bool bwd, rms_out *o, char *err, size_t errlen) {
  ng_test_env *e = ng_test_env_get();
  ng_rng rng;
  ng_rng_seed(&rng, 42);
  float *x = ng_test_random(&rng, xd, CNT, 0.3, 1.5);
  float *dy = ng_test_random(&rng, xd, CNT, 0.0, 1.0);
  float *w = ng_test_random(&rng, NG_F32, N, 1.0, 0.5);
  cl_mem bx = ng_test_upload(xd, x, CNT, 0, 0), bw = ng_test_upload(NG_F32, w, N, 0, 0);
  cl_mem by = ng_test_upload(xd, NULL, CNT, 0, 0), br = ng_test_upload(NG_F32, NULL, ROWS, 0, 0);
  cl_mem bdy = ng_test_upload(xd, dy, CNT, 0, 0), bdx = ng_test_upload(xd, NULL, CNT, 0, 0);
  cl_mem bdw = ng_test_upload(NG_F32, NULL, N, 0, 0);
  ng_rmsnorm_params p = {ROWS, N, 1e-6f, 0.0f, NG_CAST_LLAMA};
  ng_tensor tw = ng_tensor_of(bw, 0, NG_F32);
  ng_status s = ng_rmsnorm_forward(ctx, e->queue, &p, ng_tensor_of(bx, 0, xd), tw,
                                   ng_tensor_of(by, 0, xd), ng_tensor_of(br, 0, NG_F32), 0, NULL,
                                   NULL);
  if (s == NG_SUCCESS && bwd)
    s = ng_rmsnorm_backward(ctx, e->queue, &p, ng_tensor_of(bdy, 0, xd), ng_tensor_of(bx, 0, xd),
                            tw, ng_tensor_of(br, 0, NG_F32), ng_tensor_of(bdx, 0, xd),
                            ng_tensor_of(bdw, 0, NG_F32), 0, ng_tensor_none(), 0, NULL, NULL);
  bool ok = s == NG_SUCCESS;
  if (!ok) snprintf(err, errlen, "%s: %s", ng_status_name(s), ng_last_error_detail());
  memset(o, 0, sizeof *o);
  if (ok) {
    clFinish(e->queue);
    ng_test_download(by, xd, 0, CNT, o->y);
    ng_test_download(br, NG_F32, 0, ROWS, o->rstd);
    if (bwd) {
      ng_test_download(bdx, xd, 0, CNT, o->dx);
      ng_test_download(bdw, NG_F32, 0, N, o->dw);
    }
    ref_rmsnorm rp = {ROWS, N, 1e-6f, 0.0f, NG_CAST_LLAMA, xd, NG_F32, w};
    double y_ref[CNT], dx_ref[CNT], dw_ref[N], dw_scale[N], dx_scale = 0;
    float rstd_ref[ROWS];
    ref_rmsnorm_forward(&rp, x, y_ref, rstd_ref);
    ok = close_to(xd, o->y, y_ref, CNT, 1e-6, 0, "y", err, errlen);
    if (ok && bwd) {
      ref_rmsnorm_backward(&rp, dy, x, o->rstd, dx_ref, dw_ref, NULL, dw_scale, &dx_scale);
      ok = close_to(xd, o->dx, dx_ref, CNT, 0, 4e-6 * dx_scale, "dx", err, errlen);
      double mx = 0;
      for (int j = 0; j < N; j++) mx = fmax(mx, dw_scale[j]);
      if (ok) ok = close_to(NG_F32, o->dw, dw_ref, N, 0, mx / 128, "dweight", err, errlen);
    }
  }
  cl_mem ms[] = {bx, bw, by, br, bdy, bdx, bdw};
  for (size_t i = 0; i < NG_ARRAY_LEN(ms); i++) clReleaseMemObject(ms[i]);
  free(x), free(dy), free(w);
  return ok;
}

static void run_ok(ng_context *ctx, ng_dtype xd, bool bwd, rms_out *o) {
  char err[512] = "";
  if (!run_rms(ctx, xd, bwd, o, err, sizeof err)) fail_msg("rmsnorm through the cache: %s", err);
}

/* A context on the shared device using folder `dir` (NULL = cache off). */
static ng_context *ctx_with(const char *dir) {
  ng_test_env *e = ng_test_env_get();
  ng_context *c = NULL;
  NG_OK(ng_context_create(e->cl_ctx, e->device, &c));
  NG_OK(ng_context_set_cache_dir(c, dir));
  /* program counts below include the separate dW reduction, whatever the device's default */
  NG_OK(ng_context_override(c, NG_TUNE_FUSED_REDUCE, 1));
  return c;
}

static ng_context_stats stats_of(ng_context *c) {
  ng_context_stats st;
  NG_OK(ng_context_get_stats(c, &st));
  return st;
}

#define EXPECT_STATS(c, built, hits, misses, stores, rejects, errors)                           \
  do {                                                                                           \
    ng_context_stats st_ = stats_of(c);                                                          \
    if (st_.programs_built != (built) || st_.disk_hits != (hits) || st_.disk_misses != (misses) || \
        st_.disk_stores != (stores) || st_.disk_rejects != (rejects) ||                          \
        st_.disk_errors != (errors))                                                             \
      fail_msg("stats built %llu hits %llu misses %llu stores %llu rejects %llu errors %llu, "  \
               "expected %d %d %d %d %d %d",                                                     \
               (unsigned long long)st_.programs_built, (unsigned long long)st_.disk_hits,        \
               (unsigned long long)st_.disk_misses, (unsigned long long)st_.disk_stores,         \
               (unsigned long long)st_.disk_rejects, (unsigned long long)st_.disk_errors,        \
               (int)(built), (int)(hits), (int)(misses), (int)(stores), (int)(rejects),          \
               (int)(errors));                                                                   \
  } while (0)

/* ---- tests ------------------------------------------------------------------------------------- */

/* A first context builds and stores; a second loads all three programs and gets the same bits. */
static void test_hit_miss(void **state) {
  (void)state;
  char *dir = fresh_dir();
  static rms_out a, b;
  ng_context *c1 = ctx_with(dir);
  run_ok(c1, NG_F32, true, &a);
  EXPECT_STATS(c1, 3, 0, 3, 3, 0, 0);
  listing *l = list_dir(dir);
  assert_int_equal(l->n, 3);
  int reduce = 0;
  for (int i = 0; i < l->n; i++) {
    assert_true(l->e[i].valid);
    reduce += !strcmp(l->e[i].program, "reduce");
  }
  assert_int_equal(reduce, 1);
  assert_int_equal(count_files(dir, ".ngtmp-"), 0);
  free(l);

  ng_context *c2 = ctx_with(dir);
  run_ok(c2, NG_F32, true, &b);
  EXPECT_STATS(c2, 0, 3, 0, 0, 0, 0);
  assert_memory_equal(&a, &b, sizeof a); /* same binary, same bits */
  run_ok(c2, NG_F32, true, &b);          /* now served from memory */
  EXPECT_STATS(c2, 0, 3, 0, 0, 0, 0);
  assert_true(stats_of(c2).cache_hits >= 3);
  ng_context_release(c1);
  ng_context_release(c2);
  ng_test_remove_tree(dir);
  free(dir);
}

/* Damage the forward entry in each way; a fresh context must reject it, build from source, give
 * correct results and leave a valid entry that the next context loads. */
static void test_corrupt_and_truncated(void **state) {
  (void)state;
  char *dir = fresh_dir();
  static rms_out ref, got;
  ng_context *c = ctx_with(dir);
  run_ok(c, NG_F32, false, &ref);
  ng_context_release(c);
  listing *l = list_dir(dir);
  assert_int_equal(l->n, 1);
  char path[512];
  snprintf(path, sizeof path, "%s", l->e[0].path);
  free(l);
  size_t n = 0;
  unsigned char *good = (unsigned char *)ng_test_slurp(path, &n);
  assert_non_null(good);
  assert_true(n > 200);

  enum { FLIP_PAYLOAD, FLIP_PAYLOAD_END, FLIP_KEY, FLIP_LENGTH, HALF, HEADER_ONLY, SHORT_HEADER,
         EMPTY, EXTRA_BYTE, KINDS };
  for (int k = 0; k < KINDS; k++) {
    unsigned char *b = malloc(n + 1);
    memcpy(b, good, n);
    size_t len = n;
    switch (k) {
    case FLIP_PAYLOAD: b[n / 2 + 100] ^= 0x01; break;
    case FLIP_PAYLOAD_END: b[n - 1] ^= 0x80; break;
    case FLIP_KEY: b[45] ^= 0x20; break;
    case FLIP_LENGTH: b[16] ^= 0x01; break;
    case HALF: len = n / 2; break;
    case HEADER_ONLY: len = 40; break;
    case SHORT_HEADER: len = 39; break;
    case EMPTY: len = 0; break;
    case EXTRA_BYTE: b[n] = 0; len = n + 1; break;
    }
    ng_test_write(path, b, len);
    free(b);
    c = ctx_with(dir);
    run_ok(c, NG_F32, false, &got);
    EXPECT_STATS(c, 1, 0, 0, 1, 1, 0);
    assert_memory_equal(ref.y, got.y, sizeof ref.y);
    ng_context_release(c);
    l = list_dir(dir);
    assert_int_equal(l->n, 1);
    assert_true(l->e[0].valid); /* replaced */
    free(l);
  }
  c = ctx_with(dir);
  run_ok(c, NG_F32, false, &got);
  EXPECT_STATS(c, 0, 1, 0, 0, 0, 0);
  ng_context_release(c);
  free(good);
  ng_test_remove_tree(dir);
  free(dir);
}

/* Entries with consistent checksums but the wrong key: another driver version, another entry
 * format, and another program's entry under this program's name (a file-name collision). None
 * may be used; the collision case would give wrong bf16 results if it were. */
static void test_foreign_entries(void **state) {
  (void)state;
  char *dir = fresh_dir();
  static rms_out o;
  ng_context *c = ctx_with(dir);
  run_ok(c, NG_F32, false, &o);
  run_ok(c, NG_BF16, false, &o);
  ng_context_release(c);
  listing *l = list_dir(dir);
  assert_int_equal(l->n, 2);
  const listed *f32e = find_fwd(l, NG_F32), *bf16e = find_fwd(l, NG_BF16);
  assert_non_null(f32e);
  assert_non_null(bf16e);
  size_t n = 0;
  unsigned char *good = (unsigned char *)ng_test_slurp(f32e->path, &n);
  assert_non_null(good);
  const uint32_t klen = good[12] | good[13] << 8 | good[14] << 16 | (uint32_t)good[15] << 24;
  char *key = malloc(klen + 1);
  memcpy(key, good + 40, klen);
  key[klen] = '\0';
  const unsigned char *payload = good + 40 + klen;
  const size_t plen = n - 40 - klen;
  char *drv = strstr(key, "\ndriver: ");
  assert_non_null(drv);

  for (int k = 0; k < 2; k++) {
    /* k = 0: the same entry claiming another driver version; k = 1: a future entry format. */
    char *other = malloc(klen + 32);
    const size_t head = (size_t)(drv - key) + strlen("\ndriver: ");
    snprintf(other, klen + 32, "%.*sother-%s", (int)head, key, key + head);
    size_t flen = 0;
    unsigned char *forged = k == 0 ? ng_disk_encode(NG_DISK_FORMAT, other, payload, plen, &flen)
                                   : ng_disk_encode(NG_DISK_FORMAT + 1, key, payload, plen, &flen);
    assert_non_null(forged);
    ng_test_write(f32e->path, forged, flen);
    free(forged);
    free(other);
    c = ctx_with(dir);
    run_ok(c, NG_F32, false, &o);
    EXPECT_STATS(c, 1, 0, 0, 1, 1, 0);
    ng_context_release(c);
    size_t m = 0;
    unsigned char *now = (unsigned char *)ng_test_slurp(f32e->path, &m);
    assert_non_null(now);
    assert_true(m > 40 + klen && memcmp(now + 40, key, klen) == 0); /* the right key again */
    free(now);
  }

  /* The f32 program's (valid) entry under the bf16 program's file name. */
  unsigned char *f32bytes = (unsigned char *)ng_test_slurp(f32e->path, &n);
  assert_non_null(f32bytes);
  ng_test_write(bf16e->path, f32bytes, n);
  free(f32bytes);
  c = ctx_with(dir);
  run_ok(c, NG_BF16, false, &o); /* checks bf16 results against the reference */
  EXPECT_STATS(c, 1, 0, 0, 1, 1, 0);
  ng_context_release(c);
  free(key);
  free(good);
  free(l);
  ng_test_remove_tree(dir);
  free(dir);
}

/* Entries that clCreateProgramWithBinary or clBuildProgram refuse are rebuilt and replaced. */
static void test_driver_rejects(void **state) {
  (void)state;
  char *dir = fresh_dir();
  static rms_out ref, o;
  ng_context *c = ctx_with(dir);
  run_ok(c, NG_F32, false, &ref);
  ng_context_release(c);
  for (int stage = 1; stage <= 2; stage++) {
    ng_disk_test_fail_stage = stage;
    c = ctx_with(dir);
    run_ok(c, NG_F32, false, &o);
    ng_disk_test_fail_stage = 0;
    EXPECT_STATS(c, 1, 0, 0, 1, 1, 0);
    assert_memory_equal(ref.y, o.y, sizeof o.y);
    ng_context_release(c);
  }
  c = ctx_with(dir);
  run_ok(c, NG_F32, false, &o);
  EXPECT_STATS(c, 0, 1, 0, 0, 0, 0);
  ng_context_release(c);
  ng_test_remove_tree(dir);
  free(dir);
}

/* A folder that cannot be created (a file is in the way): every call still succeeds, built from
 * source, and the failed stores are counted. */
static void test_unwritable_folder(void **state) {
  (void)state;
  char *dir = fresh_dir();
  static rms_out o;
  char blocked[600];
  snprintf(blocked, sizeof blocked, "%s/file", dir);
  ng_test_write(blocked, "x", 1);
  snprintf(blocked, sizeof blocked, "%s/file/cache", dir); /* mkdir fails: a file is in the way */
  ng_context *c = ctx_with(blocked);
  run_ok(c, NG_F32, true, &o);
  EXPECT_STATS(c, 3, 0, 3, 0, 0, 3);
  ng_context_release(c);
  ng_test_remove_tree(dir);
  free(dir);
}

/* A read-only folder holding valid entries: they load, and new programs build without error. */
static void test_readonly_folder(void **state) {
  (void)state;
  static rms_out o;
  char *ro = fresh_dir();
  ng_context *c = ctx_with(ro);
  run_ok(c, NG_F32, false, &o);
  ng_context_release(c);
  assert_int_equal(chmod(ro, 0500), 0);
  if (geteuid() == 0) {
    print_message("running as root, where a read-only mode does not stop writes: skipped "
                  "(test_unwritable_folder covers a folder that cannot be written)\n");
    ng_test_remove_tree(ro);
    free(ro);
    skip();
  }
  c = ctx_with(ro);
  run_ok(c, NG_F32, true, &o); /* forward from disk; backward and reduce cannot be stored */
  EXPECT_STATS(c, 2, 1, 2, 0, 0, 2);
  ng_context_release(c);
  assert_int_equal(count_files(ro, ""), 1);
  ng_test_remove_tree(ro);
  free(ro);
}

static void set_env(const char *name, const char *value) {
  if (value) setenv(name, value, 1);
  else unsetenv(name);
}

/* Where the folder is, and the cache off: no file written anywhere. */
static void test_env_and_off(void **state) {
  (void)state;
  char *home = fresh_dir();
  char want[600], got[600], saved_home[600] = "";
  if (getenv("HOME")) snprintf(saved_home, sizeof saved_home, "%s", getenv("HOME"));
  set_env("HOME", home);
  set_env("XDG_CACHE_HOME", NULL);
  set_env("NORMGRAD_CACHE_DIR", NULL);
  NG_OK(ng_cache_default_dir(got, sizeof got));
  snprintf(want, sizeof want, "%s/.cache/normgrad", home);
  assert_string_equal(got, want);
  set_env("NORMGRAD_CACHE_DIR", ""); /* empty = unset */
  NG_OK(ng_cache_default_dir(got, sizeof got));
  assert_string_equal(got, want);
  set_env("XDG_CACHE_HOME", "relative/ignored");
  NG_OK(ng_cache_default_dir(got, sizeof got));
  assert_string_equal(got, want);
  snprintf(want, sizeof want, "%s/xdg", home);
  set_env("XDG_CACHE_HOME", want);
  snprintf(want, sizeof want, "%s/xdg/normgrad", home);
  NG_OK(ng_cache_default_dir(got, sizeof got));
  assert_string_equal(got, want);
  NG_EXPECT_STATUS(ng_cache_default_dir(got, 5), NG_ERR_INVALID_VALUE);
  set_env("NORMGRAD_CACHE_DIR", "/some/where");
  NG_OK(ng_cache_default_dir(got, sizeof got));
  assert_string_equal(got, "/some/where");

  /* Off from the environment: a new context has no folder and touches no file. */
  set_env("NORMGRAD_CACHE_DIR", "OFF");
  NG_OK(ng_cache_default_dir(got, sizeof got));
  assert_string_equal(got, "");
  NG_EXPECT_STATUS(ng_cache_list(NULL, collect, NULL), NG_ERR_INVALID_VALUE);
  ng_test_env *e = ng_test_env_get();
  ng_context *c = NULL;
  NG_OK(ng_context_create(e->cl_ctx, e->device, &c));
  NG_OK(ng_context_override(c, NG_TUNE_FUSED_REDUCE, 1)); /* as ctx_with */
  NG_OK(ng_context_get_cache_dir(c, got, sizeof got));
  assert_string_equal(got, "");
  static rms_out o;
  run_ok(c, NG_F32, true, &o);
  EXPECT_STATS(c, 3, 0, 0, 0, 0, 0);
  ng_context_release(c);

  /* The default folder from the environment is used (and created) by a new context. */
  set_env("NORMGRAD_CACHE_DIR", NULL);
  NG_OK(ng_context_create(e->cl_ctx, e->device, &c));
  NG_OK(ng_context_override(c, NG_TUNE_FUSED_REDUCE, 1)); /* as ctx_with */
  NG_OK(ng_context_get_cache_dir(c, got, sizeof got));
  assert_string_equal(got, want);
  run_ok(c, NG_F32, false, &o);
  EXPECT_STATS(c, 1, 0, 1, 1, 0, 0);
  struct stat st;
  assert_int_equal(stat(want, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  /* Off through the API: nothing more is read or written. */
  NG_OK(ng_context_set_cache_dir(c, NULL));
  NG_EXPECT_STATUS(ng_context_set_cache_dir(c, ""), NG_ERR_INVALID_VALUE);
  run_ok(c, NG_F32, true, &o);
  EXPECT_STATS(c, 3, 0, 1, 1, 0, 0);
  ng_context_release(c);
  assert_int_equal(count_files(want, ""), 1);
  snprintf(want, sizeof want, "%s/.cache", home);
  assert_int_equal(access(want, F_OK), -1); /* HOME untouched: XDG_CACHE_HOME was used */

  /* NORMGRAD_CACHE_MAX_BYTES=1: every entry is evicted right after it is stored. */
  char *dir = fresh_dir();
  set_env("NORMGRAD_CACHE_MAX_BYTES", "1");
  c = ctx_with(dir);
  run_ok(c, NG_F32, false, &o);
  EXPECT_STATS(c, 1, 0, 1, 1, 0, 0);
  assert_int_equal(count_files(dir, ""), 0);
  ng_context_release(c);
  set_env("NORMGRAD_CACHE_MAX_BYTES", "1k"); /* 1024 bytes: still smaller than any entry */
  c = ctx_with(dir);
  run_ok(c, NG_F32, false, &o);
  assert_int_equal(count_files(dir, ""), 0);
  ng_context_release(c);
  set_env("NORMGRAD_CACHE_MAX_BYTES", "12 parsecs"); /* not a size: the default bound */
  c = ctx_with(dir);
  run_ok(c, NG_F32, false, &o);
  assert_int_equal(count_files(dir, ""), 1);
  ng_context_release(c);
  set_env("NORMGRAD_CACHE_MAX_BYTES", NULL);

  set_env("NORMGRAD_CACHE_DIR", "off");
  set_env("XDG_CACHE_HOME", NULL);
  set_env("HOME", saved_home[0] ? saved_home : NULL);
  ng_test_remove_tree(dir);
  free(dir);
  ng_test_remove_tree(home);
  free(home);
}

/* LRU eviction: A written first but loaded since, B written later and never loaded; storing C
 * past the bound removes B only. Also
 * removes a temporary file left by a dead writer and leaves foreign files alone. */
static void test_eviction(void **state) {
  (void)state;
  char *dir = fresh_dir();
  static rms_out o;
  ng_context *c = ctx_with(dir);
  run_ok(c, NG_F32, false, &o);  /* A */
  run_ok(c, NG_BF16, false, &o); /* B */
  run_ok(c, NG_F16, false, &o);  /* C */
  ng_context_release(c);
  listing *l = list_dir(dir);
  assert_int_equal(l->n, 3);
  listed a = *find_fwd(l, NG_F32), b = *find_fwd(l, NG_BF16), cc = *find_fwd(l, NG_F16);
  free(l);
  assert_int_equal(unlink(cc.path), 0);
  struct timespec old[2] = {{time(NULL) - 100, 0}, {time(NULL) - 100, 0}};
  struct timespec older[2] = {{time(NULL) - 200, 0}, {time(NULL) - 200, 0}};
  /* A written before B, so only a load that refreshes A's time saves A from eviction. */
  assert_int_equal(utimensat(AT_FDCWD, a.path, older, 0), 0);
  assert_int_equal(utimensat(AT_FDCWD, b.path, old, 0), 0);
  char junk[600], stale[600], fresh[600];
  snprintf(junk, sizeof junk, "%s/notes.txt", dir);
  ng_test_write(junk, "keep me", 7);
  snprintf(stale, sizeof stale, "%s/.ngtmp-0123456789abcdef-AbCdEf", dir);
  ng_test_write(stale, "half", 4);
  struct timespec ancient[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
  assert_int_equal(utimensat(AT_FDCWD, stale, ancient, 0), 0);
  snprintf(fresh, sizeof fresh, "%s/.ngtmp-fedcba9876543210-XyZxYz", dir);
  ng_test_write(fresh, "busy", 4);

  c = ctx_with(dir);
  run_ok(c, NG_F32, false, &o); /* A loaded: now the most recently used */
  EXPECT_STATS(c, 0, 1, 0, 0, 0, 0);
  /* Room for A, C and the busy temporary file, not for B too (C's new binary may differ from
   * the deleted one by a few bytes, hence the slack). */
  NG_OK(ng_context_set_cache_max_bytes(c, a.bytes + cc.bytes + 4 + b.bytes / 2));
  run_ok(c, NG_F16, false, &o); /* C stored; A + B + C + 4 bytes of temp exceed the bound */
  EXPECT_STATS(c, 1, 1, 1, 1, 0, 0);
  ng_context_release(c);
  assert_int_equal(access(a.path, F_OK), 0);
  assert_int_equal(access(cc.path, F_OK), 0);
  assert_int_equal(access(b.path, F_OK), -1);
  assert_int_equal(access(junk, F_OK), 0);
  assert_int_equal(access(stale, F_OK), -1);
  assert_int_equal(access(fresh, F_OK), 0);

  /* Clearing removes entries and temporary files, nothing else. */
  uint64_t removed = 0;
  NG_OK(ng_cache_clear(dir, &removed));
  assert_int_equal(removed, 3);
  assert_int_equal(count_files(dir, ""), 1);
  assert_int_equal(count_files(dir, ".ngtmp-"), 0);
  l = list_dir(dir);
  assert_int_equal(l->n, 0);
  free(l);
  char missing[600];
  snprintf(missing, sizeof missing, "%s/none", dir);
  l = list_dir(missing); /* a folder not created yet has no entries */
  assert_int_equal(l->n, 0);
  free(l);
  NG_OK(ng_cache_clear(missing, &removed));
  assert_int_equal(removed, 0);
  ng_test_remove_tree(dir);
  free(dir);
}

/* ---- two processes racing on one entry --------------------------------------------------------- */
#define RACE_STORES 60
#define RACE_LOADS 40

/* The program id and options of the single entry in `dir` (as ng_get_program forms them). */
static bool entry_id(const char *dir, ng_program_id *id, ng_opts *opts) {
  static listing l;
  l.n = 0;
  if (ng_cache_list(dir, collect, &l) != NG_SUCCESS || l.n != 1) return false;
  ng_source src;
  if (ng_source_get(l.e[0].program, &src) != NG_SUCCESS) return false;
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < 2; i++) h = ng_fnv1a(h, src.parts[i], src.lens[i]);
  id->src_hash = h;
  id->src_len = src.lens[0] + src.lens[1];
  ng_source_free(&src);
  static char name[32];
  snprintf(name, sizeof name, "%s", l.e[0].program);
  snprintf(opts->text, sizeof opts->text, "%s", l.e[0].options);
  opts->len = strlen(opts->text);
  opts->overflow = false;
  id->name = name;
  id->options = opts->text;
  return true;
}

/* Child: wait for the parent's go; both children then build and store the same missing entry at
 * once. Then child 0 rewrites that entry RACE_STORES times while child 1 loads it in
 * RACE_LOADS fresh contexts: a reader must never see a partial file (no reject, every load a
 * hit) and every result must be right. */
static int race_child(const char *dir, int go_fd, int ready_fd, int who) {
  char err[512] = "";
  ng_test_env *e = ng_test_env_get();
  if (write(ready_fd, "r", 1) != 1) return 10;
  close(ready_fd);
  char c;
  if (read(go_fd, &c, 1) != 0) return 11; /* EOF = go */
  static rms_out o;
  ng_context *ctx = NULL;
  if (ng_context_create(e->cl_ctx, e->device, &ctx) != NG_SUCCESS ||
      ng_context_set_cache_dir(ctx, dir) != NG_SUCCESS)
    return 12;
  if (!run_rms(ctx, NG_F32, false, &o, err, sizeof err)) {
    fprintf(stderr, "race child %d: %s\n", who, err);
    return 13;
  }
  ng_context_stats st;
  ng_context_get_stats(ctx, &st);
  if (st.programs_built + st.disk_hits != 1 || st.disk_rejects || st.disk_errors) return 14;
  if (who == 0) {
    ng_program_id id;
    ng_opts opts;
    cl_program prog = NULL;
    if (!entry_id(dir, &id, &opts) || ng_get_program(ctx, id.name, &opts, &prog) != NG_SUCCESS)
      return 15;
    for (int i = 0; i < RACE_STORES; i++) ng_disk_store(ctx, &id, prog);
    ng_context_get_stats(ctx, &st);
    if (st.disk_stores < RACE_STORES || st.disk_errors) return 16;
  }
  ng_context_release(ctx);
  for (int i = 0; who == 1 && i < RACE_LOADS; i++) {
    if (ng_context_create(e->cl_ctx, e->device, &ctx) != NG_SUCCESS ||
        ng_context_set_cache_dir(ctx, dir) != NG_SUCCESS)
      return 17;
    if (!run_rms(ctx, NG_F32, false, &o, err, sizeof err)) {
      fprintf(stderr, "race child %d load %d: %s\n", who, i, err);
      return 18;
    }
    ng_context_get_stats(ctx, &st);
    if (st.programs_built || st.disk_hits != 1 || st.disk_rejects || st.disk_errors) {
      fprintf(stderr, "race child %d load %d: built %llu hits %llu rejects %llu errors %llu\n",
              who, i, (unsigned long long)st.programs_built, (unsigned long long)st.disk_hits,
              (unsigned long long)st.disk_rejects, (unsigned long long)st.disk_errors);
      return 19;
    }
    ng_context_release(ctx);
  }
  ng_test_env_release();
  return 0;
}

static void test_two_processes(void **state) {
  (void)state;
  char *dir = fresh_dir();
  char exe[1024];
  ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (el <= 0) {
    print_message("no /proc/self/exe: the two-process race is skipped\n");
    ng_test_remove_tree(dir);
    free(dir);
    skip();
  }
  exe[el] = '\0';
  int go[2], ready[2];
  assert_int_equal(pipe(go), 0);
  assert_int_equal(pipe(ready), 0);
  char go_s[16], ready_s[16];
  snprintf(go_s, sizeof go_s, "%d", go[0]);
  snprintf(ready_s, sizeof ready_s, "%d", ready[1]);
  pid_t kids[2];
  for (int k = 0; k < 2; k++) {
    char *argv[] = {exe, "--race-child", dir, go_s, ready_s, k ? "1" : "0", NULL};
    kids[k] = fork();
    assert_true(kids[k] >= 0);
    if (kids[k] == 0) {
      close(go[1]);
      close(ready[0]);
      execv(exe, argv); /* only exec after fork: the parent's OpenCL threads are not ours */
      _exit(127);
    }
  }
  close(go[0]);
  close(ready[1]);
  char b[2];
  size_t got = 0;
  while (got < 2) {
    ssize_t r = read(ready[0], b + got, 2 - got);
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(ready[0]);
  close(go[1]); /* both children start now */
  for (int k = 0; k < 2; k++) {
    int st = 0;
    assert_int_equal(waitpid(kids[k], &st, 0), kids[k]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      fail_msg("race child %d failed (status 0x%x)", k, st);
  }
  assert_int_equal(got, 2);
  listing *l = list_dir(dir);
  assert_int_equal(l->n, 1);
  assert_true(l->e[0].valid);
  free(l);
  assert_int_equal(count_files(dir, ".ngtmp-"), 0);
  ng_context *c = ctx_with(dir);
  static rms_out o;
  run_ok(c, NG_F32, false, &o);
  EXPECT_STATS(c, 0, 1, 0, 0, 0, 0);
  ng_context_release(c);
  ng_test_remove_tree(dir);
  free(dir);
}

/* ---- prebuild ----------------------------------------------------------------------------------- */
/* After ng_prebuild("rmsnorm"), no rmsnorm call of any dtype, weight, frozen state or alignment
 * builds anything; a second context loads every variant from disk. */
static void test_prebuild(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  char *dir = fresh_dir();
  assert_string_equal(ng_prebuild_op_name(0), "rmsnorm");
  unsigned nops = 0; /* the table ends; every name is a CLI op name */
  while (nops < 64 && ng_prebuild_op_name(nops)) nops++;
  assert_true(nops >= 1 && nops < 64);
  /* On a GPU the work-group size, register slots and prefetch follow the row length: pin them
   * so the count below holds on every device, and the prebuild stays small. */
  ng_context *c = ctx_with(dir);
  if (!e->is_cpu) { /* work-group, slots and prefetch follow the row length on GPUs */
    NG_OK(ng_context_override(c, NG_TUNE_WORKGROUP, 64));
    NG_OK(ng_context_override(c, NG_TUNE_REG_COLS, 2));
    NG_OK(ng_context_override(c, NG_TUNE_PREFETCH, 1));
  }
  unsigned count = 0;
  NG_EXPECT_STATUS(ng_prebuild(c, "no-such-op", &count), NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(ng_prebuild(NULL, "rmsnorm", &count), NG_ERR_NULL_HANDLE);
  NG_OK(ng_prebuild(c, "rmsnorm", &count));
  /* Vectorised and scalar: x dtype (3) × {no weight, 3 weight dtypes} for the forward (24) and
   * the frozen backward (24), x dtype × weight dtype for the backward with dW (18), plus 3
   * reductions. */
  const unsigned want = 69;
  assert_int_equal(count, want);
  EXPECT_STATS(c, want, 0, want, want, 0, 0);

  const ng_dtype fl[] = {NG_F32, NG_F16, NG_BF16};
  const size_t rows = 3, n = 40;
  for (int xi = 0; xi < 3; xi++)
    for (int wi = -1; wi < 3; wi++)
      for (size_t off = 0; off <= 3; off += 3)
        for (int fr = 0; fr < 2; fr++) {
          const ng_dtype xd = fl[xi], wd = wi < 0 ? NG_F32 : fl[wi];
          cl_mem bx = ng_test_upload(xd, NULL, rows * n, off, 0);
          cl_mem by = ng_test_upload(xd, NULL, rows * n, off, 0);
          cl_mem bw = wi < 0 ? NULL : ng_test_upload(wd, NULL, n, off, 0);
          cl_mem bdw = wi < 0 || fr ? NULL : ng_test_upload(wd, NULL, n, off, 0);
          cl_mem br = ng_test_upload(NG_F32, NULL, rows, off, 0);
          cl_mem bdx = ng_test_upload(xd, NULL, rows * n, off, 0);
          ng_rmsnorm_params p = {rows, n, 1e-6f, 0.0f, NG_CAST_LLAMA};
          ng_tensor tw = bw ? ng_tensor_of(bw, off, wd) : ng_tensor_none();
          NG_OK(ng_rmsnorm_forward(c, e->queue, &p, ng_tensor_of(bx, off, xd), tw,
                                   ng_tensor_of(by, off, xd), ng_tensor_of(br, off, NG_F32), 0,
                                   NULL, NULL));
          NG_OK(ng_rmsnorm_backward(c, e->queue, &p, ng_tensor_of(by, off, xd),
                                    ng_tensor_of(bx, off, xd), tw, ng_tensor_of(br, off, NG_F32),
                                    ng_tensor_of(bdx, off, xd),
                                    bdw ? ng_tensor_of(bdw, off, wd) : ng_tensor_none(), 0,
                                    ng_tensor_none(), 0, NULL, NULL));
          clFinish(e->queue);
          cl_mem ms[] = {bx, by, bw, bdw, br, bdx};
          for (size_t i = 0; i < NG_ARRAY_LEN(ms); i++)
            if (ms[i]) clReleaseMemObject(ms[i]);
        }
  EXPECT_STATS(c, want, 0, want, want, 0, 0); /* nothing built after the prebuild */
  ng_context_release(c);

  c = ctx_with(dir);
  if (!e->is_cpu) { /* work-group, slots and prefetch follow the row length on GPUs */
    NG_OK(ng_context_override(c, NG_TUNE_WORKGROUP, 64));
    NG_OK(ng_context_override(c, NG_TUNE_REG_COLS, 2));
    NG_OK(ng_context_override(c, NG_TUNE_PREFETCH, 1));
  }
  /* the same op in a fresh context: every program comes from disk (NULL would prebuild every
   * op family, far more programs than this test needs to compile) */
  NG_OK(ng_prebuild(c, "rmsnorm", &count));
  assert_int_equal(count, want);
  EXPECT_STATS(c, 0, want, 0, 0, 0, 0);
  ng_context_release(c);
  ng_test_remove_tree(dir);
  free(dir);
}

/* The enumeration must hold every program the launch choice can pick. On a GPU the work-group
 * size follows the row length; fake a GPU context (no program is built) and check, for many row
 * lengths, both alignments and every pass, that the forward / backward options are listed. */
typedef struct opt_set {
  char keys[1024][600];
  int n;
} opt_set;

static ng_status collect_opts(ng_context *ctx, const char *program, const ng_opts *o, void *user) {
  (void)ctx;
  opt_set *s = user;
  char k[600];
  snprintf(k, sizeof k, "%s|%s", program, o->text);
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->keys[i], k)) return NG_SUCCESS;
  if (s->n < 1024) snprintf(s->keys[s->n++], sizeof s->keys[0], "%s", k);
  return NG_SUCCESS;
}

static bool listed_opts(const opt_set *s, const ng_opts *o) {
  char k[600];
  snprintf(k, sizeof k, "rmsnorm|%s", o->text);
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->keys[i], k)) return true;
  return false;
}

/* Whether a listed program has wg × 2 work-items, x dtype xd, COMPUTE_DW = dw and, unless NULL,
 * the option `also` */
static bool listed_shape(const opt_set *s, unsigned wg, ng_dtype xd, bool dw, const char *also) {
  char shape[32], dt[32];
  snprintf(shape, sizeof shape, "-DWG=%u -DREG=2 ", wg);
  snprintf(dt, sizeof dt, "-DDTYPE=%d ", (int)xd);
  for (int i = 0; i < s->n; i++)
    if (strstr(s->keys[i], shape) && strstr(s->keys[i], dt) &&
        strstr(s->keys[i], dw ? "-DCOMPUTE_DW=1" : "-DCOMPUTE_DW=0") &&
        (!also || strstr(s->keys[i], also)))
      return true;
  return false;
}

ng_status ng_rmsnorm_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user);
ng_status ng_layernorm_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user);
ng_status ng_fused_add_rmsnorm_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user);

static void test_prebuild_gpu_shapes(void **state) {
  (void)state;
  ng_context *c = ctx_with(NULL);
  c->info.type = CL_DEVICE_TYPE_GPU; /* the launch choice reads only these facts */
  c->info.max_wg = 1024;
  c->info.nv_shfl = c->info.nv_bf16 = false; /* a GPU without NVIDIA's rules (below: with them) */
  static opt_set set;
  set.n = 0;
  NG_OK(ng_rmsnorm_for_each_variant(c, collect_opts, &set));
  /* forward: 6 work-group sizes (32…1024, 2 slots) × 24; backward: 7 shapes (32…512 with one
   * slot, 512 with 2 and 4) × (24 frozen + 18 with dW); + 3 reductions */
  assert_int_equal(set.n, 6 * 24 + 7 * 42 + 3);
  size_t ns[600];
  size_t k = 0;
  for (size_t n = 1; n <= 4100; n += (n < 300 ? 1 : 37)) ns[k++] = n;
  const size_t big[] = {8191, 8192, 8193, 16384, 65536, 65537, 262144, 1000000, 16777216};
  for (size_t i = 0; i < NG_ARRAY_LEN(big); i++) ns[k++] = big[i];
  const ng_dtype fl[] = {NG_F32, NG_F16, NG_BF16};
  for (size_t i = 0; i < k; i++)
    for (int aligned = 0; aligned < 2; aligned++)
      for (int pass = 0; pass < 3; pass++)
        for (int xi = 0; xi < 3; xi++)
          for (int wi = pass == 2 ? 0 : -1; wi < 3; wi++) {
            const ng_row_launch l = ng_choose_row_launch(
                c, 1000, ns[i], aligned, pass == 0 ? NG_ROWS_FWD : ng_bwd_mode(pass == 2, fl[xi]));
            ng_opts o;
            ng_opts_init(&o);
            ng_row_opts_dt(&o, &l, fl[xi], wi >= 0, wi >= 0 ? fl[wi] : NG_F32);
            if (pass) ng_opts_add(&o, "COMPUTE_DW", pass == 2);
            /* rmsnorm.c: dW summed in-kernel where wanted (for its grid of 2^20 rows) and not
             * split */
            const ng_row_launch lv = ng_choose_row_launch(c, (size_t)1 << 20, ns[i], aligned,
                                                          ng_bwd_mode(true, fl[xi]));
            size_t nb, rg;
            if (pass == 2 && ng_fused_wanted(c, &lv, ns[i], 1, NG_FUSED_BY_SHAPE) &&
                !ng_col_split(c, &lv, (size_t)1 << 20, ns[i], &nb, &rg))
              ng_opts_add(&o, "FUSED_RED", 1);
            if (pass) ng_opts_add(&o, "RAW_ROWS", ng_rms_raw_rows(&l, fl[xi], pass == 2, false));
            if (!listed_opts(&set, &o)) fail_msg("n=%zu: '%s' is not enumerated", ns[i], o.text);
          }
  EXPECT_STATS(c, 0, 0, 0, 0, 0, 0);
  /* NVIDIA's warp sums: the backward's groups of half a 16-bit row of 513-768 vectors (RMSNorm,
   * NG_ROWS_FIT2) or 513-640 (LayerNorm, NG_ROWS_FIT2_640), rounded up to a warp (not a power of
   * two), in calls of more than 8 (16) rows a compute unit, 512 × 2 in smaller ones, are each
   * enumerated for both dtypes */
  c->info.nv_shfl = true;
  c->info.compute_units = 132;
  for (int op = 0; op < 2; op++) {
    set.n = 0;
    NG_OK(op ? ng_layernorm_for_each_variant(c, collect_opts, &set)
             : ng_rmsnorm_for_each_variant(c, collect_opts, &set));
    const size_t top = op ? 5120 : 6144;
    for (size_t n = 4104; n <= top + 8; n += 8)
      for (int xi = 1; xi < 3; xi++)
        for (int dw = 0; dw < 4; dw++) {
          const bool many = dw < 2; /* 2^20 rows, else 1056 (2112) */
          const ng_row_launch l = ng_choose_row_launch(
              c, many ? (size_t)1 << 20 : op ? 2112 : 1056, n, true,
              ng_bwd_mode(dw % 2, fl[xi]) | (op ? NG_ROWS_FIT2_640 : NG_ROWS_FIT2));
          const bool fit = many && n <= top;
          assert_int_equal(l.wg, fit ? (unsigned)((n / 8 + 1) / 2 + 31) / 32 * 32 : 512);
          assert_int_equal(l.reg_cols, 2);
          if (dw % 2) assert_int_equal(l.groups, fit ? 264 : 132);
          if (!listed_shape(&set, l.wg, fl[xi], dw % 2, NULL))
            fail_msg("op %d, n=%zu, dtype %d, dW %d: %u × 2 not enumerated", op, n, xi, dw, l.wg);
        }
  }
  /* The fused add's backward with ds_out on groups of half a 16-bit row of 257-288 vectors
   * (NG_ROWS_HALF_MID_DS: 160 × 2, the frozen pass prefetching), with dW and frozen, each
   * enumerated for both dtypes */
  set.n = 0;
  NG_OK(ng_fused_add_rmsnorm_for_each_variant(c, collect_opts, &set));
  const ng_rows_mode ds_flags = NG_ROWS_ONE | NG_ROWS_1K | NG_ROWS_HALF_MID_DS;
  for (size_t n = 2056; n <= 8 * NG_HALF_MID_DS_MAX; n += 8)
    for (int xi = 1; xi < 3; xi++)
      for (int dw = 0; dw < 2; dw++) {
        const ng_row_launch l = ng_choose_row_launch(
            c, (size_t)1 << 20, n, true,
            ng_bwd_mode(dw, fl[xi]) | ds_flags |
                (dw ? NG_ROWS_FEW : NG_ROWS_MANY | NG_ROWS_MANY_512));
        assert_int_equal(l.wg, 160);
        assert_int_equal(l.prefetch, true);
        if (!listed_shape(&set, l.wg, fl[xi], dw, "-DHAS_DS=1"))
          fail_msg("fused add with ds_out, n=%zu, dtype %d, dW %d: not enumerated", n, xi, dw);
      }
  /* RMSNorm's f32 forward rows of 769-1024 vectors take one slot (NG_ROWS_F32_STREAM_1K: the op
   * streams them), its f16 backward rows of more than 1280 vectors one slot (NG_ROWS_F16_1SLOT:
   * the split takes them); the rows either side keep their slots */
  const size_t fwd_n[][2] = {{6144, 2}, {6152, 1}, {8192, 1}, {8200, 2}, {16384, 2}};
  for (size_t i = 0; i < NG_ARRAY_LEN(fwd_n); i++) {
    const ng_row_launch l = ng_choose_row_launch(c, (size_t)1 << 20, fwd_n[i][0], true,
                                                 NG_ROWS_FWD | NG_ROWS_F32_STREAM_1K);
    if (l.reg_cols != fwd_n[i][1])
      fail_msg("f32 forward, n=%zu: %u slots, want %zu", fwd_n[i][0], l.reg_cols, fwd_n[i][1]);
  }
  const size_t bwd_n[][2] = {{8192, 2}, {10240, 4}, {10248, 1}, {16384, 1}};
  for (size_t i = 0; i < NG_ARRAY_LEN(bwd_n); i++)
    for (int dw = 0; dw < 2; dw++) {
      const ng_row_launch l = ng_choose_row_launch(c, (size_t)1 << 20, bwd_n[i][0], true,
                                                   ng_bwd_mode(dw, NG_F16) | NG_ROWS_F16_1SLOT);
      if (l.reg_cols != bwd_n[i][1])
        fail_msg("f16 backward, n=%zu, dW %d: %u slots, want %zu", bwd_n[i][0], dw, l.reg_cols,
                 bwd_n[i][1]);
    }
  ng_context_release(c);
}

/* Whether some enumerated program's options hold every one of `want` (NULL-terminated). */
typedef struct find_opts {
  const char *want[4];
  bool found;
} find_opts;
static ng_status find_opt(ng_context *ctx, const char *program, const ng_opts *o, void *user) {
  (void)ctx, (void)program;
  find_opts *f = user;
  bool all = true;
  for (int i = 0; i < 4 && f->want[i]; i++) all = all && strstr(o->text, f->want[i]) != NULL;
  f->found = f->found || all;
  return NG_SUCCESS;
}

/* The launches a tuned line or a built-in entry gives rows between the listed lengths are
 * enumerated too (ng_variant_n_ctx): the H200's LayerNorm bf16 forward at 11264-12288 on
 * 384 x 4, not on an H100 or with table=1; a tuning.txt line for RMSNorm's bf16 forward at
 * 5000-5100 on 96 x 2 (before, a prebuild listed powers of two and the half-row groups' lengths
 * alone, and PolyNorm's powers of two alone). */
static void test_prebuild_tuned_lengths(void **state) {
  (void)state;
  ng_context *c = ctx_with(NULL);
  ng_test_as_nvidia(c, "NVIDIA H200");
  char dt[32];
  snprintf(dt, sizeof dt, "-DDTYPE=%d ", (int)NG_BF16);
  find_opts f = {{"-DWG=384 -DREG=4", dt, NULL, NULL}, false};
  NG_OK(ng_layernorm_for_each_variant(c, find_opt, &f));
  assert_true(f.found);
  NG_OK(ng_context_override(c, NG_TUNE_TABLE, 1));
  f.found = false;
  NG_OK(ng_layernorm_for_each_variant(c, find_opt, &f));
  assert_false(f.found);
  NG_OK(ng_context_override(c, NG_TUNE_TABLE, NG_TUNE_AUTO));
  ng_test_as_nvidia(c, "NVIDIA H100 80GB HBM3");
  NG_OK(ng_layernorm_for_each_variant(c, find_opt, &f));
  assert_false(f.found);
  ng_context_release(c);

  /* a tuning.txt line of lengths, read by a context created afterwards */
  char *dir = fresh_dir();
  ng_test_env *e = ng_test_env_get();
  setenv("NORMGRAD_CACHE_DIR", dir, 1);
  NG_OK(ng_context_create(e->cl_ctx, e->device, &c));
  unsigned v[NG_TUNE_SLOTS] = {0};
  v[NG_TUNE_WORKGROUP] = 96;
  v[NG_TUNE_REG_COLS] = 2;
  NG_OK(ng_tuning_store_range(c, "rmsnorm.fwd", NG_BF16, 5000, 5100, v, "test"));
  ng_context_release(c);
  NG_OK(ng_context_create(e->cl_ctx, e->device, &c));
  setenv("NORMGRAD_CACHE_DIR", "off", 1);
  c->info.type = CL_DEVICE_TYPE_GPU;
  c->info.max_wg = 1024;
  find_opts g = {{"-DWG=96 -DREG=2", dt, NULL, NULL}, false};
  NG_OK(ng_rmsnorm_for_each_variant(c, find_opt, &g));
  assert_true(g.found);
  ng_context_release(c);
  ng_test_remove_tree(dir);
  free(dir);
}

int main(int argc, char **argv) {
  if (argc == 6 && strcmp(argv[1], "--race-child") == 0)
    return race_child(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
  /* The shared test context (and anything else) stays off the user's cache folder. */
  setenv("NORMGRAD_CACHE_DIR", "off", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hit_miss),          cmocka_unit_test(test_corrupt_and_truncated),
      cmocka_unit_test(test_foreign_entries),   cmocka_unit_test(test_driver_rejects),
      cmocka_unit_test(test_unwritable_folder), cmocka_unit_test(test_readonly_folder),
      cmocka_unit_test(test_env_and_off),
      cmocka_unit_test(test_eviction),          cmocka_unit_test(test_two_processes),
      cmocka_unit_test(test_prebuild),          cmocka_unit_test(test_prebuild_gpu_shapes),
      cmocka_unit_test(test_prebuild_tuned_lengths),
  };
  int r = NG_RUN_GROUP_TESTS(tests, NULL, NULL);
  ng_test_env_release();
  return r;
}
