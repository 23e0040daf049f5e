/* normgrad-cli polynorm: x [..., N], weight [3], bias [1] (one dtype, any of f32/f16/bf16),
 * optional dy (like x) → y (x's dtype and shape), rstd (F32, x's shape without the last dim plus
 * a last dim of 3: (rstd3, rstd2, rstd1)), and with dy: dx (like x), dweight [3] and dbias [1]
 * (the parameters' dtype; absent with --freeze-weight / --freeze-bias).
 *
 * bench: x is rows × hidden, f32 weight [3] and bias [1]. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const inputs[] = {"x", "weight", "bias", "dy", NULL};

static int run(cli_env *env, const cli_options *o, const cli_tensors *in, cli_tensors *out,
               char *err, size_t errlen) {
  const cli_tensor *x, *w, *b, *dy;
  size_t rows = 0, n = 0;
  const int64_t three = 3, one = 1;
  int rc = cli_check_names(in, "polynorm", inputs, err, errlen);
  if (!rc) rc = cli_input(in, "polynorm", "x", true, &x, err, errlen);
  if (!rc) rc = cli_input(in, "polynorm", "weight", true, &w, err, errlen);
  if (!rc) rc = cli_input(in, "polynorm", "bias", true, &b, err, errlen);
  if (!rc) rc = cli_input(in, "polynorm", "dy", false, &dy, err, errlen);
  if (!rc) rc = cli_expect_dtype(x, CLI_FLOAT_DTYPES, err, errlen);
  if (!rc) rc = cli_rows_n(x, &rows, &n, err, errlen);
  if (!rc) rc = cli_expect_dtype(w, CLI_FLOAT_DTYPES, err, errlen);
  if (!rc) rc = cli_expect_shape(w, 1, &three, "PolyNorm's three weights", err, errlen);
  if (!rc) rc = cli_expect_same_dtype(b, w, err, errlen);
  if (!rc) rc = cli_expect_shape(b, 1, &one, "PolyNorm's scalar bias", err, errlen);
  if (!rc && dy) rc = cli_expect_same_dtype(dy, x, err, errlen);
  if (!rc && dy) rc = cli_expect_same_shape(dy, x, err, errlen);
  if (rc) return rc;

  const bool dw_wanted = dy && !o->freeze_weight, db_wanted = dy && !o->freeze_bias;
  int sdim;
  int64_t sshape[CLI_MAX_DIMS];
  cli_rows_shape(x, &sdim, sshape); /* at most CLI_MAX_DIMS - 1 dims, or [1] for a 1-D x */
  sshape[sdim++] = 3;
  ng_polynorm_params p = {rows, n, o->eps};
  cl_mem bx = NULL, bw = NULL, bb = NULL, by = NULL, br = NULL, bdy = NULL, bdx = NULL;
  cl_mem bdw = NULL, bdb = NULL;
  rc = CLI_DEVICE;
  if (!(bx = cli_upload(env, x, err, errlen))) goto done;
  if (!(bw = cli_upload(env, w, err, errlen))) goto done;
  if (!(bb = cli_upload(env, b, err, errlen))) goto done;
  if (!(by = cli_alloc(env, x->nbytes, err, errlen))) goto done;
  if (!(br = cli_alloc(env, rows * 3 * 4, err, errlen))) goto done;
  if (dy) {
    if (!(bdy = cli_upload(env, dy, err, errlen))) goto done;
    if (!(bdx = cli_alloc(env, x->nbytes, err, errlen))) goto done;
    if (dw_wanted && !(bdw = cli_alloc(env, w->nbytes, err, errlen))) goto done;
    if (db_wanted && !(bdb = cli_alloc(env, b->nbytes, err, errlen))) goto done;
  }
  const ng_tensor tx = ng_tensor_of(bx, 0, x->dtype), tw = ng_tensor_of(bw, 0, w->dtype);
  const ng_tensor tr = ng_tensor_of(br, 0, NG_F32);
  ng_status s = ng_polynorm_forward(env->ctx, env->queue, &p, tx, tw, ng_tensor_of(bb, 0, b->dtype),
                                    ng_tensor_of(by, 0, x->dtype), tr, 0, NULL, NULL);
  if (s != NG_SUCCESS) {
    rc = cli_fail_status(s, "polynorm forward", err, errlen);
    goto done;
  }
  if (dy) {
    s = ng_polynorm_backward(env->ctx, env->queue, &p, ng_tensor_of(bdy, 0, x->dtype), tx, tw, tr,
                             ng_tensor_of(bdx, 0, x->dtype),
                             bdw ? ng_tensor_of(bdw, 0, w->dtype) : ng_tensor_none(),
                             bdb ? ng_tensor_of(bdb, 0, b->dtype) : ng_tensor_none(), 0,
                             ng_tensor_none(), 0, NULL, NULL);
    if (s != NG_SUCCESS) {
      rc = cli_fail_status(s, "polynorm backward", err, errlen);
      goto done;
    }
  }
  rc = cli_download(env, by, "y", x->dtype, x->ndim, x->shape, out, err, errlen);
  if (!rc) rc = cli_download(env, br, "rstd", NG_F32, sdim, sshape, out, err, errlen);
  if (!rc && dy) rc = cli_download(env, bdx, "dx", x->dtype, x->ndim, x->shape, out, err, errlen);
  if (!rc && bdw) rc = cli_download(env, bdw, "dweight", w->dtype, 1, w->shape, out, err, errlen);
  if (!rc && bdb) rc = cli_download(env, bdb, "dbias", b->dtype, 1, b->shape, out, err, errlen);
done:
  clFinish(env->queue);
  cl_mem all[] = {bx, bw, bb, by, br, bdy, bdx, bdw, bdb};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) clReleaseMemObject(all[i]);
  return rc;
}

/* ---- bench ----------------------------------------------------------------------------------- */
typedef struct pn_bench {
  ng_polynorm_params p;
  ng_dtype xd;
  bool frozen_w, frozen_b;
  cl_mem x, w, b, y, rstd, dy, dx, dw, db, scratch;
} pn_bench;

static ng_tensor opt(cl_mem m, ng_dtype dt) {
  return m ? ng_tensor_of(m, 0, dt) : ng_tensor_none();
}

static ng_status bench_fwd(cli_env *env, void *state) {
  pn_bench *g = state;
  return ng_polynorm_forward(env->ctx, env->queue, &g->p, ng_tensor_of(g->x, 0, g->xd),
                             ng_tensor_of(g->w, 0, NG_F32), ng_tensor_of(g->b, 0, NG_F32),
                             ng_tensor_of(g->y, 0, g->xd), ng_tensor_of(g->rstd, 0, NG_F32), 0,
                             NULL, NULL);
}

static ng_status bench_bwd(cli_env *env, void *state) {
  pn_bench *g = state;
  return ng_polynorm_backward(env->ctx, env->queue, &g->p, ng_tensor_of(g->dy, 0, g->xd),
                              ng_tensor_of(g->x, 0, g->xd), ng_tensor_of(g->w, 0, NG_F32),
                              ng_tensor_of(g->rstd, 0, NG_F32), ng_tensor_of(g->dx, 0, g->xd),
                              opt(g->dw, NG_F32), opt(g->db, NG_F32), 0, opt(g->scratch, NG_F32), 0,
                              NULL, NULL);
}

static void bench_cleanup(void *state) {
  pn_bench *g = state;
  if (!g) return;
  cl_mem all[] = {g->x, g->w, g->b, g->y, g->rstd, g->dy, g->dx, g->dw, g->db, g->scratch};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) clReleaseMemObject(all[i]);
  free(g);
}

static ng_status bench_scratch(cli_env *env, const cli_bench_spec *spec, size_t *bytes) {
  const ng_polynorm_params p = {spec->rows, spec->hidden, 1e-6f};
  return ng_polynorm_backward_scratch_size(env->ctx, &p, !spec->freeze_weight, !spec->freeze_bias,
                                           bytes);
}

static int bench_setup(cli_env *env, const cli_bench_spec *spec, const cli_options *o,
                       cli_bench_case *cases, int *ncases, void **state, char *err, size_t errlen) {
  const size_t R = spec->rows, N = spec->hidden, es = ng_dtype_size(spec->dtype);
  if (N != 0 && R > SIZE_MAX / N / es) {
    snprintf(err, errlen, "rows x hidden overflows");
    return CLI_USAGE;
  }
  pn_bench *g = calloc(1, sizeof *g);
  if (!g) return CLI_DEVICE;
  g->p = (ng_polynorm_params){R, N, o->eps};
  g->xd = spec->dtype;
  g->frozen_w = spec->freeze_weight;
  g->frozen_b = spec->freeze_bias;
  const size_t xb = R * N * es;
  size_t sbytes = 0;
  ng_status s = cli_bench_scratch(bench_scratch, env, spec, &sbytes);
  int rc = CLI_DEVICE;
  if (s != NG_SUCCESS) {
    rc = cli_fail_status(s, "polynorm scratch size", err, errlen);
    goto fail;
  }
  if (!(g->x = cli_random_buffer(env, spec->dtype, R * N, 1, 0.0, 1.0, err, errlen)) ||
      !(g->w = cli_random_buffer(env, NG_F32, 3, 2, 0.33, 0.05, err, errlen)) ||
      !(g->b = cli_random_buffer(env, NG_F32, 1, 4, 0.0, 0.1, err, errlen)) ||
      !(g->dy = cli_random_buffer(env, spec->dtype, R * N, 3, 0.0, 1.0, err, errlen)) ||
      !(g->y = cli_alloc(env, xb, err, errlen)) || !(g->dx = cli_alloc(env, xb, err, errlen)) ||
      !(g->rstd = cli_alloc(env, R * 12, err, errlen)) ||
      (!g->frozen_w && !(g->dw = cli_alloc(env, 12, err, errlen))) ||
      (!g->frozen_b && !(g->db = cli_alloc(env, 4, err, errlen))) ||
      (sbytes && !(g->scratch = cli_alloc(env, sbytes, err, errlen))))
    goto fail;
  const double x = (double)xb, r = 12.0 * (double)R;
  cases[0] = (cli_bench_case){.pass = "forward", .bytes = x + 12 + 4 + x + r, .run = bench_fwd};
  cases[1] = (cli_bench_case){.pass = "backward", .bytes = x + x + 12 + r + x + (g->frozen_w ? 0 : 12) + (g->frozen_b ? 0 : 4), .run = bench_bwd};
  cases[0].out[0] =
      (cli_bench_output){.mem = g->y, .name = "y", .count = R * N, .dtype = spec->dtype};
  cases[0].out[1] =
      (cli_bench_output){.mem = g->rstd, .name = "rstd", .count = R * 3, .dtype = NG_F32};
  cases[1].out[0] =
      (cli_bench_output){.mem = g->dx, .name = "dx", .count = R * N, .dtype = spec->dtype};
  cases[1].out[1] =
      (cli_bench_output){.mem = g->dw, .name = "dweight", .count = 3, .dtype = NG_F32};
  cases[1].out[2] = (cli_bench_output){.mem = g->db, .name = "dbias", .count = 1, .dtype = NG_F32};
  *ncases = 2;
  *state = g;
  return CLI_OK;
fail:
  bench_cleanup(g);
  return rc;
}

const cli_op cli_op_polynorm = {"polynorm", run, bench_setup, bench_cleanup, bench_scratch};
