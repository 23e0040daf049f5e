/* normgrad-cli groupnorm: x [B, C, *spatial] (rank ≥ 2), weight [C], bias [C] (one dtype, any of
 * f32/f16/bf16), optional dy (like x), --groups G (required, divides C) →
 * y (x's dtype and shape), mean and rstd (F32 [B, G]), and with dy: dx (like x), dweight and
 * dbias (the parameters' dtype, [C]; absent with --freeze-weight / --freeze-bias).
 *
 * bench: x is [B, rows, hidden] — `rows` channels of `hidden` spatial elements in each of
 * --batch B samples (default 1) — with --groups G (default 32, or 1 when 32 does not divide
 * rows), f32 weight and bias [rows]. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const inputs[] = {"x", "weight", "bias", "dy", NULL};

static int run(cli_env *env, const cli_options *o, const cli_tensors *in, cli_tensors *out,
               char *err, size_t errlen) {
  const cli_tensor *x, *w, *b, *dy;
  int rc = cli_check_names(in, "groupnorm", inputs, err, errlen);
  if (!rc) rc = cli_input(in, "groupnorm", "x", true, &x, err, errlen);
  if (!rc) rc = cli_input(in, "groupnorm", "weight", true, &w, err, errlen);
  if (!rc) rc = cli_input(in, "groupnorm", "bias", true, &b, err, errlen);
  if (!rc) rc = cli_input(in, "groupnorm", "dy", false, &dy, err, errlen);
  if (!rc) rc = cli_expect_dtype(x, CLI_FLOAT_DTYPES, err, errlen);
  if (!rc && x->ndim < 2) {
    char s[128];
    snprintf(err, errlen, "groupnorm: x has shape %s; it needs [B, C, ...] (rank >= 2)",
             cli_shape_str(x, s, sizeof s));
    rc = CLI_USAGE;
  }
  const size_t count = rc ? 0 : cli_tensor_numel(x); /* the reader checked it for overflow */
  if (!rc && count == 0) {
    snprintf(err, errlen, "groupnorm: x has a zero dim");
    rc = CLI_USAGE;
  }
  if (!rc && o->groups <= 0) {
    snprintf(err, errlen, "groupnorm: --groups G is required");
    rc = CLI_USAGE;
  }
  const int64_t C = rc ? 0 : x->shape[1];
  if (!rc && C % o->groups != 0) {
    snprintf(err, errlen, "groupnorm: --groups %lld does not divide the %lld channels of x",
             o->groups, (long long)C);
    rc = CLI_USAGE;
  }
  if (!rc) rc = cli_expect_dtype(w, CLI_FLOAT_DTYPES, err, errlen);
  if (!rc) rc = cli_expect_shape(w, 1, &C, "dim 1 of x (channels)", err, errlen);
  if (!rc) rc = cli_expect_same_dtype(b, w, err, errlen);
  if (!rc) rc = cli_expect_shape(b, 1, &C, "dim 1 of x (channels)", err, errlen);
  if (!rc && dy) rc = cli_expect_same_dtype(dy, x, err, errlen);
  if (!rc && dy) rc = cli_expect_same_shape(dy, x, err, errlen);
  if (rc) return rc;

  const size_t B = (size_t)x->shape[0], S = count / B / (size_t)C, G = (size_t)o->groups;
  const bool dw_wanted = dy && !o->freeze_weight, db_wanted = dy && !o->freeze_bias;
  const int64_t sshape[2] = {(int64_t)B, (int64_t)G};
  ng_groupnorm_params p = {B, (size_t)C, S, G, o->eps};
  cl_mem bx = NULL, bw = NULL, bb = NULL, by = NULL, bm = NULL, br = NULL, bdy = NULL;
  cl_mem bdx = NULL, bdw = NULL, bdb = NULL;
  rc = CLI_DEVICE;
  if (!(bx = cli_upload(env, x, err, errlen))) goto done;
  if (!(bw = cli_upload(env, w, err, errlen))) goto done;
  if (!(bb = cli_upload(env, b, err, errlen))) goto done;
  if (!(by = cli_alloc(env, x->nbytes, err, errlen))) goto done;
  if (!(bm = cli_alloc(env, B * G * 4, err, errlen))) goto done;
  if (!(br = cli_alloc(env, B * G * 4, err, errlen))) goto done;
  if (dy) {
    if (!(bdy = cli_upload(env, dy, err, errlen))) goto done;
    if (!(bdx = cli_alloc(env, x->nbytes, err, errlen))) goto done;
    if (dw_wanted && !(bdw = cli_alloc(env, w->nbytes, err, errlen))) goto done;
    if (db_wanted && !(bdb = cli_alloc(env, b->nbytes, err, errlen))) goto done;
  }
  const ng_tensor tx = ng_tensor_of(bx, 0, x->dtype), tw = ng_tensor_of(bw, 0, w->dtype);
  const ng_tensor tm = ng_tensor_of(bm, 0, NG_F32), tr = ng_tensor_of(br, 0, NG_F32);
  ng_status s =
      ng_groupnorm_forward(env->ctx, env->queue, &p, tx, tw, ng_tensor_of(bb, 0, b->dtype),
                           ng_tensor_of(by, 0, x->dtype), tm, tr, ng_tensor_none(), 0, NULL, NULL);
  if (s != NG_SUCCESS) {
    rc = cli_fail_status(s, "groupnorm forward", err, errlen);
    goto done;
  }
  if (dy) {
    s = ng_groupnorm_backward(env->ctx, env->queue, &p, ng_tensor_of(bdy, 0, x->dtype), tx, tw, tm,
                              tr, ng_tensor_of(bdx, 0, x->dtype),
                              bdw ? ng_tensor_of(bdw, 0, w->dtype) : ng_tensor_none(),
                              bdb ? ng_tensor_of(bdb, 0, b->dtype) : ng_tensor_none(), 0,
                              ng_tensor_none(), 0, NULL, NULL);
    if (s != NG_SUCCESS) {
      rc = cli_fail_status(s, "groupnorm backward", err, errlen);
      goto done;
    }
  }
  rc = cli_download(env, by, "y", x->dtype, x->ndim, x->shape, out, err, errlen);
  if (!rc) rc = cli_download(env, bm, "mean", NG_F32, 2, sshape, out, err, errlen);
  if (!rc) rc = cli_download(env, br, "rstd", NG_F32, 2, sshape, out, err, errlen);
  if (!rc && dy) rc = cli_download(env, bdx, "dx", x->dtype, x->ndim, x->shape, out, err, errlen);
  if (!rc && bdw) rc = cli_download(env, bdw, "dweight", w->dtype, 1, w->shape, out, err, errlen);
  if (!rc && bdb) rc = cli_download(env, bdb, "dbias", b->dtype, 1, b->shape, out, err, errlen);
done:
  clFinish(env->queue);
  cl_mem all[] = {bx, bw, bb, by, bm, br, bdy, bdx, bdw, bdb};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) clReleaseMemObject(all[i]);
  return rc;
}

/* ---- bench ----------------------------------------------------------------------------------- */
typedef struct gn_bench {
  ng_groupnorm_params p;
  ng_dtype xd;
  bool frozen_w, frozen_b;
  cl_mem x, w, b, y, mean, rstd, dy, dx, dw, db, fscratch, bscratch;
  cli_bench_more more[2]; /* the shape's batch and groups, in the report */
} gn_bench;

static ng_tensor opt(cl_mem m, ng_dtype dt) {
  return m ? ng_tensor_of(m, 0, dt) : ng_tensor_none();
}

static ng_status bench_fwd(cli_env *env, void *state) {
  gn_bench *g = state;
  return ng_groupnorm_forward(
      env->ctx, env->queue, &g->p, ng_tensor_of(g->x, 0, g->xd), ng_tensor_of(g->w, 0, NG_F32),
      ng_tensor_of(g->b, 0, NG_F32), ng_tensor_of(g->y, 0, g->xd), ng_tensor_of(g->mean, 0, NG_F32),
      ng_tensor_of(g->rstd, 0, NG_F32), opt(g->fscratch, NG_F32), 0, NULL, NULL);
}

static ng_status bench_bwd(cli_env *env, void *state) {
  gn_bench *g = state;
  return ng_groupnorm_backward(env->ctx, env->queue, &g->p, ng_tensor_of(g->dy, 0, g->xd),
                               ng_tensor_of(g->x, 0, g->xd), ng_tensor_of(g->w, 0, NG_F32),
                               ng_tensor_of(g->mean, 0, NG_F32), ng_tensor_of(g->rstd, 0, NG_F32),
                               ng_tensor_of(g->dx, 0, g->xd), opt(g->dw, NG_F32),
                               opt(g->db, NG_F32), 0, opt(g->bscratch, NG_F32), 0, NULL, NULL);
}

static void bench_cleanup(void *state) {
  gn_bench *g = state;
  if (!g) return;
  cl_mem all[] = {g->x,  g->w,  g->b,  g->y,  g->mean,     g->rstd,
                  g->dy, g->dx, g->dw, g->db, g->fscratch, g->bscratch};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) clReleaseMemObject(all[i]);
  free(g);
}

static int bench_setup(cli_env *env, const cli_bench_spec *spec, const cli_options *o,
                       cli_bench_case *cases, int *ncases, void **state, char *err, size_t errlen) {
  const size_t C = spec->rows, S = spec->hidden, es = ng_dtype_size(spec->dtype);
  const size_t B = o->batch > 0 ? (size_t)o->batch : 1;
  if (S != 0 && C > SIZE_MAX / S / es / B) {
    snprintf(err, errlen, "batch x rows x hidden overflows");
    return CLI_USAGE;
  }
  const size_t G = o->groups > 0 ? (size_t)o->groups : C % 32 == 0 ? 32 : 1;
  if (C % G != 0) {
    snprintf(err, errlen, "groupnorm: --groups %zu does not divide --rows %zu (the channels)", G,
             C);
    return CLI_USAGE;
  }
  gn_bench *g = calloc(1, sizeof *g);
  if (!g) return CLI_DEVICE;
  g->p = (ng_groupnorm_params){B, C, S, G, o->eps};
  g->xd = spec->dtype;
  g->frozen_w = spec->freeze_weight;
  g->frozen_b = spec->freeze_bias;
  const size_t xn = B * C * S, xb = xn * es, nst = B * G;
  size_t fbytes = 0, bbytes = 0;
  ng_status s = ng_groupnorm_forward_scratch_size(env->ctx, &g->p, &fbytes);
  if (s == NG_SUCCESS)
    s = ng_groupnorm_backward_scratch_size(env->ctx, &g->p, !g->frozen_w, !g->frozen_b, &bbytes);
  int rc = CLI_DEVICE;
  if (s != NG_SUCCESS) {
    rc = cli_fail_status(s, "groupnorm scratch size", err, errlen);
    goto fail;
  }
  if (!(g->x = cli_random_buffer(env, spec->dtype, xn, 1, 0.0, 1.0, err, errlen)) ||
      !(g->w = cli_random_buffer(env, NG_F32, C, 2, 1.0, 0.2, err, errlen)) ||
      !(g->b = cli_random_buffer(env, NG_F32, C, 4, 0.0, 0.2, err, errlen)) ||
      !(g->dy = cli_random_buffer(env, spec->dtype, xn, 3, 0.0, 1.0, err, errlen)) ||
      !(g->y = cli_alloc(env, xb, err, errlen)) || !(g->dx = cli_alloc(env, xb, err, errlen)) ||
      !(g->mean = cli_alloc(env, nst * 4, err, errlen)) ||
      !(g->rstd = cli_alloc(env, nst * 4, err, errlen)) ||
      (!g->frozen_w && !(g->dw = cli_alloc(env, C * 4, err, errlen))) ||
      (!g->frozen_b && !(g->db = cli_alloc(env, C * 4, err, errlen))) ||
      (fbytes && !(g->fscratch = cli_alloc(env, fbytes, err, errlen))) ||
      (bbytes && !(g->bscratch = cli_alloc(env, bbytes, err, errlen))))
    goto fail;
  const double x = (double)xb, w = 4.0 * (double)C, st = 2 * 4.0 * (double)nst;
  cases[0] = (cli_bench_case){.pass = "forward", .bytes = x + 2 * w + x + st, .run = bench_fwd};
  cases[1] = (cli_bench_case){.pass = "backward", .bytes = x + x + w + st + x + (g->frozen_w ? 0 : w) + (g->frozen_b ? 0 : w), .run = bench_bwd};
  for (int i = 0; i < 2; i++) {
    g->more[i].extra[0].key = "batch";
    g->more[i].extra[0].value = (double)B;
    g->more[i].extra[1].key = "groups";
    g->more[i].extra[1].value = (double)G;
    cli_bench_attach(&cases[i], &g->more[i]);
  }
  *ncases = 2;
  *state = g;
  return CLI_OK;
fail:
  bench_cleanup(g);
  return rc;
}

const cli_op cli_op_groupnorm = {"groupnorm", run, bench_setup, bench_cleanup, NULL};
