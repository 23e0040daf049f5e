/* Several normgrad contexts alive at once in one process, each on its own device and driven by
 * its own thread (docs/data-parallel.md, "Threads and contexts"):
 *  - the devices: two sub-devices of the test device (clCreateSubDevices with
 *    CL_DEVICE_PARTITION_EQUALLY; skipped, saying so, when it cannot be partitioned), and the
 *    device itself twice, each time in a separate cl_context. The test prints which ran;
 *  - every context has its own program cache: each program it uses was built or loaded from disk
 *    by that context, none borrowed from the other; both write one fresh on-disk cache folder at
 *    the same time;
 *  - two threads, released together, run the same sequence of ops on different data, twice: the
 *    data-parallel block (RMSNorm forward → FLCE with dinput, dweight and dbias accumulated →
 *    RMSNorm backward accumulating dweight, all f32, CLBlast GEMMs included) and LayerNorm
 *    forward + backward in bf16. Every output is bit-identical to a run of the same data on one
 *    context and one thread, on an equal device (the first sub-device, or the device: launch
 *    choices depend on the compute units);
 *  - each thread's failed call leaves its own error detail, whatever the other thread does;
 *  - releasing one context (and its cl_context) leaves the other working, with the same bits. */
#include "ng_test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Block: BT rows of H, vocabulary V (not multiples of 8 or 64), some targets ignored.
 * LayerNorm: LR rows of LN. */
enum { BT = 37, H = 72, V = 333, LR = 29, LN = 200, LANES = 2 };

/* ---- one lane: a device, its OpenCL context and queue, a normgrad context, buffers ----------- */
enum {
  B_X, B_G, B_W, B_B, B_T, B_Y, B_RSTD, B_LOSS, B_DIN, B_DW, B_DB, B_DX, B_DG,
  B_LX, B_LW, B_LB, B_LDY, B_LY, B_LMEAN, B_LRSTD, B_LDX, B_LDW, B_LDB, NBUF
};
typedef struct buf_desc {
  ng_dtype dt;
  size_t count;
  bool output;   /* read back and compared */
  bool reloaded; /* rewritten from the lane's data before every run (accumulated gradients) */
} buf_desc;
static const buf_desc bufs[NBUF] = {
    [B_X] = {NG_F32, BT * H, false, false},      [B_G] = {NG_F32, H, false, false},
    [B_W] = {NG_F32, V * H, false, false},       [B_B] = {NG_F32, V, false, false},
    [B_T] = {NG_I32, BT, false, false},          [B_Y] = {NG_F32, BT * H, true, false},
    [B_RSTD] = {NG_F32, BT, true, false},        [B_LOSS] = {NG_F32, 1, true, false},
    [B_DIN] = {NG_F32, BT * H, true, false},     [B_DW] = {NG_F32, V * H, true, true},
    [B_DB] = {NG_F32, V, true, true},            [B_DX] = {NG_F32, BT * H, true, false},
    [B_DG] = {NG_F32, H, true, true},            [B_LX] = {NG_BF16, LR * LN, false, false},
    [B_LW] = {NG_BF16, LN, false, false},        [B_LB] = {NG_BF16, LN, false, false},
    [B_LDY] = {NG_BF16, LR * LN, false, false},  [B_LY] = {NG_BF16, LR * LN, true, false},
    [B_LMEAN] = {NG_F32, LR, true, false},       [B_LRSTD] = {NG_F32, LR, true, false},
    [B_LDX] = {NG_BF16, LR * LN, true, false},   [B_LDW] = {NG_BF16, LN, true, true},
    [B_LDB] = {NG_BF16, LN, true, true},
};
static const char *const buf_names[NBUF] = {
    "x", "g", "w", "b", "target", "y", "rstd", "loss", "dinput", "dweight_head", "dbias_head",
    "dx", "dweight_norm", "ln_x", "ln_w", "ln_b", "ln_dy", "ln_y", "ln_mean", "ln_rstd",
    "ln_dx", "ln_dweight", "ln_dbias"};

/* Host data of a lane, in storage form (packed to each buffer's dtype). */
typedef struct lane_data {
  void *raw[NBUF];
} lane_data;

typedef struct lane {
  cl_device_id dev;
  cl_context cl;
  cl_command_queue q;
  ng_context *ctx;
  cl_mem m[NBUF];
  const lane_data *data;
  /* results */
  void *out[NBUF];
  ng_status status;
  char where[1200];
  char detail[1024]; /* this thread's error detail after the deliberate failure */
} lane;

static size_t buf_bytes(int i) { return bufs[i].count * ng_dtype_size(bufs[i].dt); }

static void make_data(lane_data *d, uint64_t seed) {
  ng_rng r;
  ng_rng_seed(&r, seed);
  for (int i = 0; i < NBUF; i++) {
    d->raw[i] = calloc(1, buf_bytes(i));
    assert_non_null(d->raw[i]);
    if (bufs[i].output && !bufs[i].reloaded) continue; /* plain outputs start as zeros */
    if (i == B_T) {
      int32_t *t = d->raw[i];
      for (size_t k = 0; k < BT; k++)
        t[k] = ng_rng_uniform(&r) < 0.2 ? -100 : (int32_t)(ng_rng_uniform(&r) * V);
      continue;
    }
    const double mean = (i == B_G || i == B_LW) ? 1.0 : 0.0;
    const double sd = i == B_W ? 0.15 : (i == B_G || i == B_LW) ? 0.2 : 1.0;
    float *v = ng_test_random(&r, bufs[i].dt, bufs[i].count, mean, sd);
    ng_h_pack(bufs[i].dt, v, d->raw[i], bufs[i].count);
    free(v);
  }
}

static void free_data(lane_data *d) {
  for (int i = 0; i < NBUF; i++) free(d->raw[i]);
}

static void lane_open(lane *L, cl_device_id dev, const lane_data *data, const char *cache_dir) {
  memset(L, 0, sizeof *L);
  cl_int e = CL_SUCCESS;
  L->dev = dev;
  L->data = data;
  L->cl = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
  assert_non_null(L->cl);
  L->q = clCreateCommandQueue(L->cl, dev, 0, &e);
  assert_non_null(L->q);
  NG_OK(ng_context_create(L->cl, dev, &L->ctx));
  NG_OK(ng_context_set_cache_dir(L->ctx, cache_dir)); /* NULL: no disk cache */
  for (int i = 0; i < NBUF; i++) {
    L->m[i] = clCreateBuffer(L->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, buf_bytes(i),
                             data->raw[i], &e);
    assert_non_null(L->m[i]);
  }
}

static void lane_free_out(lane *L) {
  for (int i = 0; i < NBUF; i++) {
    free(L->out[i]);
    L->out[i] = NULL;
  }
}

static void lane_close(lane *L) {
  lane_free_out(L);
  for (int i = 0; i < NBUF; i++) clReleaseMemObject(L->m[i]);
  ng_context_release(L->ctx);
  clReleaseCommandQueue(L->q);
  clReleaseContext(L->cl);
  memset(L, 0, sizeof *L);
}

#define T(L, i) ng_tensor_of((L)->m[i], 0, bufs[i].dt)
#define STEP(call)                                                                               \
  do {                                                                                           \
    ng_status s_ = (call);                                                                       \
    if (s_ != NG_SUCCESS) {                                                                      \
      snprintf(L->where, sizeof L->where, "%s: %s: %s", #call, ng_status_name(s_),               \
               ng_last_error_detail());                                                          \
      return s_;                                                                                 \
    }                                                                                            \
  } while (0)

/* The ops, from the gradients' initial values; every output read back into L->out. No cmocka
 * call here: it may run on a thread of its own. */
static ng_status lane_run(lane *L) {
  for (int i = 0; i < NBUF; i++)
    if (bufs[i].reloaded)
      STEP(clEnqueueWriteBuffer(L->q, L->m[i], CL_TRUE, 0, buf_bytes(i), L->data->raw[i], 0, NULL,
                                NULL));
  const ng_rmsnorm_params rp = {BT, H, 1e-6f, 0.0f, NG_CAST_LLAMA};
  STEP(ng_rmsnorm_forward(L->ctx, L->q, &rp, T(L, B_X), T(L, B_G), T(L, B_Y), T(L, B_RSTD), 0,
                          NULL, NULL));
  ng_flce_params fp = ng_flce_params_default(BT, H, V);
  fp.reduction = NG_REDUCTION_SUM;
  fp.grad_output = 1.0f / 29.0f;
  ng_flce_tensors t;
  memset(&t, 0, sizeof t);
  t.input = T(L, B_Y), t.weight = T(L, B_W), t.target = T(L, B_T), t.bias = T(L, B_B);
  t.loss = T(L, B_LOSS), t.dinput = T(L, B_DIN), t.dweight = T(L, B_DW), t.dbias = T(L, B_DB);
  STEP(ng_flce(L->ctx, L->q, &fp, &t, NG_ACCUMULATE_GRAD, NULL, 0, NULL, NULL));
  STEP(ng_rmsnorm_backward(L->ctx, L->q, &rp, T(L, B_DIN), T(L, B_X), T(L, B_G), T(L, B_RSTD),
                           T(L, B_DX), T(L, B_DG), NG_ACCUMULATE_GRAD, ng_tensor_none(), 0, NULL,
                           NULL));
  const ng_layernorm_params lp = {LR, LN, 1e-5f};
  STEP(ng_layernorm_forward(L->ctx, L->q, &lp, T(L, B_LX), T(L, B_LW), T(L, B_LB), T(L, B_LY),
                            T(L, B_LMEAN), T(L, B_LRSTD), 0, NULL, NULL));
  STEP(ng_layernorm_backward(L->ctx, L->q, &lp, T(L, B_LDY), T(L, B_LX), T(L, B_LW), T(L, B_LB),
                             T(L, B_LMEAN), T(L, B_LRSTD), T(L, B_LDX), T(L, B_LDW), T(L, B_LDB),
                             NG_ACCUMULATE_GRAD, ng_tensor_none(), 0, NULL, NULL));
  lane_free_out(L);
  for (int i = 0; i < NBUF; i++) {
    if (!bufs[i].output) continue;
    L->out[i] = malloc(buf_bytes(i));
    if (!L->out[i]) return NG_ERR_HOST_OUT_OF_MEMORY;
    STEP(clEnqueueReadBuffer(L->q, L->m[i], CL_TRUE, 0, buf_bytes(i), L->out[i], 0, NULL, NULL));
  }
  return NG_SUCCESS;
}

/* Two different failed calls: lane 0 a zero row count, lane 1 a missing input buffer. */
static void lane_fail(lane *L, int which) {
  if (which == 0) {
    const ng_rmsnorm_params bad = {0, H, 1e-6f, 0.0f, NG_CAST_LLAMA};
    (void)ng_rmsnorm_forward(L->ctx, L->q, &bad, T(L, B_X), T(L, B_G), T(L, B_Y), T(L, B_RSTD),
                             0, NULL, NULL);
  } else {
    const ng_layernorm_params lp = {LR, LN, 1e-5f};
    (void)ng_layernorm_forward(L->ctx, L->q, &lp, ng_tensor_none(), T(L, B_LW), T(L, B_LB),
                               T(L, B_LY), T(L, B_LMEAN), T(L, B_LRSTD), 0, NULL, NULL);
  }
}

/* ---- threads --------------------------------------------------------------------------------- */
typedef struct worker {
  lane *L;
  int index;
  pthread_barrier_t *sync;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  lane *L = w->L;
  pthread_barrier_wait(w->sync); /* both threads make their first calls at once */
  L->status = NG_SUCCESS;
  for (int it = 0; it < 2 && L->status == NG_SUCCESS; it++) L->status = lane_run(L);
  pthread_barrier_wait(w->sync);
  lane_fail(L, w->index);
  pthread_barrier_wait(w->sync); /* both have failed now: each detail must still be its own */
  snprintf(L->detail, sizeof L->detail, "%s", ng_last_error_detail());
  return NULL;
}

/* ---- the devices ----------------------------------------------------------------------------- */
typedef struct devices {
  cl_device_id dev[LANES];
  bool sub;
} devices;

/* Two sub-devices of the test device when `split` and it can be partitioned (else NULL), or
 * the device itself twice. */
static bool pick_devices(bool split, devices *d) {
  memset(d, 0, sizeof *d);
  cl_device_id root = NULL;
  NG_OK(ng_select_device(getenv("NORMGRAD_DEVICE"), &root));
  cl_uint cu = 0, nsub = 0;
  CL_OK(clGetDeviceInfo(root, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL));
  char name[256] = "";
  clGetDeviceInfo(root, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
  if (!split) {
    for (int i = 0; i < LANES; i++) d->dev[i] = root;
    print_message("multi-context: %d separate cl_contexts on the one device '%s'\n", LANES, name);
    return true;
  }
  const cl_device_partition_property props[] = {CL_DEVICE_PARTITION_EQUALLY, cu / LANES, 0};
  cl_device_id subs[64];
  if (cu < LANES || clCreateSubDevices(root, props, 64, subs, &nsub) != CL_SUCCESS ||
      nsub < LANES) {
    print_message("multi-context: '%s' (%u compute units) cannot be partitioned into %d "
                  "sub-devices: this case is skipped\n",
                  name, cu, LANES);
    return false;
  }
  for (cl_uint i = 0; i < nsub; i++)
    if (i < LANES) d->dev[i] = subs[i];
    else clReleaseDevice(subs[i]);
  d->sub = true;
  print_message("multi-context: %u sub-devices of %u compute units of '%s' "
                "(CL_DEVICE_PARTITION_EQUALLY); using the first %d\n",
                nsub, cu / LANES, name, LANES);
  return true;
}

static void release_devices(devices *d) {
  if (!d->sub) return;
  for (int i = 0; i < LANES; i++) clReleaseDevice(d->dev[i]);
}

static void expect_same(const lane *ref, const lane *got, const char *what) {
  for (int i = 0; i < NBUF; i++) {
    if (!bufs[i].output) continue;
    assert_non_null(got->out[i]);
    if (memcmp(ref->out[i], got->out[i], buf_bytes(i)) != 0)
      fail_msg("%s: %s differs from the single-context run", what, buf_names[i]);
  }
}

static ng_context_stats stats(const lane *L) {
  ng_context_stats s;
  NG_OK(ng_context_get_stats(L->ctx, &s));
  return s;
}

static void two_contexts_two_threads(bool split) {
  devices devs;
  if (!pick_devices(split, &devs)) skip();
  lane_data data[LANES];
  for (int i = 0; i < LANES; i++) make_data(&data[i], 1000 + (uint64_t)i);

  /* Reference: one context on the first device, no disk cache, one thread, both lanes' data. */
  lane ref[LANES];
  char ref_detail[LANES][1024];
  ng_context_stats ref_stats;
  {
    lane solo;
    for (int i = 0; i < LANES; i++) {
      lane_open(&solo, devs.dev[0], &data[i], NULL);
      const ng_status s = lane_run(&solo);
      if (s != NG_SUCCESS) fail_msg("reference run: %s", solo.where);
      lane_fail(&solo, i);
      snprintf(ref_detail[i], sizeof ref_detail[i], "%s", ng_last_error_detail());
      ref_stats = stats(&solo);
      memset(&ref[i], 0, sizeof ref[i]);
      memcpy(ref[i].out, solo.out, sizeof solo.out); /* keep the outputs */
      memset(solo.out, 0, sizeof solo.out);
      lane_close(&solo);
    }
  }
  assert_true(ref_stats.programs_cached > 0);
  assert_int_equal(ref_stats.programs_built, ref_stats.programs_cached);
  assert_string_not_equal(ref_detail[0], ref_detail[1]);

  /* Two contexts, one per device, sharing a fresh disk cache folder; two threads at once. */
  char dir[] = "/tmp/ng_multi_ctx_XXXXXX";
  assert_non_null(mkdtemp(dir));
  lane lanes[LANES];
  for (int i = 0; i < LANES; i++) lane_open(&lanes[i], devs.dev[i], &data[i], dir);
  pthread_barrier_t sync;
  assert_int_equal(pthread_barrier_init(&sync, NULL, LANES), 0);
  worker wk[LANES];
  pthread_t th[LANES];
  for (int i = 0; i < LANES; i++) {
    wk[i] = (worker){&lanes[i], i, &sync};
    assert_int_equal(pthread_create(&th[i], NULL, work, &wk[i]), 0);
  }
  for (int i = 0; i < LANES; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&sync);
  for (int i = 0; i < LANES; i++) {
    char what[64];
    snprintf(what, sizeof what, "context %d (thread %d)", i, i);
    if (lanes[i].status != NG_SUCCESS) fail_msg("%s: %s", what, lanes[i].where);
    expect_same(&ref[i], &lanes[i], what);
    /* the thread's own failure, not the other's */
    assert_string_equal(lanes[i].detail, ref_detail[i]);
    /* its own program cache: every program built or loaded by this context, each once, the
     * same set as the reference's; the second pass found them all in memory */
    const ng_context_stats s = stats(&lanes[i]);
    assert_int_equal(s.programs_cached, ref_stats.programs_cached);
    assert_int_equal(s.programs_built + s.disk_hits, s.programs_cached);
    assert_true(s.cache_hits >= s.programs_cached);
    assert_int_equal(s.disk_errors, 0);
    assert_int_equal(s.disk_rejects, 0);
  }
  print_message("multi-context: %llu programs per context; built/loaded from disk: %llu/%llu "
                "and %llu/%llu\n",
                (unsigned long long)ref_stats.programs_cached,
                (unsigned long long)stats(&lanes[0]).programs_built,
                (unsigned long long)stats(&lanes[0]).disk_hits,
                (unsigned long long)stats(&lanes[1]).programs_built,
                (unsigned long long)stats(&lanes[1]).disk_hits);

  /* One context released (with its cl_context): the other keeps working, with the same bits. */
  const ng_context_stats before = stats(&lanes[1]);
  lane_close(&lanes[0]);
  lanes[1].status = lane_run(&lanes[1]);
  if (lanes[1].status != NG_SUCCESS) fail_msg("after the other's release: %s", lanes[1].where);
  expect_same(&ref[1], &lanes[1], "context 1 after context 0 was released");
  const ng_context_stats after = stats(&lanes[1]);
  assert_int_equal(after.programs_built, before.programs_built);
  assert_int_equal(after.disk_hits, before.disk_hits);
  lane_close(&lanes[1]);

  uint64_t removed = 0;
  NG_OK(ng_cache_clear(dir, &removed));
  assert_true(removed > 0); /* both contexts stored into the shared folder */
  rmdir(dir);
  for (int i = 0; i < LANES; i++) {
    lane_free_out(&ref[i]);
    free_data(&data[i]);
  }
  release_devices(&devs);
}

static void test_sub_devices(void **state) {
  (void)state;
  two_contexts_two_threads(true);
}
static void test_one_device_two_cl_contexts(void **state) {
  (void)state;
  two_contexts_two_threads(false);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_sub_devices),
                                     cmocka_unit_test(test_one_device_two_cl_contexts)};
  return NG_RUN_GROUP_TESTS(tests, NULL, NULL);
}
