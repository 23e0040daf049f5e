/* normgrad-cli rmsnorm: x [..., N], optional weight [N], optional dy (like x) →
 * y (x's dtype and shape), rstd (F32, x's shape without the last dim; [1] for a 1-D x),
 * and with dy: dx (like x), dweight (weight's dtype; absent without weight or when frozen). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const inputs[] = {"x", "weight", "dy", NULL};

static int run(cli_env *env, const cli_options *o, const cli_tensors *in, cli_tensors *out,
               char *err, size_t errlen) {
  const cli_tensor *x, *w, *dy;
  size_t rows = 0, n = 0;
  int rc = cli_check_names(in, "rmsnorm", inputs, err, errlen);
  if (!rc) rc = cli_input(in, "rmsnorm", "x", true, &x, err, errlen);
  if (!rc) rc = cli_input(in, "rmsnorm", "weight", false, &w, err, errlen);
  if (!rc) rc = cli_input(in, "rmsnorm", "dy", false, &dy, err, errlen);
  if (!rc) rc = cli_expect_dtype(x, CLI_FLOAT_DTYPES, err, errlen);
  if (!rc) rc = cli_rows_n(x, &rows, &n, err, errlen);
  if (!rc && w) rc = cli_expect_dtype(w, CLI_FLOAT_DTYPES, err, errlen);
  if (!rc && w) {
    const int64_t wshape[1] = {(int64_t)n};
    rc = cli_expect_shape(w, 1, wshape, "the last dim of x", err, errlen);
  }
  if (!rc && dy) rc = cli_expect_same_dtype(dy, x, err, errlen);
  if (!rc && dy) rc = cli_expect_same_shape(dy, x, err, errlen);
  if (rc) return rc;

  const bool dw_wanted = dy && w && !o->freeze_weight;
  int sdim;
  int64_t sshape[CLI_MAX_DIMS];
  cli_rows_shape(x, &sdim, sshape);
  ng_rmsnorm_params p = {rows, n, o->eps, o->offset, o->casting_mode};
  cl_mem bx = NULL, bw = NULL, by = NULL, br = NULL, bdy = NULL, bdx = NULL, bdw = NULL;
  rc = CLI_DEVICE;
  if (!(bx = cli_upload(env, x, err, errlen))) goto done;
  if (w && !(bw = cli_upload(env, w, err, errlen))) goto done;
  if (!(by = cli_alloc(env, x->nbytes, err, errlen))) goto done;
  if (!(br = cli_alloc(env, rows * 4, err, errlen))) goto done;
  if (dy) {
    if (!(bdy = cli_upload(env, dy, err, errlen))) goto done;
    if (!(bdx = cli_alloc(env, x->nbytes, err, errlen))) goto done;
    if (dw_wanted && !(bdw = cli_alloc(env, w->nbytes, err, errlen))) goto done;
  }
  const ng_tensor tw = w ? ng_tensor_of(bw, 0, w->dtype) : ng_tensor_none();
  ng_status s = ng_rmsnorm_forward(env->ctx, env->queue, &p, ng_tensor_of(bx, 0, x->dtype), tw,
                                   ng_tensor_of(by, 0, x->dtype), ng_tensor_of(br, 0, NG_F32), 0,
                                   NULL, NULL);
  if (s != NG_SUCCESS) {
    rc = cli_fail_status(s, "rmsnorm forward", err, errlen);
    goto done;
  }
  if (dy) {
    s = ng_rmsnorm_backward(env->ctx, env->queue, &p, ng_tensor_of(bdy, 0, x->dtype),
                            ng_tensor_of(bx, 0, x->dtype), tw, ng_tensor_of(br, 0, NG_F32),
                            ng_tensor_of(bdx, 0, x->dtype),
                            bdw ? ng_tensor_of(bdw, 0, w->dtype) : ng_tensor_none(), 0,
                            ng_tensor_none(), 0, NULL, NULL);
    if (s != NG_SUCCESS) {
      rc = cli_fail_status(s, "rmsnorm backward", err, errlen);
      goto done;
    }
  }
  rc = cli_download(env, by, "y", x->dtype, x->ndim, x->shape, out, err, errlen);
  if (!rc) rc = cli_download(env, br, "rstd", NG_F32, sdim, sshape, out, err, errlen);
  if (!rc && dy) rc = cli_download(env, bdx, "dx", x->dtype, x->ndim, x->shape, out, err, errlen);
  if (!rc && bdw) rc = cli_download(env, bdw, "dweight", w->dtype, 1, w->shape, out, err, errlen);
done:
  clFinish(env->queue);
  cl_mem all[] = {bx, bw, by, br, bdy, bdx, bdw};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) clReleaseMemObject(all[i]);
  return rc;
}

/* ---- bench ----------------------------------------------------------------------------------- */
typedef struct rms_bench {
  ng_rmsnorm_params p;
  ng_dtype xd;
  bool frozen;
  cl_mem x, w, y, rstd, dy, dx, dw, scratch;
} rms_bench;

static ng_status bench_fwd(cli_env *env, void *state) {
  rms_bench *b = state;
  return ng_rmsnorm_forward(env->ctx, env->queue, &b->p, ng_tensor_of(b->x, 0, b->xd),
                            ng_tensor_of(b->w, 0, NG_F32), ng_tensor_of(b->y, 0, b->xd),
                            ng_tensor_of(b->rstd, 0, NG_F32), 0, NULL, NULL);
}

static ng_status bench_bwd(cli_env *env, void *state) {
  rms_bench *b = state;
  return ng_rmsnorm_backward(
      env->ctx, env->queue, &b->p, ng_tensor_of(b->dy, 0, b->xd), ng_tensor_of(b->x, 0, b->xd),
      ng_tensor_of(b->w, 0, NG_F32), ng_tensor_of(b->rstd, 0, NG_F32),
      ng_tensor_of(b->dx, 0, b->xd), b->frozen ? ng_tensor_none() : ng_tensor_of(b->dw, 0, NG_F32),
      0, b->scratch ? ng_tensor_of(b->scratch, 0, NG_F32) : ng_tensor_none(), 0, NULL, NULL);
}

static void bench_cleanup(void *state) {
  rms_bench *b = state;
  if (!b) return;
  cl_mem all[] = {b->x, b->w, b->y, b->rstd, b->dy, b->dx, b->dw, b->scratch};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) clReleaseMemObject(all[i]);
  free(b);
}

static ng_status bench_scratch(cli_env *env, const cli_bench_spec *spec, size_t *bytes) {
  const ng_rmsnorm_params p = {spec->rows, spec->hidden, 1e-6f, 0.0f, NG_CAST_LLAMA};
  return ng_rmsnorm_backward_scratch_size(env->ctx, &p, !spec->freeze_weight, bytes);
}

static int bench_setup(cli_env *env, const cli_bench_spec *spec, const cli_options *o,
                       cli_bench_case *cases, int *ncases, void **state, char *err,
                       size_t errlen) {
  const size_t R = spec->rows, N = spec->hidden, es = ng_dtype_size(spec->dtype);
  if (N != 0 && R > SIZE_MAX / N / es) {
    snprintf(err, errlen, "rows x hidden overflows");
    return CLI_USAGE;
  }
  rms_bench *b = calloc(1, sizeof *b);
  if (!b) return CLI_DEVICE;
  b->p = (ng_rmsnorm_params){R, N, o->eps, o->offset, o->casting_mode};
  b->xd = spec->dtype;
  b->frozen = spec->freeze_weight;
  const size_t xb = R * N * es;
  size_t sbytes = 0;
  ng_status s = cli_bench_scratch(bench_scratch, env, spec, &sbytes);
  int rc = CLI_DEVICE;
  if (s != NG_SUCCESS) {
    rc = cli_fail_status(s, "rmsnorm scratch size", err, errlen);
    goto fail;
  }
  if (!(b->x = cli_random_buffer(env, spec->dtype, R * N, 1, 0.0, 1.0, err, errlen)) ||
      !(b->w = cli_random_buffer(env, NG_F32, N, 2, 1.0, 0.2, err, errlen)) ||
      !(b->dy = cli_random_buffer(env, spec->dtype, R * N, 3, 0.0, 1.0, err, errlen)) ||
      !(b->y = cli_alloc(env, xb, err, errlen)) || !(b->dx = cli_alloc(env, xb, err, errlen)) ||
      !(b->rstd = cli_alloc(env, R * 4, err, errlen)) ||
      (!b->frozen && !(b->dw = cli_alloc(env, N * 4, err, errlen))) ||
      (sbytes && !(b->scratch = cli_alloc(env, sbytes, err, errlen))))
    goto fail;
  const double x = (double)xb, w = 4.0 * (double)N, r = 4.0 * (double)R;
  cases[0] = (cli_bench_case){.pass = "forward", .bytes = x + w + x + r, .run = bench_fwd};
  cases[1] = (cli_bench_case){.pass = "backward", .bytes = x + x + w + r + x + (b->frozen ? 0 : w), .run = bench_bwd};
  cases[0].out[0] = (cli_bench_output){.mem = b->y, .name = "y", .count = R * N, .dtype = b->xd};
  cases[0].out[1] = (cli_bench_output){.mem = b->rstd, .name = "rstd", .count = R, .dtype = NG_F32};
  cases[1].out[0] = (cli_bench_output){.mem = b->dx, .name = "dx", .count = R * N, .dtype = b->xd};
  cases[1].out[1] =
      (cli_bench_output){.mem = b->dw, .name = "dweight", .count = N, .dtype = NG_F32};
  *ncases = 2;
  *state = b;
  return CLI_OK;
fail:
  bench_cleanup(b);
  return rc;
}

const cli_op cli_op_rmsnorm = {"rmsnorm", run, bench_setup, bench_cleanup, bench_scratch};
