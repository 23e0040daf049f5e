/* The host layer: status table, contexts, the program cache (hits, several threads making the
 * first call at once), profiling, and every validation error path of RMSNorm — each returning
 * its named code and leaving every output buffer untouched. */
#include "ng_test.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- status table ----------------------------------------------------------------------------- */
static void test_status_names(void **state) {
  (void)state;
  assert_string_equal(ng_status_name(NG_SUCCESS), "NG_SUCCESS");
  assert_string_equal(ng_status_name(NG_ERR_BUFFER_TOO_SMALL), "NG_ERR_BUFFER_TOO_SMALL");
  assert_string_equal(ng_status_name(CL_OUT_OF_RESOURCES), "CL_OUT_OF_RESOURCES");
  assert_string_equal(ng_status_name(CL_INVALID_MEM_OBJECT), "CL_INVALID_MEM_OBJECT");
  assert_string_equal(ng_status_name(-77777), "NG_UNKNOWN_STATUS");
  assert_non_null(ng_status_message(-77777));
  /* our codes stay clear of Khronos' ranges */
  const ng_status ours[] = {NG_ERR_NULL_HANDLE, NG_ERR_NULL_BUFFER, NG_ERR_BUFFER_TOO_SMALL,
                            NG_ERR_OFFSET_OUT_OF_RANGE, NG_ERR_INVALID_SHAPE,
                            NG_ERR_INDEX_OVERFLOW, NG_ERR_UNSUPPORTED_DTYPE,
                            NG_ERR_DTYPE_MISMATCH, NG_ERR_INVALID_VALUE,
                            NG_ERR_GROUPS_NOT_DIVISIBLE, NG_ERR_TARGET_OUT_OF_RANGE,
                            NG_ERR_HOST_OUT_OF_MEMORY, NG_ERR_BUILD_FAILED, NG_ERR_NO_DEVICE,
                            NG_ERR_UNSUPPORTED_QUEUE, NG_ERR_IO, NG_ERR_GEMM_FAILED,
                            NG_ERR_INTERNAL};
  for (size_t i = 0; i < NG_ARRAY_LEN(ours); i++) {
    assert_true(ours[i] <= -4000 && ours[i] > -4100);
    assert_true(strncmp(ng_status_name(ours[i]), "NG_ERR_", 7) == 0);
    assert_true(strlen(ng_status_message(ours[i])) > 5);
    for (size_t j = 0; j < i; j++) assert_int_not_equal(ours[i], ours[j]);
  }
  assert_int_equal(ng_version_number(), NG_VERSION_NUMBER);
  assert_string_equal(ng_version_string(), NG_VERSION_STRING);
  assert_int_equal(ng_dtype_size(NG_BF16), 2);
  assert_int_equal(ng_dtype_size((ng_dtype)99), 0);
}

static void test_context_api(void **state) {
  (void)state;
  ng_context_release(NULL); /* a no-op */
  NG_EXPECT_STATUS(ng_context_create(NULL, NULL, NULL), NG_ERR_NULL_HANDLE);
  ng_context *c = (ng_context *)1;
  NG_EXPECT_STATUS(ng_context_create(NULL, NULL, &c), NG_ERR_NULL_HANDLE);
  assert_null(c);
  assert_true(strstr(ng_last_error_detail(), "cl_context") != NULL);
  NG_EXPECT_STATUS(ng_context_create_selected("no such device name 12345", &c), NG_ERR_NO_DEVICE);
  NG_EXPECT_STATUS(ng_context_create_selected("999", &c), NG_ERR_NO_DEVICE);
  ng_test_env *e = ng_test_env_get();
  NG_EXPECT_STATUS(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 3), NG_ERR_INVALID_VALUE);
  /* a power of two or a multiple of 32 (a warp), up to 4096 and the device's limit */
  NG_EXPECT_STATUS(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 48), NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 4128), NG_ERR_INVALID_VALUE);
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 96));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, NG_TUNE_AUTO));
  NG_EXPECT_STATUS(ng_context_override(e->ctx, NG_TUNE_VECTOR, 4), NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(ng_context_override(e->ctx, (ng_tune)42, 1), NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(ng_context_override(NULL, NG_TUNE_VECTOR, 1), NG_ERR_NULL_HANDLE);
  cl_uint n = 0;
  NG_OK(ng_list_devices(NULL, 0, &n));
  assert_true(n >= 1);
  cl_device_id d = NULL;
  NG_OK(ng_select_device("0", &d));
  assert_non_null(d);
  /* the caller's own context: wrap, use, release — the caller's context survives */
  cl_int err = CL_SUCCESS;
  cl_context mine = clCreateContext(NULL, 1, &e->device, NULL, NULL, &err);
  assert_non_null(mine);
  NG_OK(ng_context_create(mine, e->device, &c));
  assert_ptr_equal(ng_context_cl_context(c), mine);
  ng_context_release(c);
  cl_uint refs = 0;
  CL_OK(clGetContextInfo(mine, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL));
  assert_int_equal(refs, 1);
  clReleaseContext(mine);
}

/* ---- program cache ------------------------------------------------------------------------------ */
typedef struct {
  ng_context *ctx;
  cl_command_queue q;
  cl_mem x, w, y, r;
  ng_status status;
} thread_arg;

static const size_t TR = 64, TN = 256;

static void *first_call(void *p) {
  thread_arg *a = p;
  ng_rmsnorm_params prm = {TR, TN, 1e-6f, 0.0f, NG_CAST_LLAMA};
  a->status = ng_rmsnorm_forward(a->ctx, a->q, &prm, ng_tensor_of(a->x, 0, NG_BF16),
                                 ng_tensor_of(a->w, 0, NG_F32), ng_tensor_of(a->y, 0, NG_BF16),
                                 ng_tensor_of(a->r, 0, NG_F32), 0, NULL, NULL);
  if (a->status == NG_SUCCESS) a->status = clFinish(a->q);
  return NULL;
}

static void test_cache_threads(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_context *ctx = NULL;
  NG_OK(ng_context_create(e->cl_ctx, e->device, &ctx));
  ng_rng rng;
  ng_rng_seed(&rng, 9);
  float *x = ng_test_random(&rng, NG_BF16, TR * TN, 0, 1), *w = ng_test_random(&rng, NG_F32, TN, 1, 0.2);
  enum { T = 8 };
  pthread_t th[T];
  thread_arg args[T];
  for (int i = 0; i < T; i++) {
    cl_int err;
    args[i].ctx = ctx;
    args[i].q = clCreateCommandQueue(e->cl_ctx, e->device, 0, &err);
    assert_non_null(args[i].q);
    args[i].x = ng_test_upload(NG_BF16, x, TR * TN, 0, 0);
    args[i].w = ng_test_upload(NG_F32, w, TN, 0, 0);
    args[i].y = ng_test_upload(NG_BF16, NULL, TR * TN, 0, 0);
    args[i].r = ng_test_upload(NG_F32, NULL, TR, 0, 0);
  }
  for (int i = 0; i < T; i++) assert_int_equal(pthread_create(&th[i], NULL, first_call, &args[i]), 0);
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  float *y0 = malloc(TR * TN * sizeof(float)), *yi = malloc(TR * TN * sizeof(float));
  for (int i = 0; i < T; i++) {
    if (args[i].status != NG_SUCCESS) fail_msg("thread %d: %s", i, ng_status_name(args[i].status));
    ng_test_download(args[i].y, NG_BF16, 0, TR * TN, i ? yi : y0);
    if (i) assert_memory_equal(y0, yi, TR * TN * sizeof(float));
  }
  ng_context_stats st;
  NG_OK(ng_context_get_stats(ctx, &st));
  assert_int_equal(st.programs_cached, 1); /* first insert won; the other copies were dropped */
  /* each first look-up was a build, a load from the on-disk cache, or a memory hit */
  assert_true(st.programs_built + st.disk_hits >= 1 && st.programs_built + st.disk_hits <= T);
  assert_int_equal(st.programs_built + st.disk_hits + st.cache_hits, T);
  /* a second call builds nothing */
  first_call(&args[0]);
  NG_OK(args[0].status);
  ng_context_stats st2;
  NG_OK(ng_context_get_stats(ctx, &st2));
  assert_int_equal(st2.programs_built, st.programs_built);
  assert_int_equal(st2.disk_hits, st.disk_hits);
  assert_int_equal(st2.cache_hits, st.cache_hits + 1);
  for (int i = 0; i < T; i++) {
    clReleaseMemObject(args[i].x), clReleaseMemObject(args[i].w);
    clReleaseMemObject(args[i].y), clReleaseMemObject(args[i].r);
    clReleaseCommandQueue(args[i].q);
  }
  free(x), free(w), free(y0), free(yi);
  ng_context_release(ctx);
}

static void test_profile(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  cl_int err;
  cl_command_queue pq = clCreateCommandQueue(e->cl_ctx, e->device, CL_QUEUE_PROFILING_ENABLE, &err);
  assert_non_null(pq);
  cl_mem x = ng_test_upload(NG_F32, NULL, 1024, 0, 0), y = ng_test_upload(NG_F32, NULL, 1024, 0, 0);
  cl_mem r = ng_test_upload(NG_F32, NULL, 4, 0, 0), dw = ng_test_upload(NG_F32, NULL, 256, 0, 0);
  cl_mem w = ng_test_upload(NG_F32, NULL, 256, 0, 0);
  ng_rmsnorm_params p = {4, 256, 1e-6f, 0, NG_CAST_LLAMA};
  /* the dW reduction as its own kernel, whatever this device's default (counted below) */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, 1));
  NG_OK(ng_profile_begin());
  NG_OK(ng_rmsnorm_forward(e->ctx, pq, &p, ng_tensor_of(x, 0, NG_F32), ng_tensor_of(w, 0, NG_F32),
                           ng_tensor_of(y, 0, NG_F32), ng_tensor_of(r, 0, NG_F32), 0, NULL, NULL));
  NG_OK(ng_rmsnorm_backward(e->ctx, pq, &p, ng_tensor_of(x, 0, NG_F32), ng_tensor_of(x, 0, NG_F32),
                            ng_tensor_of(w, 0, NG_F32), ng_tensor_of(r, 0, NG_F32),
                            ng_tensor_of(y, 0, NG_F32), ng_tensor_of(dw, 0, NG_F32), 0,
                            ng_tensor_none(), 0, NULL, NULL));
  cl_ulong ns = 0;
  unsigned k = 0;
  NG_OK(ng_profile_end(&ns, &k));
  assert_int_equal(k, 3); /* forward, backward, dW reduction */
  assert_true(ns > 0);
  NG_EXPECT_STATUS(ng_profile_end(&ns, &k), NG_ERR_INVALID_VALUE);

  /* each kernel's time and name, in enqueue order; the times add up to the total; a cap below
   * the count fills only the first entries; either array may be NULL */
  for (unsigned cap = 0; cap <= 4; cap++) {
    NG_OK(ng_profile_begin());
    NG_OK(ng_rmsnorm_forward(e->ctx, pq, &p, ng_tensor_of(x, 0, NG_F32),
                             ng_tensor_of(w, 0, NG_F32), ng_tensor_of(y, 0, NG_F32),
                             ng_tensor_of(r, 0, NG_F32), 0, NULL, NULL));
    NG_OK(ng_rmsnorm_backward(e->ctx, pq, &p, ng_tensor_of(x, 0, NG_F32),
                              ng_tensor_of(x, 0, NG_F32), ng_tensor_of(w, 0, NG_F32),
                              ng_tensor_of(r, 0, NG_F32), ng_tensor_of(y, 0, NG_F32),
                              ng_tensor_of(dw, 0, NG_F32), 0, ng_tensor_none(), 0, NULL, NULL));
    cl_ulong each[4] = {~0ull, ~0ull, ~0ull, ~0ull};
    const char *names[4] = {"unset", "unset", "unset", "unset"};
    ns = 0, k = 0;
    if (cap == 1) NG_OK(ng_profile_end_each(&ns, &k, NULL, names, cap));
    else if (cap == 2) NG_OK(ng_profile_end_each(&ns, &k, each, NULL, cap));
    else NG_OK(ng_profile_end_each(&ns, &k, each, names, cap));
    assert_int_equal(k, 3);
    static const char *const want[] = {"ng_rmsnorm_fwd", "ng_rmsnorm_bwd", "ng_reduce_partials"};
    cl_ulong sum = 0;
    for (unsigned i = 0; i < 4; i++) {
      const bool filled = i < cap && i < k;
      if (cap != 2) assert_string_equal(names[i], filled ? want[i] : "unset");
      if (cap != 1) assert_true(filled ? each[i] <= ns : each[i] == ~0ull);
      if (filled && cap != 1) sum += each[i];
    }
    if (cap >= 3) assert_true(sum == ns);
  }
  /* summed in the backward kernel (NG_TUNE_FUSED_REDUCE = 2, with the GPU shape): one kernel */
  NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, 2));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, 32));
  NG_OK(ng_profile_begin());
  NG_OK(ng_rmsnorm_backward(e->ctx, pq, &p, ng_tensor_of(x, 0, NG_F32), ng_tensor_of(x, 0, NG_F32),
                            ng_tensor_of(w, 0, NG_F32), ng_tensor_of(r, 0, NG_F32),
                            ng_tensor_of(y, 0, NG_F32), ng_tensor_of(dw, 0, NG_F32), 0,
                            ng_tensor_none(), 0, NULL, NULL));
  const char *name1[1] = {"unset"};
  NG_OK(ng_profile_end_each(&ns, &k, NULL, name1, 1));
  assert_int_equal(k, 1);
  assert_string_equal(name1[0], "ng_rmsnorm_bwd");
  NG_OK(ng_context_override(e->ctx, NG_TUNE_FUSED_REDUCE, NG_TUNE_AUTO));
  NG_OK(ng_context_override(e->ctx, NG_TUNE_WORKGROUP, NG_TUNE_AUTO));
  clReleaseMemObject(x), clReleaseMemObject(y), clReleaseMemObject(r), clReleaseMemObject(dw);
  clReleaseMemObject(w);
  clReleaseCommandQueue(pq);
}

/* ---- validation: each bad call returns its code and writes nothing ------------------------------- */
enum { VR = 4, VN = 64, VG = 8 };
typedef struct vbufs {
  cl_mem x, w, y, r, dy, dx, dw, small, other_ctx;
  cl_context other;
} vbufs;

static void vbufs_make(vbufs *b) {
  ng_test_env *e = ng_test_env_get();
  ng_rng rng;
  ng_rng_seed(&rng, 3);
  float *x = ng_test_random(&rng, NG_F32, VR * VN, 0, 1);
  b->x = ng_test_upload(NG_BF16, x, VR * VN, 0, VG);
  b->dy = ng_test_upload(NG_BF16, x, VR * VN, 0, VG);
  b->w = ng_test_upload(NG_F32, x, VN, 0, VG);
  b->r = ng_test_upload(NG_F32, x, VR, 0, VG);
  b->y = ng_test_upload(NG_BF16, NULL, VR * VN, 0, VG);
  b->dx = ng_test_upload(NG_BF16, NULL, VR * VN, 0, VG);
  b->dw = ng_test_upload(NG_F32, NULL, VN, 0, VG);
  b->small = ng_test_upload(NG_BF16, NULL, VR * VN - 1, 0, 0);
  cl_int err;
  b->other = clCreateContext(NULL, 1, &e->device, NULL, NULL, &err);
  b->other_ctx = clCreateBuffer(b->other, CL_MEM_READ_WRITE, VR * VN * 4, NULL, &err);
  free(x);
}

static void vbufs_free(vbufs *b) {
  cl_mem all[] = {b->x, b->w, b->y, b->r, b->dy, b->dx, b->dw, b->small, b->other_ctx};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++) clReleaseMemObject(all[i]);
  clReleaseContext(b->other);
}

/* Outputs still hold the poison everywhere. */
static void assert_untouched(const vbufs *b, const char *what) {
  if (!ng_test_guard_intact(b->y, NG_BF16, 0, 0, VR * VN + VG) ||
      !ng_test_guard_intact(b->dx, NG_BF16, 0, 0, VR * VN + VG) ||
      !ng_test_guard_intact(b->dw, NG_F32, 0, 0, VN + VG))
    fail_msg("%s: a failed call wrote to an output", what);
}

static void test_rmsnorm_validation(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  vbufs b;
  vbufs_make(&b);
  /* r was filled with data; rstd as an output is checked through y/dx/dw only */
  const ng_rmsnorm_params ok = {VR, VN, 1e-6f, 0.0f, NG_CAST_LLAMA};
  ng_tensor X = ng_tensor_of(b.x, 0, NG_BF16), W = ng_tensor_of(b.w, 0, NG_F32),
            Y = ng_tensor_of(b.y, 0, NG_BF16), R = ng_tensor_of(b.r, 0, NG_F32),
            DY = ng_tensor_of(b.dy, 0, NG_BF16), DX = ng_tensor_of(b.dx, 0, NG_BF16),
            DW = ng_tensor_of(b.dw, 0, NG_F32), NONE = ng_tensor_none();
  cl_int err;
  cl_command_queue ooo = clCreateCommandQueue(e->cl_ctx, e->device,
                                              CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);

#define FWD(ctx, q, p, x, w, y, r) ng_rmsnorm_forward(ctx, q, p, x, w, y, r, 0, NULL, NULL)
#define BWD(p, dy, x, w, r, dx, dw, fl, sc)                                                    \
  ng_rmsnorm_backward(e->ctx, e->queue, p, dy, x, w, r, dx, dw, fl, sc, 0, NULL, NULL)
  struct {
    const char *what;
    ng_status got, want;
  } cases[64];
  int nc = 0;
#define CASE(desc, call, code)                                                                   \
  do {                                                                                           \
    cases[nc].what = desc;                                                                       \
    cases[nc].got = (call);                                                                      \
    cases[nc].want = code;                                                                       \
    nc++;                                                                                        \
  } while (0)
  ng_rmsnorm_params p;
  NG_OK(ng_profile_begin()); /* counts what the failed calls enqueue: must be nothing */
  CASE("NULL ctx", FWD(NULL, e->queue, &ok, X, W, Y, R), NG_ERR_NULL_HANDLE);
  CASE("NULL queue", FWD(e->ctx, NULL, &ok, X, W, Y, R), NG_ERR_NULL_HANDLE);
  CASE("NULL params", FWD(e->ctx, e->queue, NULL, X, W, Y, R), NG_ERR_NULL_HANDLE);
  if (ooo) CASE("out-of-order queue", FWD(e->ctx, ooo, &ok, X, W, Y, R), NG_ERR_UNSUPPORTED_QUEUE);
  CASE("NULL x", FWD(e->ctx, e->queue, &ok, NONE, W, Y, R), NG_ERR_NULL_BUFFER);
  CASE("NULL y", FWD(e->ctx, e->queue, &ok, X, W, NONE, R), NG_ERR_NULL_BUFFER);
  CASE("NULL rstd", FWD(e->ctx, e->queue, &ok, X, W, Y, NONE), NG_ERR_NULL_BUFFER);
  CASE("x one element too small", FWD(e->ctx, e->queue, &ok, ng_tensor_of(b.small, 0, NG_BF16), W, Y, R),
       NG_ERR_BUFFER_TOO_SMALL);
  CASE("x offset past the end", FWD(e->ctx, e->queue, &ok, ng_tensor_of(b.x, 100000, NG_BF16), W, Y, R),
       NG_ERR_OFFSET_OUT_OF_RANGE);
  CASE("y offset too large", FWD(e->ctx, e->queue, &ok, X, W, ng_tensor_of(b.y, VG + 1, NG_BF16), R),
       NG_ERR_BUFFER_TOO_SMALL);
  CASE("weight too small", FWD(e->ctx, e->queue, &ok, X, ng_tensor_of(b.w, VG + 1, NG_F32), Y, R),
       NG_ERR_BUFFER_TOO_SMALL);
  CASE("offset overflow", FWD(e->ctx, e->queue, &ok, ng_tensor_of(b.x, SIZE_MAX / 2, NG_BF16), W, Y, R),
       NG_ERR_INDEX_OVERFLOW);
  p = ok, p.rows = 0;
  CASE("rows = 0", FWD(e->ctx, e->queue, &p, X, W, Y, R), NG_ERR_INVALID_SHAPE);
  p = ok, p.n = 0;
  CASE("n = 0", FWD(e->ctx, e->queue, &p, X, W, Y, R), NG_ERR_INVALID_SHAPE);
  p = ok, p.rows = (size_t)1 << 33;
  CASE("rows beyond 2^32", FWD(e->ctx, e->queue, &p, X, W, Y, R), NG_ERR_INDEX_OVERFLOW);
  p = ok, p.rows = SIZE_MAX / 2, p.n = 4;
  CASE("rows*n overflow", FWD(e->ctx, e->queue, &p, X, W, Y, R), NG_ERR_INDEX_OVERFLOW);
  p = ok, p.eps = -1;
  CASE("negative eps", FWD(e->ctx, e->queue, &p, X, W, Y, R), NG_ERR_INVALID_VALUE);
  p = ok, p.eps = NAN;
  CASE("NaN eps", FWD(e->ctx, e->queue, &p, X, W, Y, R), NG_ERR_INVALID_VALUE);
  p = ok, p.offset = INFINITY;
  CASE("infinite offset", FWD(e->ctx, e->queue, &p, X, W, Y, R), NG_ERR_INVALID_VALUE);
  p = ok, p.casting_mode = (ng_casting_mode)7;
  CASE("bad casting mode", FWD(e->ctx, e->queue, &p, X, W, Y, R), NG_ERR_INVALID_VALUE);
  CASE("x dtype i32", FWD(e->ctx, e->queue, &ok, ng_tensor_of(b.x, 0, NG_I32), W, Y, R),
       NG_ERR_UNSUPPORTED_DTYPE);
  CASE("x dtype 99", FWD(e->ctx, e->queue, &ok, ng_tensor_of(b.x, 0, (ng_dtype)99), W, Y, R),
       NG_ERR_UNSUPPORTED_DTYPE);
  CASE("y dtype differs", FWD(e->ctx, e->queue, &ok, X, W, ng_tensor_of(b.y, 0, NG_F16), R),
       NG_ERR_DTYPE_MISMATCH);
  CASE("rstd not f32", FWD(e->ctx, e->queue, &ok, X, W, Y, ng_tensor_of(b.r, 0, NG_BF16)),
       NG_ERR_UNSUPPORTED_DTYPE);
  CASE("buffer of another context", FWD(e->ctx, e->queue, &ok, X, W, ng_tensor_of(b.other_ctx, 0, NG_BF16), R),
       CL_INVALID_CONTEXT);
  CASE("backward NULL dy", BWD(&ok, NONE, X, W, R, DX, DW, 0, NONE), NG_ERR_NULL_BUFFER);
  CASE("backward NULL dx", BWD(&ok, DY, X, W, R, NONE, DW, 0, NONE), NG_ERR_NULL_BUFFER);
  CASE("backward dy too small", BWD(&ok, ng_tensor_of(b.small, 0, NG_BF16), X, W, R, DX, DW, 0, NONE),
       NG_ERR_BUFFER_TOO_SMALL);
  CASE("backward dx dtype differs", BWD(&ok, DY, X, W, R, ng_tensor_of(b.dx, 0, NG_F16), DW, 0, NONE),
       NG_ERR_DTYPE_MISMATCH);
  CASE("backward dweight without weight", BWD(&ok, DY, X, NONE, R, DX, DW, 0, NONE),
       NG_ERR_INVALID_VALUE);
  CASE("backward dweight dtype differs", BWD(&ok, DY, X, W, R, DX, ng_tensor_of(b.dw, 0, NG_BF16), 0, NONE),
       NG_ERR_DTYPE_MISMATCH);
  CASE("backward dweight too small", BWD(&ok, DY, X, W, R, DX, ng_tensor_of(b.dw, VG + 1, NG_F32), 0, NONE),
       NG_ERR_BUFFER_TOO_SMALL);
  CASE("backward unknown flag", BWD(&ok, DY, X, W, R, DX, DW, 0x80, NONE), NG_ERR_INVALID_VALUE);
  CASE("backward rstd too small", BWD(&ok, DY, X, W, ng_tensor_of(b.r, VG + 1, NG_F32), DX, DW, 0, NONE),
       NG_ERR_BUFFER_TOO_SMALL);
  CASE("backward scratch too small", BWD(&ok, DY, X, W, R, DX, DW, 0, ng_tensor_of(b.r, 0, NG_F32)),
       NG_ERR_BUFFER_TOO_SMALL);
  CASE("backward scratch not f32", BWD(&ok, DY, X, W, R, DX, DW, 0, ng_tensor_of(b.dx, 0, NG_BF16)),
       NG_ERR_UNSUPPORTED_DTYPE);
  p = ok, p.n = VN + VG;
  CASE("backward shape beyond x", BWD(&p, DY, X, W, R, DX, DW, 0, NONE), NG_ERR_BUFFER_TOO_SMALL);
  size_t bytes;
  CASE("scratch size NULL out", ng_rmsnorm_backward_scratch_size(e->ctx, &ok, 1, NULL), NG_ERR_NULL_HANDLE);
  p = ok, p.n = 0;
  CASE("scratch size n = 0", ng_rmsnorm_backward_scratch_size(e->ctx, &p, 1, &bytes), NG_ERR_INVALID_SHAPE);

  cl_ulong prof_ns = 0;
  unsigned enqueued = 99;
  NG_OK(ng_profile_end(&prof_ns, &enqueued));
  assert_int_equal(enqueued, 0);
  CL_OK(clFinish(e->queue));
  for (int i = 0; i < nc; i++) {
    if (cases[i].got != cases[i].want)
      fail_msg("%s: got %s, want %s", cases[i].what, ng_status_name(cases[i].got),
               ng_status_name(cases[i].want));
  }
  assert_untouched(&b, "validation");
  /* the detail names the argument */
  BWD(&ok, DY, X, W, R, DX, ng_tensor_of(b.dw, VG + 1, NG_F32), 0, NONE);
  assert_non_null(strstr(ng_last_error_detail(), "dweight"));
  if (ooo) clReleaseCommandQueue(ooo);
  vbufs_free(&b);
}

static int teardown(void **state) {
  (void)state;
  ng_test_env_release();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_names),  cmocka_unit_test(test_context_api),
      cmocka_unit_test(test_cache_threads), cmocka_unit_test(test_profile),
      cmocka_unit_test(test_rmsnorm_validation),
  };
  return NG_RUN_GROUP_TESTS(tests, NULL, teardown);
}
