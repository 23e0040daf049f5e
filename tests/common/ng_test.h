/* Test support shared by every test binary: one OpenCL device/context/queue per process, host
 * dtype conversions that reproduce the kernels' rounding, buffers with guard regions, random
 * data and tolerance checks. */
#ifndef NG_TEST_H
#define NG_TEST_H

#include "normgrad.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>
#include <stdlib.h>

/* cmocka_run_group_tests, limited to the tests whose names match NORMGRAD_TEST_FILTER (a
 * cmocka pattern: `*` and `?`) when it is set, so one test of a long file can be rerun alone. */
static inline void ng_test_filter(void) {
  const char *f = getenv("NORMGRAD_TEST_FILTER");
  if (f && *f) cmocka_set_test_filter(f);
}
/* With NORMGRAD_TEST_LIST set (non-empty), the test names one a line on stdout and 0, nothing
 * run: tools/split_tests.py runs each test of a binary as its own process. */
static inline int ng_test_list(const struct CMUnitTest *t, size_t n) {
  const char *l = getenv("NORMGRAD_TEST_LIST");
  if (!l || !*l) return -1;
  printf("# normgrad tests\n"); /* what tools/split_tests.py looks for */
  for (size_t i = 0; i < n; i++) printf("%s\n", t[i].name);
  return 0;
}
/* The whole file at path, NUL-terminated (its length in *len when len is not NULL), or NULL when
 * it cannot be opened. Header-only, so that test_kernel_dir, which links nothing of the test
 * library, shares it. */
static inline char *ng_test_slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  const long end = ftell(f), n = end > 0 ? end : 0;
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  assert_non_null(s);
  const size_t got = fread(s, 1, (size_t)n, f);
  fclose(f);
  s[got] = '\0';
  if (len) *len = got;
  return s;
}
/* Write n bytes at p to path (created or truncated), failing the test on any error. */
static inline void ng_test_write(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}
#define NG_RUN_GROUP_TESTS(tests, setup, teardown)                                                 \
  (ng_test_list(tests, sizeof(tests) / sizeof((tests)[0])) == 0                                    \
       ? 0                                                                                         \
       : (ng_test_filter(), cmocka_run_group_tests(tests, setup, teardown)))

typedef struct ng_test_env {
  cl_platform_id platform;
  cl_device_id device;
  cl_context cl_ctx;
  cl_command_queue queue;
  ng_context *ctx;
  bool is_cpu;
} ng_test_env;

/* The device named by NORMGRAD_DEVICE (index or name substring), else the default one. Created
 * once per process; released by ng_test_env_release(). */
ng_test_env *ng_test_env_get(void);
void ng_test_env_release(void);
/* The GPU-shaped row kernels with the parameter gradients summed in the backward kernel and
 * long bf16 rows split across work-groups (NG_TUNE_FUSED_REDUCE = 2), on whatever device runs
 * the tests: wg work-items and reg register slots (0 leaves that one to the device). */
void ng_test_fused_reduce_shape(ng_context *ctx, unsigned wg, unsigned reg);
/* Two work-groups per compute unit of the test device: the grid at which the in-kernel
 * reductions keep 16 rows in flight instead of 8 (src/context.c, ng_fused_rows_in_flight). */
unsigned ng_test_two_per_cu(void);
/* ctx made to look, to the launch choice, like an NVIDIA H100 or H200 named `name` (132 compute
 * units, 1024 work-items, 48 KB of local memory, the warp sums and bf16 rounding): the choice
 * reads only these facts, and the built-in table keys on the name and units. */
void ng_test_as_nvidia(ng_context *ctx, const char *name);
/* Every launch override of ctx back to NG_TUNE_AUTO. */
void ng_test_reset_overrides(ng_context *ctx);

/* ---- host dtype conversions (round-to-nearest-even, as the kernels) ------------------------- */
uint16_t ng_h_f32_to_bf16(float f);
float ng_h_bf16_to_f32(uint16_t b);
uint16_t ng_h_f32_to_f16(float f);
float ng_h_f16_to_f32(uint16_t h);
/* rd(): round an f32 value to `dt` and back. */
float ng_h_rd(ng_dtype dt, float v);
/* Pack `count` floats into dtype storage at dst (ng_dtype_size(dt) bytes each) and back. */
void ng_h_pack(ng_dtype dt, const float *src, void *dst, size_t count);
void ng_h_unpack(ng_dtype dt, const void *src, float *dst, size_t count);

/* ---- device buffers -------------------------------------------------------------------------- */
/* A buffer of `offset + count + guard` elements of `dt`; elements [offset, offset+count) hold
 * `vals` (rounded to dt) or, when vals is NULL, the poison value; the rest holds the poison. */
cl_mem ng_test_upload(ng_dtype dt, const float *vals, size_t count, size_t offset, size_t guard);
/* Read `count` elements of `dt` from element `offset` of `mem`, converted to float. */
void ng_test_download(cl_mem mem, ng_dtype dt, size_t offset, size_t count, float *out);
/* True when every element outside [offset, offset+count) of a buffer of `total` elements still
 * holds the poison value. */
bool ng_test_guard_intact(cl_mem mem, ng_dtype dt, size_t offset, size_t count, size_t total);
#define NG_TEST_POISON 1234.5f

/* ---- data ------------------------------------------------------------------------------------ */
typedef struct ng_rng {
  uint64_t s;
} ng_rng;
void ng_rng_seed(ng_rng *r, uint64_t seed);
double ng_rng_uniform(ng_rng *r); /* [0, 1) */
double ng_rng_normal(ng_rng *r);
/* `count` values ~ N(mean, std), rounded to dt so the reference sees what the device sees. */
float *ng_test_random(ng_rng *r, ng_dtype dt, size_t count, double mean, double std);

/* ---- files -------------------------------------------------------------------------------------
 * Remove path and everything under it, depth first; folders are made writable first (a test may
 * have locked one), symbolic links are removed, never followed. Errors are ignored. */
void ng_test_remove_tree(const char *path);

/* ---- comparison -------------------------------------------------------------------------------
 * Element i passes when |got − ref| ≤ atol + rtol·|ref| (+ scale[i]·stol when scale is given).
 * NaN must match NaN. On failure, prints the worst element and fails the cmocka test. */
typedef struct ng_tol {
  double rtol, atol;
} ng_tol;
void ng_test_assert_close(const char *what, const float *got, const double *ref, size_t count,
                          ng_tol tol, const char *file, int line);
#define NG_ASSERT_CLOSE(what, got, ref, count, tol)                                              \
  ng_test_assert_close(what, got, ref, count, tol, __FILE__, __LINE__)
/* Tolerance for a tensor stored in dt whose reference is `ref`: rounding of the store plus f32
 * error relative to the tensor's largest value. */
ng_tol ng_tol_for(ng_dtype dt, const double *ref, size_t count, double f32_rel);

/* Expect a normgrad call to return `want`; prints the detail when it does not. */
#define NG_EXPECT_STATUS(call, want)                                                             \
  do {                                                                                           \
    ng_status s_ = (call);                                                                       \
    if (s_ != (want))                                                                            \
      fail_msg("%s returned %s (%d), expected %s: %s", #call, ng_status_name(s_), s_,           \
               ng_status_name(want), ng_last_error_detail());                                    \
  } while (0)
#define NG_OK(call) NG_EXPECT_STATUS(call, NG_SUCCESS)
#define CL_OK(call)                                                                              \
  do {                                                                                           \
    cl_int e_ = (call);                                                                          \
    if (e_ != CL_SUCCESS) fail_msg("%s failed: %d", #call, e_);                                  \
  } while (0)

#define NG_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
