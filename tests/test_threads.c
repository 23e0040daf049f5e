/* Eight threads make the first calls of several ops on ONE fresh ng_context at once, each with
 * its own in-order queue and buffers, released from a barrier together so their program
 * look-ups, builds and cache inserts overlap. Every thread's results must be bit-identical to a
 * single-threaded run on another context, and the cache must end with one copy of each
 * program. Built as usual (every test build runs it) and, in CI, with ThreadSanitizer
 * (-DNG_TSAN=ON; tests/tsan.supp silences only PoCL's and LLVM's own frames).
 *
 * Ops: RMSNorm forward; backward with dW (and its reduction pass), with frozen weight, and
 * accumulating dW — each in a different dtype so that each needs programs of its own. */
#include "ng_test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { THREADS = 8, R = 24, N = 72, NOPS = 4, NOUT = 2 };

typedef struct op_bufs {
  cl_mem x, w, dy, r, out[NOUT]; /* inputs, then what the op writes */
} op_bufs;

typedef struct worker {
  ng_context *ctx;
  cl_command_queue q;
  op_bufs b[NOPS];
  int first; /* op this thread starts with */
  pthread_barrier_t *start;
  ng_status status;
  int failed_op;
} worker;

/* dtypes of x and the weight for each op, and the number of outputs it writes */
static const ng_dtype op_x[NOPS] = {NG_BF16, NG_F32, NG_F16, NG_BF16};
static const ng_dtype op_w[NOPS] = {NG_F32, NG_F32, NG_BF16, NG_BF16};
static const char *const op_name[NOPS] = {"rmsnorm forward", "rmsnorm backward + dW",
                                          "rmsnorm backward, frozen weight",
                                          "rmsnorm backward, dW accumulated"};

static float *xv, *wv, *dyv, *rv;

static void make_bufs(op_bufs *b, int op) {
  b->x = ng_test_upload(op_x[op], xv, R * N, 0, 0);
  b->w = ng_test_upload(op_w[op], wv, N, 0, 0);
  b->dy = ng_test_upload(op_x[op], dyv, R * N, 0, 0);
  b->r = ng_test_upload(NG_F32, rv, R, 0, 0);
  b->out[0] = ng_test_upload(op_x[op], NULL, R * N, 0, 0);             /* y or dx */
  b->out[1] = ng_test_upload(op == 0 ? NG_F32 : op_w[op], op == 3 ? wv : NULL,
                             op == 0 ? R : N, 0, 0);                     /* rstd or dW */
}

static void free_bufs(op_bufs *b) {
  cl_mem all[] = {b->x, b->w, b->dy, b->r, b->out[0], b->out[1]};
  for (size_t i = 0; i < NG_ARRAY_LEN(all); i++) clReleaseMemObject(all[i]);
}

static ng_status run_op(ng_context *ctx, cl_command_queue q, op_bufs *b, int op) {
  const ng_rmsnorm_params p = {R, N, 1e-6f, op == 2 ? 1.0f : 0.0f, (ng_casting_mode)(op % 3)};
  const ng_tensor x = ng_tensor_of(b->x, 0, op_x[op]), w = ng_tensor_of(b->w, 0, op_w[op]);
  const ng_tensor dy = ng_tensor_of(b->dy, 0, op_x[op]), r = ng_tensor_of(b->r, 0, NG_F32);
  const ng_tensor o0 = ng_tensor_of(b->out[0], 0, op_x[op]);
  switch (op) {
  case 0:
    return ng_rmsnorm_forward(ctx, q, &p, x, w, o0, ng_tensor_of(b->out[1], 0, NG_F32), 0, NULL,
                              NULL);
  case 1:
  case 3:
    return ng_rmsnorm_backward(ctx, q, &p, dy, x, w, r, o0, ng_tensor_of(b->out[1], 0, op_w[op]),
                               op == 3 ? NG_ACCUMULATE_GRAD : 0, ng_tensor_none(), 0, NULL,
                               NULL);
  default:
    return ng_rmsnorm_backward(ctx, q, &p, dy, x, w, r, o0, ng_tensor_none(), 0,
                               ng_tensor_none(), 0, NULL, NULL);
  }
}

static void *work(void *arg) {
  worker *wk = arg;
  wk->status = NG_SUCCESS;
  wk->failed_op = -1;
  pthread_barrier_wait(wk->start);
  for (int k = 0; k < NOPS && wk->status == NG_SUCCESS; k++) {
    const int op = (wk->first + k) % NOPS;
    wk->status = run_op(wk->ctx, wk->q, &wk->b[op], op);
    if (wk->status != NG_SUCCESS) wk->failed_op = op;
  }
  cl_int e = clFinish(wk->q);
  if (wk->status == NG_SUCCESS) wk->status = e;
  return NULL;
}

static void download_all(op_bufs *b, int op, float *o0, float *o1) {
  ng_test_download(b->out[0], op_x[op], 0, R * N, o0);
  ng_test_download(b->out[1], op == 0 ? NG_F32 : op_w[op], 0, op == 0 ? R : N, o1);
}

static void test_first_calls_from_eight_threads(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_rng rng;
  ng_rng_seed(&rng, 77);
  /* bf16-rounded values of moderate size are exact in f32, f16 and bf16 alike */
  xv = ng_test_random(&rng, NG_BF16, R * N, 0.1, 1.0);
  dyv = ng_test_random(&rng, NG_BF16, R * N, 0.0, 1.0);
  wv = ng_test_random(&rng, NG_BF16, N, 1.0, 0.25);
  rv = malloc(R * sizeof *rv);
  assert_non_null(rv);
  for (int i = 0; i < R; i++) rv[i] = 0.75f + 0.03125f * (float)i;

  /* single-threaded results on a context of their own */
  float *want0[NOPS], *want1[NOPS];
  {
    ng_context *ref = NULL;
    NG_OK(ng_context_create(e->cl_ctx, e->device, &ref));
    for (int op = 0; op < NOPS; op++) {
      op_bufs b;
      make_bufs(&b, op);
      NG_OK(run_op(ref, e->queue, &b, op));
      want0[op] = malloc(R * N * sizeof(float));
      want1[op] = malloc(R * N * sizeof(float));
      assert_true(want0[op] && want1[op]);
      download_all(&b, op, want0[op], want1[op]);
      free_bufs(&b);
    }
    ng_context_release(ref);
  }

  ng_context *ctx = NULL;
  NG_OK(ng_context_create(e->cl_ctx, e->device, &ctx));
  pthread_barrier_t start;
  assert_int_equal(pthread_barrier_init(&start, NULL, THREADS), 0);
  worker wk[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    cl_int err = CL_SUCCESS;
    wk[t].ctx = ctx;
    wk[t].q = clCreateCommandQueue(e->cl_ctx, e->device, 0, &err);
    assert_non_null(wk[t].q);
    for (int op = 0; op < NOPS; op++) make_bufs(&wk[t].b[op], op);
    wk[t].first = t % NOPS;
    wk[t].start = &start;
  }
  for (int t = 0; t < THREADS; t++) assert_int_equal(pthread_create(&th[t], NULL, work, &wk[t]), 0);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&start);

  float *got0 = malloc(R * N * sizeof(float)), *got1 = malloc(R * N * sizeof(float));
  assert_true(got0 && got1);
  for (int t = 0; t < THREADS; t++) {
    if (wk[t].status != NG_SUCCESS)
      fail_msg("thread %d, %s: %s", t, wk[t].failed_op >= 0 ? op_name[wk[t].failed_op] : "finish",
               ng_status_name(wk[t].status));
    for (int op = 0; op < NOPS; op++) {
      download_all(&wk[t].b[op], op, got0, got1);
      if (memcmp(got0, want0[op], R * N * sizeof(float)) != 0 ||
          memcmp(got1, want1[op], (op == 0 ? R : N) * sizeof(float)) != 0)
        fail_msg("thread %d: %s differs from the single-threaded run", t, op_name[op]);
    }
  }
  /* one cached copy of each program: forward, three backward variants, two reductions (f32 and
   * bf16 dW); every other look-up was a hit or a build that lost the race */
  ng_context_stats st;
  NG_OK(ng_context_get_stats(ctx, &st));
  assert_int_equal(st.programs_cached, 6);
  assert_int_equal(st.programs_built + st.cache_hits + st.disk_hits, THREADS * 6);
  for (int t = 0; t < THREADS; t++) {
    for (int op = 0; op < NOPS; op++) free_bufs(&wk[t].b[op]);
    clReleaseCommandQueue(wk[t].q);
  }
  for (int op = 0; op < NOPS; op++) free(want0[op]), free(want1[op]);
  free(got0), free(got1), free(xv), free(dyv), free(wv), free(rv);
  ng_context_release(ctx);
}

static int teardown(void **state) {
  (void)state;
  ng_test_env_release();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_first_calls_from_eight_threads),
  };
  return cmocka_run_group_tests(tests, NULL, teardown);
}
