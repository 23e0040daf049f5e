/* The end of a language model's training step with LoRA/PEFT, on the application's own OpenCL
 * context and queue:
 *
 *   forward   h ──RMSNorm (frozen weight w)──► y ──FLCE (frozen LM head W)──► loss
 *   backward  dL/dy from the same FLCE call (no dW, no dbias), then RMSNorm backward with the
 *             frozen weight gives dL/dh only: the gradient that flows on into the trainable
 *             adapters of the layers below.
 *
 * Nothing frozen costs anything: no dweight buffers, no [V, H] gradient, no scratch for weight
 * gradients, no reduction passes. The program checks itself against a double-precision host
 * computation (at the end, kept apart) and exits non-zero when the results are off. Built and
 * run by the tests (CTest: example_lora_step).
 *
 * Shapes are small so that the check runs in milliseconds; the calls are the same at
 * BT = 8192, H = 4096, V = 128256. Activations are f32 here; for bf16 activations give h, y and
 * dh the dtype NG_BF16 (and upload bf16 data) — the weights stay f32. */
#include <normgrad.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { BT = 24, H = 64, V = 300 }; /* tokens, hidden size, vocabulary */
#define EPS 1e-6f
#define IGNORED_ROW 5 /* a padding token: its target is ignore_index, it adds no loss or gradient */

/* ---- OpenCL set-up: the application's business, not normgrad's ----------------------------- */
/* The first GPU of any platform, else the first device at all. */
static cl_int pick_device(cl_device_id *dev) {
  cl_platform_id plats[16];
  cl_uint np = 0;
  cl_int e = clGetPlatformIDs(16, plats, &np);
  if (e != CL_SUCCESS) return e;
  if (np > 16) np = 16;
  const cl_device_type kinds[2] = {CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ALL};
  for (int k = 0; k < 2; k++)
    for (cl_uint i = 0; i < np; i++)
      if (clGetDeviceIDs(plats[i], kinds[k], 1, dev, NULL) == CL_SUCCESS) return CL_SUCCESS;
  return CL_DEVICE_NOT_FOUND;
}

/* Deterministic data in [-1, 1) (no dependence on the C library's rand()). */
static float uniform(unsigned long long *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int check_against_host(const float *h, const float *w, const float *W, const int *target,
                              float loss, const float *dh);

int main(void) {
  int rc = 1;
  cl_int e = CL_SUCCESS;
  ng_status s = NG_SUCCESS;
  cl_device_id dev = NULL;
  cl_context cl = NULL;
  cl_command_queue q = NULL;
  ng_context *ng = NULL;
  cl_mem bh = NULL, bw = NULL, by = NULL, brstd = NULL, bW = NULL, btarget = NULL, bloss = NULL,
         bdh = NULL;
  cl_event fwd_done = NULL, flce_done = NULL, bwd_done = NULL;
  float *h = malloc(sizeof(float) * BT * H), *w = malloc(sizeof(float) * H);
  float *W = malloc(sizeof(float) * V * H), *dh = malloc(sizeof(float) * BT * H);
  int *target = malloc(sizeof(int) * BT);
  if (!h || !w || !W || !dh || !target) {
    fprintf(stderr, "out of host memory\n");
    goto done;
  }

  /* The application owns its context and an in-order queue (normgrad needs in-order). */
  e = pick_device(&dev);
  if (e == CL_SUCCESS) cl = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
  if (e == CL_SUCCESS) q = clCreateCommandQueue(cl, dev, 0, &e);
  if (e != CL_SUCCESS) {
    fprintf(stderr, "OpenCL set-up failed: %d\n", e);
    goto done;
  }

  /* Last hidden states h[BT, H], the frozen norm weight w[H], the frozen LM head W[V, H] and the
   * next-token targets (i32; one row is padding). */
  unsigned long long seed = 42;
  for (int i = 0; i < BT * H; i++) h[i] = 2.0f * uniform(&seed);
  for (int i = 0; i < H; i++) w[i] = 1.0f + 0.1f * uniform(&seed);
  for (int i = 0; i < V * H; i++) W[i] = 0.2f * uniform(&seed);
  for (int i = 0; i < BT; i++) target[i] = (int)((uniform(&seed) + 1.0f) * 0.5f * (V - 1));
  target[IGNORED_ROW] = -100;

  /* The application's buffers. y is the normalized hidden state; FLCE writes dL/dy over it
   * (dinput may be the input itself), since nothing needs y after the loss. */
  const size_t act = sizeof(float) * BT * H;
  const cl_mem_flags rw = CL_MEM_READ_WRITE, copy = CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR;
  bh = clCreateBuffer(cl, copy, act, h, &e);
  if (e == CL_SUCCESS) bw = clCreateBuffer(cl, copy, sizeof(float) * H, w, &e);
  if (e == CL_SUCCESS) bW = clCreateBuffer(cl, copy, sizeof(float) * V * H, W, &e);
  if (e == CL_SUCCESS) btarget = clCreateBuffer(cl, copy, sizeof(int) * BT, target, &e);
  if (e == CL_SUCCESS) by = clCreateBuffer(cl, rw, act, NULL, &e);
  if (e == CL_SUCCESS) brstd = clCreateBuffer(cl, rw, sizeof(float) * BT, NULL, &e);
  if (e == CL_SUCCESS) bloss = clCreateBuffer(cl, rw, sizeof(float), NULL, &e);
  if (e == CL_SUCCESS) bdh = clCreateBuffer(cl, rw, act, NULL, &e);
  if (e != CL_SUCCESS) {
    fprintf(stderr, "clCreateBuffer failed: %d\n", e);
    goto done;
  }

  /* normgrad borrows the context and device (it retains them until ng_context_release); it
   * compiles its kernels for that device on first use and keeps them. */
  s = ng_context_create(cl, dev, &ng);

  /* 1. RMSNorm forward: y = h·rstd·w, and rstd[BT] (always f32) saved for the backward. */
  const ng_rmsnorm_params norm = {BT, H, EPS, 0.0f, NG_CAST_LLAMA};
  if (s == NG_SUCCESS)
    s = ng_rmsnorm_forward(ng, q, &norm, ng_tensor_of(bh, 0, NG_F32), ng_tensor_of(bw, 0, NG_F32),
                           ng_tensor_of(by, 0, NG_F32), ng_tensor_of(brstd, 0, NG_F32), 0, NULL,
                           &fwd_done);

  /* 2. FLCE: the mean cross-entropy of y·Wᵀ and its gradient with respect to y, in one pass
   *    over chunks of rows; the [BT, V] logits never exist. The LM head is frozen: no dweight
   *    (and no bias), so the dW product is neither planned nor run. ng_flce reads the targets
   *    back to check them, so it waits for its wait list (the queue is in-order anyway; the
   *    events show how to chain the calls on any queue). */
  ng_flce_params fp = ng_flce_params_default(BT, H, V); /* mean, ignore_index -100 */
  ng_flce_tensors ft = {0};
  ft.input = ng_tensor_of(by, 0, NG_F32);
  ft.weight = ng_tensor_of(bW, 0, NG_F32);
  ft.target = ng_tensor_of(btarget, 0, NG_I32);
  ft.loss = ng_tensor_of(bloss, 0, NG_F32);
  ft.dinput = ng_tensor_of(by, 0, NG_F32); /* dL/dy, written over y */
  ft.dweight = ng_tensor_none();           /* frozen LM head */
  ft.dbias = ng_tensor_none();
  if (s == NG_SUCCESS) s = ng_flce(ng, q, &fp, &ft, 0, NULL, 1, &fwd_done, &flce_done);

  /* 3. RMSNorm backward with the frozen weight: dweight none, so the program is built without
   *    any dW work and needs no scratch; dh = dL/dh is bit-identical to an unfrozen run's. */
  if (s == NG_SUCCESS)
    s = ng_rmsnorm_backward(ng, q, &norm, ng_tensor_of(by, 0, NG_F32), ng_tensor_of(bh, 0, NG_F32),
                            ng_tensor_of(bw, 0, NG_F32), ng_tensor_of(brstd, 0, NG_F32),
                            ng_tensor_of(bdh, 0, NG_F32), ng_tensor_none(), 0, ng_tensor_none(),
                            1, &flce_done, &bwd_done);
  if (s != NG_SUCCESS) {
    /* the status names the problem, the detail which argument or which build */
    fprintf(stderr, "normgrad: %s: %s\n", ng_status_name(s), ng_last_error_detail());
    goto done;
  }

  /* Nothing above has waited for the device (but ng_flce's target check); now read the results. */
  float loss = 0.0f;
  e = clWaitForEvents(1, &bwd_done);
  if (e == CL_SUCCESS) e = clEnqueueReadBuffer(q, bloss, CL_TRUE, 0, sizeof loss, &loss, 0, NULL,
                                               NULL);
  if (e == CL_SUCCESS) e = clEnqueueReadBuffer(q, bdh, CL_TRUE, 0, act, dh, 0, NULL, NULL);
  if (e != CL_SUCCESS) {
    fprintf(stderr, "reading the results failed: %d\n", e);
    goto done;
  }
  rc = check_against_host(h, w, W, target, loss, dh);

done:
  /* Events and the ng_context are released by their owner (us); then our own OpenCL objects. */
  if (fwd_done) clReleaseEvent(fwd_done);
  if (flce_done) clReleaseEvent(flce_done);
  if (bwd_done) clReleaseEvent(bwd_done);
  ng_context_release(ng); /* drops normgrad's references to cl and dev, and its programs */
  const cl_mem mems[] = {bh, bw, by, brstd, bW, btarget, bloss, bdh};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
    if (mems[i]) clReleaseMemObject(mems[i]);
  if (q) clReleaseCommandQueue(q);
  if (cl) clReleaseContext(cl);
  free(h), free(w), free(W), free(dh), free(target);
  return rc;
}

/* ---- the check: the same step in double precision on the host --------------------------------
 * RMSNorm: rstd = 1/sqrt(mean(h²) + eps), y = h·rstd·w.
 * Mean cross-entropy over the N non-ignored rows: loss = Σ (lse(z) − z_t) / N with z = y·Wᵀ;
 * dL/dz = (softmax(z) − onehot(t)) / N, dL/dy = dL/dz · W (0 for the ignored row).
 * RMSNorm backward: m = dy·w, dh = rstd·m − (rstd³/H)·Σ(m·h)·h. */
static int check_against_host(const float *h, const float *w, const float *W, const int *target,
                              float loss, const float *dh) {
  double *y = malloc(sizeof(double) * H), *z = malloc(sizeof(double) * V);
  double *dy = malloc(sizeof(double) * H), *ref_dh = malloc(sizeof(double) * BT * H);
  if (!y || !z || !dy || !ref_dh) return fprintf(stderr, "out of host memory\n"), 1;
  int n = 0;
  for (int i = 0; i < BT; i++) n += target[i] != -100;
  double ref_loss = 0, max_err = 0, max_dh = 0;
  for (int i = 0; i < BT; i++) {
    const float *hi = h + (size_t)i * H;
    double ms = 0;
    for (int k = 0; k < H; k++) ms += (double)hi[k] * hi[k];
    const double rstd = 1.0 / sqrt(ms / H + EPS);
    for (int k = 0; k < H; k++) y[k] = hi[k] * rstd * w[k];
    for (int k = 0; k < H; k++) dy[k] = 0;
    if (target[i] != -100) {
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j < V; j++) {
        z[j] = 0;
        for (int k = 0; k < H; k++) z[j] += y[k] * W[(size_t)j * H + k];
        mx = z[j] > mx ? z[j] : mx;
      }
      for (int j = 0; j < V; j++) sum += exp(z[j] - mx);
      const double lse = mx + log(sum);
      ref_loss += (lse - z[target[i]]) / n;
      for (int j = 0; j < V; j++) {
        const double g = (exp(z[j] - lse) - (j == target[i])) / n;
        for (int k = 0; k < H; k++) dy[k] += g * W[(size_t)j * H + k];
      }
    }
    double dot = 0;
    for (int k = 0; k < H; k++) dot += dy[k] * w[k] * hi[k];
    for (int k = 0; k < H; k++) {
      double *r = &ref_dh[(size_t)i * H + k];
      *r = rstd * dy[k] * w[k] - rstd * rstd * rstd / H * dot * hi[k];
      max_dh = fabs(*r) > max_dh ? fabs(*r) : max_dh;
      const double err = fabs(dh[(size_t)i * H + k] - *r);
      max_err = err > max_err || err != err ? err : max_err; /* a NaN counts as an error */
    }
  }
  const double loss_err = fabs(loss - ref_loss) / fabs(ref_loss);
  const double dh_err = max_err / max_dh;
  printf("loss %.7f (double-precision reference %.7f, relative error %.2e)\n", (double)loss,
         ref_loss, loss_err);
  printf("dL/dh max error %.3e = %.2e of max |dL/dh| (%.3e), %d rows, 1 ignored\n", max_err,
         dh_err, max_dh, BT);
  free(y), free(z), free(dy), free(ref_dh);
  /* f32 on the device against double: a few ulps per reduction of H or V terms */
  if (!(loss_err < 1e-5) || !(dh_err < 1e-4)) {
    fprintf(stderr, "lora_step: results differ from the host computation\n");
    return 1;
  }
  return 0;
}
