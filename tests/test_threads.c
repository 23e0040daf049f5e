/* Eight threads make the first calls of several ops on ONE fresh ng_context at once, each with
 * its own in-order queue and buffers, released from a barrier together so their program
 * look-ups, builds and cache inserts overlap. Every thread's results must be bit-identical to a
 * single-threaded run on another context, and the shared cache must end as the single-threaded
 * one did: the same programs, one copy each, after eight times the look-ups. Built as usual
 * (every test build runs it) and, in CI, with ThreadSanitizer (-DNG_TSAN=ON; tests/tsan.supp
 * may silence only PoCL's, LLVM's and the ICD loader's own frames).
 *
 * Ops: RMSNorm forward; RMSNorm backward with dW (and its reduction pass), with frozen weight,
 * and accumulating dW, each in a different dtype so that each needs programs of its own;
 * fused add + RMSNorm, LayerNorm, GroupNorm and PolyNorm forward + backward; FLCE (CLBlast
 * GEMMs included). */
#include "ng_test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { THREADS = 8, NOPS = 9, MAXB = 12, MAXOUT = 6 };

/* One op's buffers for one thread: inputs hold data, outputs poison (or data, for accumulated
 * gradients). `outs` lists what the op writes: index into mem, dtype, element count. */
typedef struct op_bufs {
  cl_mem mem[MAXB];
  int n;
  struct {
    int i;
    ng_dtype dt;
    size_t count;
  } outs[MAXOUT];
  int nouts;
} op_bufs;

typedef struct op_desc {
  const char *name;
  void (*make)(op_bufs *b);
  ng_status (*run)(ng_context *ctx, cl_command_queue q, const op_bufs *b);
} op_desc;

static float *data; /* shared read-only input values (bf16-rounded: exact in every dtype) */
enum { DATA = 4096 };

static int add(op_bufs *b, ng_dtype dt, size_t count, bool filled) {
  b->mem[b->n] = ng_test_upload(dt, filled ? data : NULL, count, 0, 0);
  return b->n++;
}
static void out(op_bufs *b, int i, ng_dtype dt, size_t count) {
  b->outs[b->nouts].i = i;
  b->outs[b->nouts].dt = dt;
  b->outs[b->nouts].count = count;
  b->nouts++;
}
#define T(b, i, dt) ng_tensor_of((b)->mem[i], 0, dt)

/* ---- RMSNorm: x[24, 72] ---------------------------------------------------------------------- */
enum { RR = 24, RN = 72 };
static const ng_dtype rms_x[4] = {NG_BF16, NG_F32, NG_F16, NG_BF16};
static const ng_dtype rms_w[4] = {NG_F32, NG_F32, NG_BF16, NG_BF16};

static void rms_make(op_bufs *b, int op) {
  add(b, rms_x[op], RR * RN, true);     /* 0 x */
  add(b, rms_w[op], RN, true);          /* 1 weight */
  add(b, rms_x[op], RR * RN, true);     /* 2 dy */
  int r = add(b, NG_F32, RR, op != 0);  /* 3 rstd (forward's output) */
  int o = add(b, rms_x[op], RR * RN, false); /* 4 y or dx */
  int w = add(b, rms_w[op], RN, op == 3);    /* 5 dweight (accumulated onto data) */
  out(b, o, rms_x[op], RR * RN);
  if (op == 0) out(b, r, NG_F32, RR);
  if (op == 1 || op == 3) out(b, w, rms_w[op], RN);
}
static void rms_make0(op_bufs *b) { rms_make(b, 0); }
static void rms_make1(op_bufs *b) { rms_make(b, 1); }
static void rms_make2(op_bufs *b) { rms_make(b, 2); }
static void rms_make3(op_bufs *b) { rms_make(b, 3); }

static ng_status rms_run(ng_context *ctx, cl_command_queue q, const op_bufs *b, int op) {
  const ng_rmsnorm_params p = {RR, RN, 1e-6f, op == 2 ? 1.0f : 0.0f, (ng_casting_mode)(op % 3)};
  const ng_dtype xd = rms_x[op], wd = rms_w[op];
  if (op == 0)
    return ng_rmsnorm_forward(ctx, q, &p, T(b, 0, xd), T(b, 1, wd), T(b, 4, xd),
                              T(b, 3, NG_F32), 0, NULL, NULL);
  return ng_rmsnorm_backward(ctx, q, &p, T(b, 2, xd), T(b, 0, xd), T(b, 1, wd), T(b, 3, NG_F32),
                             T(b, 4, xd), op == 2 ? ng_tensor_none() : T(b, 5, wd),
                             op == 3 ? NG_ACCUMULATE_GRAD : 0, ng_tensor_none(), 0, NULL, NULL);
}
#define RMS_RUN(k)                                                                               \
  static ng_status rms_run##k(ng_context *c, cl_command_queue q, const op_bufs *b) {            \
    return rms_run(c, q, b, k);                                                                  \
  }
RMS_RUN(0)
RMS_RUN(1)
RMS_RUN(2)
RMS_RUN(3)

/* ---- fused add + RMSNorm: x, residual[10, 48] bf16, f32 weight, ds_out ----------------------- */
enum { FR = 10, FN = 48 };
static void far_make(op_bufs *b) {
  add(b, NG_BF16, FR * FN, true);                            /* 0 x */
  add(b, NG_BF16, FR * FN, true);                            /* 1 residual */
  add(b, NG_F32, FN, true);                                  /* 2 weight */
  add(b, NG_BF16, FR * FN, true);                            /* 3 dy */
  add(b, NG_BF16, FR * FN, true);                            /* 4 ds_out */
  out(b, add(b, NG_BF16, FR * FN, false), NG_BF16, FR * FN); /* 5 y */
  out(b, add(b, NG_BF16, FR * FN, false), NG_BF16, FR * FN); /* 6 s */
  out(b, add(b, NG_F32, FR, false), NG_F32, FR);             /* 7 rstd */
  out(b, add(b, NG_BF16, FR * FN, false), NG_BF16, FR * FN); /* 8 dx */
  out(b, add(b, NG_F32, FN, false), NG_F32, FN);             /* 9 dweight */
}
static ng_status far_run(ng_context *ctx, cl_command_queue q, const op_bufs *b) {
  const ng_fused_add_rmsnorm_params p = {FR, FN, 1e-6f, 0.0f, NG_CAST_LLAMA};
  ng_status s = ng_fused_add_rmsnorm_forward(ctx, q, &p, T(b, 0, NG_BF16), T(b, 1, NG_BF16),
                                             T(b, 2, NG_F32), T(b, 5, NG_BF16), T(b, 6, NG_BF16),
                                             T(b, 7, NG_F32), 0, NULL, NULL);
  if (s != NG_SUCCESS) return s;
  return ng_fused_add_rmsnorm_backward(ctx, q, &p, T(b, 3, NG_BF16), T(b, 4, NG_BF16),
                                       T(b, 6, NG_BF16), T(b, 2, NG_F32), T(b, 7, NG_F32),
                                       T(b, 8, NG_BF16), T(b, 9, NG_F32), 0, ng_tensor_none(), 0,
                                       NULL, NULL);
}

/* ---- LayerNorm: x[12, 56] f16, bf16 weight and bias, dW and dB ----------------------------- */
enum { LR = 12, LN = 56 };
static void ln_make(op_bufs *b) {
  add(b, NG_F16, LR * LN, true);                           /* 0 x */
  add(b, NG_BF16, LN, true);                               /* 1 weight */
  add(b, NG_BF16, LN, true);                               /* 2 bias */
  add(b, NG_F16, LR * LN, true);                           /* 3 dy */
  out(b, add(b, NG_F16, LR * LN, false), NG_F16, LR * LN); /* 4 y */
  out(b, add(b, NG_F32, LR, false), NG_F32, LR);           /* 5 mean */
  out(b, add(b, NG_F32, LR, false), NG_F32, LR);           /* 6 rstd */
  out(b, add(b, NG_F16, LR * LN, false), NG_F16, LR * LN); /* 7 dx */
  out(b, add(b, NG_BF16, LN, false), NG_BF16, LN);         /* 8 dweight */
  out(b, add(b, NG_BF16, LN, false), NG_BF16, LN);         /* 9 dbias */
}
static ng_status ln_run(ng_context *ctx, cl_command_queue q, const op_bufs *b) {
  const ng_layernorm_params p = {LR, LN, 1e-5f};
  ng_status s = ng_layernorm_forward(ctx, q, &p, T(b, 0, NG_F16), T(b, 1, NG_BF16),
                                     T(b, 2, NG_BF16), T(b, 4, NG_F16), T(b, 5, NG_F32),
                                     T(b, 6, NG_F32), 0, NULL, NULL);
  if (s != NG_SUCCESS) return s;
  return ng_layernorm_backward(ctx, q, &p, T(b, 3, NG_F16), T(b, 0, NG_F16), T(b, 1, NG_BF16),
                               T(b, 2, NG_BF16), T(b, 5, NG_F32), T(b, 6, NG_F32),
                               T(b, 7, NG_F16), T(b, 8, NG_BF16), T(b, 9, NG_BF16), 0,
                               ng_tensor_none(), 0, NULL, NULL);
}

/* ---- GroupNorm: x[3, 8, 20], 4 groups, bf16 x, f32 weight and bias --------------------------- */
enum { GB = 3, GC = 8, GS = 20, GG = 4 };
static void gn_make(op_bufs *b) {
  add(b, NG_BF16, GB * GC * GS, true);                                 /* 0 x */
  add(b, NG_F32, GC, true);                                            /* 1 weight */
  add(b, NG_F32, GC, true);                                            /* 2 bias */
  add(b, NG_BF16, GB * GC * GS, true);                                 /* 3 dy */
  out(b, add(b, NG_F32, GB * GG, false), NG_F32, GB * GG);             /* 4 mean */
  out(b, add(b, NG_F32, GB * GG, false), NG_F32, GB * GG);             /* 5 rstd */
  out(b, add(b, NG_BF16, GB * GC * GS, false), NG_BF16, GB * GC * GS); /* 6 y */
  out(b, add(b, NG_BF16, GB * GC * GS, false), NG_BF16, GB * GC * GS); /* 7 dx */
  out(b, add(b, NG_F32, GC, false), NG_F32, GC);                       /* 8 dweight */
  out(b, add(b, NG_F32, GC, false), NG_F32, GC);                       /* 9 dbias */
}
static ng_status gn_run(ng_context *ctx, cl_command_queue q, const op_bufs *b) {
  const ng_groupnorm_params p = {GB, GC, GS, GG, 1e-5f};
  ng_status s = ng_groupnorm_forward(ctx, q, &p, T(b, 0, NG_BF16), T(b, 1, NG_F32), T(b, 2, NG_F32),
                                     T(b, 6, NG_BF16), T(b, 4, NG_F32), T(b, 5, NG_F32),
                                     ng_tensor_none(), 0, NULL, NULL);
  if (s != NG_SUCCESS) return s;
  return ng_groupnorm_backward(ctx, q, &p, T(b, 3, NG_BF16), T(b, 0, NG_BF16), T(b, 1, NG_F32),
                               T(b, 4, NG_F32), T(b, 5, NG_F32), T(b, 7, NG_BF16),
                               T(b, 8, NG_F32), T(b, 9, NG_F32), 0, ng_tensor_none(), 0, NULL,
                               NULL);
}

/* ---- PolyNorm: x[16, 40] f32, dW and dB --------------------------------------------------- */
enum { PR = 16, PN = 40 };
static void pn_make(op_bufs *b) {
  add(b, NG_F32, PR * PN, true); /* 0 x */
  add(b, NG_F32, 3, true);       /* 1 weight */
  add(b, NG_F32, 1, true);       /* 2 bias */
  add(b, NG_F32, PR * PN, true); /* 3 dy */
  out(b, add(b, NG_F32, PR * PN, false), NG_F32, PR * PN); /* 4 y */
  out(b, add(b, NG_F32, PR * 3, false), NG_F32, PR * 3);   /* 5 rstd */
  out(b, add(b, NG_F32, PR * PN, false), NG_F32, PR * PN); /* 6 dx */
  out(b, add(b, NG_F32, 3, false), NG_F32, 3);             /* 7 dweight */
  out(b, add(b, NG_F32, 1, false), NG_F32, 1);             /* 8 dbias */
}
static ng_status pn_run(ng_context *ctx, cl_command_queue q, const op_bufs *b) {
  const ng_polynorm_params p = {PR, PN, 1e-6f};
  ng_status s = ng_polynorm_forward(ctx, q, &p, T(b, 0, NG_F32), T(b, 1, NG_F32), T(b, 2, NG_F32),
                                    T(b, 4, NG_F32), T(b, 5, NG_F32), 0, NULL, NULL);
  if (s != NG_SUCCESS) return s;
  return ng_polynorm_backward(ctx, q, &p, T(b, 3, NG_F32), T(b, 0, NG_F32), T(b, 1, NG_F32),
                              T(b, 5, NG_F32), T(b, 6, NG_F32), T(b, 7, NG_F32), T(b, 8, NG_F32),
                              0, ng_tensor_none(), 0, NULL, NULL);
}

/* ---- FLCE: input[12, 16] f32, weight[40, 16], bias, mean reduction, all three gradients ------ */
enum { FB = 12, FH = 16, FV = 40 };
static void flce_make(op_bufs *b) {
  add(b, NG_F32, FB * FH, true); /* 0 input */
  add(b, NG_F32, FV * FH, true); /* 1 weight */
  int32_t tg[FB];
  for (int i = 0; i < FB; i++) tg[i] = i == 5 ? -100 : (i * 7) % FV;
  cl_int err = CL_SUCCESS;
  b->mem[b->n++] = clCreateBuffer(ng_test_env_get()->cl_ctx,
                                  CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof tg, tg, &err);
  assert_non_null(b->mem[2]);                              /* 2 target (i32) */
  add(b, NG_F32, FV, true);                                /* 3 bias */
  out(b, add(b, NG_F32, 1, false), NG_F32, 1);             /* 4 loss */
  out(b, add(b, NG_F32, FB * FH, false), NG_F32, FB * FH); /* 5 dinput */
  out(b, add(b, NG_F32, FV * FH, false), NG_F32, FV * FH); /* 6 dweight */
  out(b, add(b, NG_F32, FV, false), NG_F32, FV);           /* 7 dbias */
}
static ng_status flce_run(ng_context *ctx, cl_command_queue q, const op_bufs *b) {
  ng_flce_params p = ng_flce_params_default(FB, FH, FV);
  p.label_smoothing = 0.1f;
  ng_flce_tensors t;
  memset(&t, 0, sizeof t);
  t.input = T(b, 0, NG_F32);
  t.weight = T(b, 1, NG_F32);
  t.target = T(b, 2, NG_I32);
  t.bias = T(b, 3, NG_F32);
  t.loss = T(b, 4, NG_F32);
  t.dinput = T(b, 5, NG_F32);
  t.dweight = T(b, 6, NG_F32);
  t.dbias = T(b, 7, NG_F32);
  t.ce_weight = t.grad_output = t.z_loss = t.accuracy = t.scratch = ng_tensor_none();
  return ng_flce(ctx, q, &p, &t, 0, NULL, 0, NULL, NULL);
}

static const op_desc ops[NOPS] = {
    {"rmsnorm forward", rms_make0, rms_run0},
    {"rmsnorm backward + dW", rms_make1, rms_run1},
    {"rmsnorm backward, frozen weight", rms_make2, rms_run2},
    {"rmsnorm backward, dW accumulated", rms_make3, rms_run3},
    {"fused add + rmsnorm forward + backward", far_make, far_run},
    {"layernorm forward + backward", ln_make, ln_run},
    {"groupnorm forward + backward", gn_make, gn_run},
    {"polynorm forward + backward", pn_make, pn_run},
    {"flce", flce_make, flce_run},
};

static void free_bufs(op_bufs *b) {
  for (int i = 0; i < b->n; i++) clReleaseMemObject(b->mem[i]);
}

/* Every output of the op, converted to floats, one after the other. */
static float *results(const op_bufs *b, size_t *count) {
  size_t total = 0;
  for (int k = 0; k < b->nouts; k++) total += b->outs[k].count;
  float *v = malloc(total * sizeof *v);
  assert_non_null(v);
  size_t at = 0;
  for (int k = 0; k < b->nouts; k++) {
    ng_test_download(b->mem[b->outs[k].i], b->outs[k].dt, 0, b->outs[k].count, v + at);
    at += b->outs[k].count;
  }
  *count = total;
  return v;
}

typedef struct worker {
  ng_context *ctx;
  cl_command_queue q;
  op_bufs b[NOPS];
  int first; /* op this thread starts with */
  pthread_barrier_t *start;
  ng_status status;
  int failed_op;
} worker;

static void *work(void *arg) {
  worker *wk = arg;
  wk->status = NG_SUCCESS;
  wk->failed_op = -1;
  pthread_barrier_wait(wk->start);
  for (int k = 0; k < NOPS && wk->status == NG_SUCCESS; k++) {
    const int op = (wk->first + k) % NOPS;
    wk->status = ops[op].run(wk->ctx, wk->q, &wk->b[op]);
    if (wk->status != NG_SUCCESS) wk->failed_op = op;
  }
  cl_int e = clFinish(wk->q);
  if (wk->status == NG_SUCCESS) wk->status = e;
  return NULL;
}

static uint64_t lookups(const ng_context_stats *st) {
  return st->programs_built + st->cache_hits + st->disk_hits;
}

static void test_first_calls_from_eight_threads(void **state) {
  (void)state;
  ng_test_env *e = ng_test_env_get();
  ng_rng rng;
  ng_rng_seed(&rng, 77);
  data = ng_test_random(&rng, NG_BF16, DATA, 0.1, 1.0);

  /* single-threaded results on a context of their own */
  float *want[NOPS];
  size_t want_n[NOPS];
  ng_context_stats ref_st;
  {
    ng_context *ref = NULL;
    NG_OK(ng_context_create(e->cl_ctx, e->device, &ref));
    for (int op = 0; op < NOPS; op++) {
      op_bufs b;
      memset(&b, 0, sizeof b);
      ops[op].make(&b);
      ng_status s = ops[op].run(ref, e->queue, &b);
      if (s != NG_SUCCESS)
        fail_msg("%s: %s: %s", ops[op].name, ng_status_name(s), ng_last_error_detail());
      CL_OK(clFinish(e->queue));
      want[op] = results(&b, &want_n[op]);
      free_bufs(&b);
    }
    NG_OK(ng_context_get_stats(ref, &ref_st));
    ng_context_release(ref);
  }

  ng_context *ctx = NULL;
  NG_OK(ng_context_create(e->cl_ctx, e->device, &ctx));
  pthread_barrier_t start;
  assert_int_equal(pthread_barrier_init(&start, NULL, THREADS), 0);
  worker wk[THREADS];
  pthread_t th[THREADS];
  memset(wk, 0, sizeof wk);
  for (int t = 0; t < THREADS; t++) {
    cl_int err = CL_SUCCESS;
    wk[t].ctx = ctx;
    wk[t].q = clCreateCommandQueue(e->cl_ctx, e->device, 0, &err);
    assert_non_null(wk[t].q);
    for (int op = 0; op < NOPS; op++) ops[op].make(&wk[t].b[op]);
    wk[t].first = t % NOPS;
    wk[t].start = &start;
  }
  for (int t = 0; t < THREADS; t++) assert_int_equal(pthread_create(&th[t], NULL, work, &wk[t]), 0);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&start);

  for (int t = 0; t < THREADS; t++) {
    if (wk[t].status != NG_SUCCESS)
      fail_msg("thread %d, %s: %s", t, wk[t].failed_op >= 0 ? ops[wk[t].failed_op].name : "finish",
               ng_status_name(wk[t].status));
    for (int op = 0; op < NOPS; op++) {
      size_t n = 0;
      float *got = results(&wk[t].b[op], &n);
      assert_int_equal(n, want_n[op]);
      if (memcmp(got, want[op], n * sizeof(float)) != 0)
        fail_msg("thread %d: %s differs from the single-threaded run", t, ops[op].name);
      free(got);
    }
  }
  /* the cache ends as the single-threaded one: the same programs, one copy each (the first
   * insert won; copies other threads built or loaded from disk at the same time were dropped) */
  ng_context_stats st;
  NG_OK(ng_context_get_stats(ctx, &st));
  assert_int_equal(st.programs_cached, ref_st.programs_cached);
  assert_int_equal(lookups(&st), THREADS * lookups(&ref_st));
  /* every cached program was compiled here or loaded from the on-disk cache */
  assert_true(st.programs_built + st.disk_hits >= st.programs_cached);
  for (int t = 0; t < THREADS; t++) {
    for (int op = 0; op < NOPS; op++) free_bufs(&wk[t].b[op]);
    clReleaseCommandQueue(wk[t].q);
  }
  for (int op = 0; op < NOPS; op++) free(want[op]);
  free(data);
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
  return NG_RUN_GROUP_TESTS(tests, NULL, teardown);
}
