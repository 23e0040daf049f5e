/* normgrad-cli flce: fused linear + cross-entropy, forward and backward in one call.
 *   input [..., H] (F32/F16/BF16), weight [V, H] F32, target (input's shape without H, or flat
 *   [rows]; I32/I64), optional bias [V] F32, ce_weight [V] F32, grad_output F32 ([] or [1]; for
 *   --reduction none like target — without it --grad-output fills it)
 * → loss, z_loss (F32: [] for mean/sum, target's shape for none), dinput (input's dtype and
 *   shape; absent with --no-input-grad), dweight (F32 [V, H]; absent with --freeze-weight),
 *   dbias (F32 [V]; only with bias, absent with --freeze-bias). */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const inputs[] = {"input",     "weight",      "target", "bias",
                                     "ce_weight", "grad_output", NULL};

static ng_reduction reduction_of(const cli_options *o) {
  return o->reduction == CLI_RED_SUM ? NG_REDUCTION_SUM
         : o->reduction == CLI_RED_NONE ? NG_REDUCTION_NONE
                                        : NG_REDUCTION_MEAN;
}

static ng_flce_params params_of(const cli_options *o, size_t rows, size_t h, size_t v) {
  ng_flce_params p = ng_flce_params_default(rows, h, v);
  p.ignore_index = o->ignore_index;
  p.label_smoothing = o->label_smoothing;
  p.reduction = reduction_of(o);
  p.softcap = o->softcap;
  p.lse_square_scale = o->lse_square_scale;
  p.grad_output = o->grad_output;
  if (o->chunk_rows > 0) p.chunk_rows = (size_t)o->chunk_rows;
  if (o->scratch_budget > 0) p.scratch_budget = (size_t)o->scratch_budget;
  return p;
}

/* A [count] f32 buffer holding `value` everywhere. */
static cl_mem filled(cli_env *env, size_t count, float value, char *err, size_t errlen) {
  cl_mem m = cli_alloc(env, count * 4, err, errlen);
  if (!m) return NULL;
  cl_int e = clEnqueueFillBuffer(env->queue, m, &value, sizeof value, 0, count * 4, 0, NULL, NULL);
  if (e != CL_SUCCESS) {
    snprintf(err, errlen, "clEnqueueFillBuffer failed: %d", e);
    clReleaseMemObject(m);
    return NULL;
  }
  return m;
}

static int run(cli_env *env, const cli_options *o, const cli_tensors *in, cli_tensors *out,
               char *err, size_t errlen) {
  const cli_tensor *x, *w, *tg, *b, *cw, *go;
  size_t rows = 0, h = 0, v = 0;
  int rc = cli_check_names(in, "flce", inputs, err, errlen);
  if (!rc) rc = cli_input(in, "flce", "input", true, &x, err, errlen);
  if (!rc) rc = cli_input(in, "flce", "weight", true, &w, err, errlen);
  if (!rc) rc = cli_input(in, "flce", "target", true, &tg, err, errlen);
  if (!rc) rc = cli_input(in, "flce", "bias", false, &b, err, errlen);
  if (!rc) rc = cli_input(in, "flce", "ce_weight", false, &cw, err, errlen);
  if (!rc) rc = cli_input(in, "flce", "grad_output", false, &go, err, errlen);
  if (!rc) rc = cli_expect_dtype(x, CLI_FLOAT_DTYPES, err, errlen);
  if (!rc) rc = cli_rows_n(x, &rows, &h, err, errlen);
  if (!rc) rc = cli_expect_dtype(w, 1u << NG_F32, err, errlen);
  if (!rc && (w->ndim != 2 || w->shape[0] < 1 || w->shape[1] != (int64_t)h)) {
    char sh[160];
    snprintf(err, errlen, "flce: weight is %s; it must be [V, %zu] (%zu = the last dim of input)",
             cli_shape_str(w, sh, sizeof sh), h, h);
    rc = CLI_USAGE;
  }
  if (!rc) v = (size_t)w->shape[0];
  if (!rc) rc = cli_expect_dtype(tg, CLI_INDEX_DTYPES, err, errlen);
  if (!rc && cli_tensor_numel(tg) != rows) {
    snprintf(err, errlen, "flce: target has %zu elements, input has %zu rows",
             cli_tensor_numel(tg), rows);
    rc = CLI_USAGE;
  }
  const int64_t vshape[1] = {(int64_t)v};
  if (!rc && b) rc = cli_expect_dtype(b, 1u << NG_F32, err, errlen);
  if (!rc && b) rc = cli_expect_shape(b, 1, vshape, "the first dim of weight", err, errlen);
  if (!rc && cw) rc = cli_expect_dtype(cw, 1u << NG_F32, err, errlen);
  if (!rc && cw) rc = cli_expect_shape(cw, 1, vshape, "the first dim of weight", err, errlen);
  const bool none = o->reduction == CLI_RED_NONE;
  if (!rc && go) rc = cli_expect_dtype(go, 1u << NG_F32, err, errlen);
  if (!rc && go && cli_tensor_numel(go) != (none ? rows : 1)) {
    snprintf(err, errlen, "flce: grad_output has %zu elements; --reduction %s needs %zu",
             cli_tensor_numel(go), none ? "none" : o->reduction == CLI_RED_SUM ? "sum" : "mean",
             none ? rows : (size_t)1);
    rc = CLI_USAGE;
  }
  if (!rc && go && o->grad_output_set) {
    snprintf(err, errlen, "flce: give the upstream gradient as the grad_output tensor or as "
                          "--grad-output, not both");
    rc = CLI_USAGE;
  }
  if (rc) return rc;

  /* loss and z_loss: a scalar for mean/sum, the target's shape for none */
  const int ldim = none ? tg->ndim : 0;
  const int64_t *lshape = tg->shape;
  const bool want_dx = !o->no_input_grad, want_dw = !o->freeze_weight;
  const bool want_db = b && !o->freeze_bias;
  const size_t out_n = none ? rows : 1;
  ng_flce_params p = params_of(o, rows, h, v);
  cl_mem bx = NULL, bw = NULL, btg = NULL, bb = NULL, bcw = NULL, bgo = NULL, bl = NULL,
         bz = NULL, bdx = NULL, bdw = NULL, bdb = NULL;
  rc = CLI_DEVICE;
  if (!(bx = cli_upload(env, x, err, errlen))) goto done;
  if (!(bw = cli_upload(env, w, err, errlen))) goto done;
  if (!(btg = cli_upload(env, tg, err, errlen))) goto done;
  if (b && !(bb = cli_upload(env, b, err, errlen))) goto done;
  if (cw && !(bcw = cli_upload(env, cw, err, errlen))) goto done;
  if (go && !(bgo = cli_upload(env, go, err, errlen))) goto done;
  if (!go && none && !(bgo = filled(env, rows, o->grad_output, err, errlen))) goto done;
  if (!(bl = cli_alloc(env, out_n * 4, err, errlen))) goto done;
  if (!(bz = cli_alloc(env, out_n * 4, err, errlen))) goto done;
  if (want_dx && !(bdx = cli_alloc(env, x->nbytes, err, errlen))) goto done;
  if (want_dw && !(bdw = cli_alloc(env, w->nbytes, err, errlen))) goto done;
  if (want_db && !(bdb = cli_alloc(env, v * 4, err, errlen))) goto done;

  ng_flce_tensors t;
  memset(&t, 0, sizeof t);
  t.input = ng_tensor_of(bx, 0, x->dtype);
  t.weight = ng_tensor_of(bw, 0, NG_F32);
  t.target = ng_tensor_of(btg, 0, tg->dtype);
  t.bias = bb ? ng_tensor_of(bb, 0, NG_F32) : ng_tensor_none();
  t.ce_weight = bcw ? ng_tensor_of(bcw, 0, NG_F32) : ng_tensor_none();
  t.grad_output = bgo ? ng_tensor_of(bgo, 0, NG_F32) : ng_tensor_none();
  t.loss = ng_tensor_of(bl, 0, NG_F32);
  t.z_loss = ng_tensor_of(bz, 0, NG_F32);
  t.accuracy = ng_tensor_none();
  t.dinput = bdx ? ng_tensor_of(bdx, 0, x->dtype) : ng_tensor_none();
  t.dweight = bdw ? ng_tensor_of(bdw, 0, NG_F32) : ng_tensor_none();
  t.dbias = bdb ? ng_tensor_of(bdb, 0, NG_F32) : ng_tensor_none();
  t.scratch = ng_tensor_none();
  ng_status s = ng_flce(env->ctx, env->queue, &p, &t, 0, NULL, 0, NULL, NULL);
  if (s != NG_SUCCESS) {
    rc = cli_fail_status(s, "flce", err, errlen);
    goto done;
  }
  const int64_t vh[2] = {(int64_t)v, (int64_t)h};
  rc = cli_download(env, bl, "loss", NG_F32, ldim, lshape, out, err, errlen);
  if (!rc) rc = cli_download(env, bz, "z_loss", NG_F32, ldim, lshape, out, err, errlen);
  if (!rc && bdx) rc = cli_download(env, bdx, "dinput", x->dtype, x->ndim, x->shape, out, err, errlen);
  if (!rc && bdw) rc = cli_download(env, bdw, "dweight", NG_F32, 2, vh, out, err, errlen);
  if (!rc && bdb) rc = cli_download(env, bdb, "dbias", NG_F32, 1, vshape, out, err, errlen);
done:
  clFinish(env->queue);
  cl_mem all[] = {bx, bw, btg, bb, bcw, bgo, bl, bz, bdx, bdw, bdb};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) clReleaseMemObject(all[i]);
  return rc;
}

/* ---- bench ------------------------------------------------------------------------------------
 * --rows = BT, --hidden = H, --vocab V (default 32000); input in --dtype, weight and bias f32.
 * Passes: "forward" (the loss alone: no gradient asked for) and "backward" (the whole op, every
 * gradient not frozen), which also times the op's GEMMs alone in the same run
 * (ng_flce_gemms_only: the same CLBlast calls on the same buffers, nothing else) and reports the
 * extra device memory the op allocates (its scratch and CLBlast's temporary, which it provides). */
typedef struct flce_bench {
  ng_flce_params p;
  cli_bench_more more[2];
  ng_flce_tensors fwd, bwd;
  cl_mem x, w, tg, b, go, l, dx, dw, db, scratch;
} flce_bench;

static ng_status bench_fwd(cli_env *env, void *state) {
  flce_bench *b = state;
  return ng_flce(env->ctx, env->queue, &b->p, &b->fwd, 0, NULL, 0, NULL, NULL);
}

static ng_status bench_bwd(cli_env *env, void *state) {
  flce_bench *b = state;
  return ng_flce(env->ctx, env->queue, &b->p, &b->bwd, 0, NULL, 0, NULL, NULL);
}

static ng_status bench_gemms(cli_env *env, void *state) {
  flce_bench *b = state;
  return ng_flce_gemms_only(env->ctx, env->queue, &b->p, &b->bwd, 0, NULL, 0, NULL, NULL);
}

static void bench_cleanup(void *state) {
  flce_bench *b = state;
  if (!b) return;
  cl_mem all[] = {b->x, b->w, b->tg, b->b, b->go, b->l, b->dx, b->dw, b->db, b->scratch};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) clReleaseMemObject(all[i]);
  free(b);
}

static int bench_setup(cli_env *env, const cli_bench_spec *spec, const cli_options *o,
                       cli_bench_case *cases, int *ncases, void **state, char *err,
                       size_t errlen) {
  const size_t R = spec->rows, H = spec->hidden, V = o->vocab > 0 ? (size_t)o->vocab : 32000;
  const size_t es = ng_dtype_size(spec->dtype);
  if (R > SIZE_MAX / H / es || V > SIZE_MAX / H / 4) {
    snprintf(err, errlen, "rows, hidden and vocab overflow");
    return CLI_USAGE;
  }
  flce_bench *b = calloc(1, sizeof *b);
  if (!b) return CLI_DEVICE;
  b->p = params_of(o, R, H, V);
  const bool none = b->p.reduction == NG_REDUCTION_NONE;
  const bool want_dx = !o->no_input_grad, want_dw = !spec->freeze_weight;
  const bool want_db = !spec->freeze_bias;
  int rc = CLI_DEVICE;
  /* logits of a few units: x ~ U(0, 1)-ish, w scaled by 1/sqrt(H) */
  if (!(b->x = cli_random_buffer(env, spec->dtype, R * H, 1, 0.0, 1.0, err, errlen)) ||
      !(b->w = cli_random_buffer(env, NG_F32, V * H, 2, 0.0, 2.0 / sqrt((double)H), err,
                                 errlen)) ||
      !(b->tg = cli_random_buffer(env, NG_I32, R, 3, 0.0, (double)V, err, errlen)) ||
      !(b->b = cli_random_buffer(env, NG_F32, V, 4, 0.0, 0.1, err, errlen)) ||
      !(b->l = cli_alloc(env, (none ? R : 1) * 4, err, errlen)) ||
      (none && !(b->go = filled(env, R, o->grad_output, err, errlen))) ||
      (want_dx && !(b->dx = cli_alloc(env, R * H * es, err, errlen))) ||
      (want_dw && !(b->dw = cli_alloc(env, V * H * 4, err, errlen))) ||
      (want_db && !(b->db = cli_alloc(env, V * 4, err, errlen))))
    goto fail;
  ng_flce_tensors *t = &b->fwd;
  t->input = ng_tensor_of(b->x, 0, spec->dtype);
  t->weight = ng_tensor_of(b->w, 0, NG_F32);
  t->target = ng_tensor_of(b->tg, 0, NG_I32);
  t->bias = ng_tensor_of(b->b, 0, NG_F32);
  t->ce_weight = ng_tensor_none();
  t->grad_output = b->go ? ng_tensor_of(b->go, 0, NG_F32) : ng_tensor_none();
  t->loss = ng_tensor_of(b->l, 0, NG_F32);
  t->z_loss = t->accuracy = t->dinput = t->dweight = t->dbias = ng_tensor_none();
  t->scratch = ng_tensor_none();
  b->bwd = b->fwd;
  b->bwd.dinput = b->dx ? ng_tensor_of(b->dx, 0, spec->dtype) : ng_tensor_none();
  b->bwd.dweight = b->dw ? ng_tensor_of(b->dw, 0, NG_F32) : ng_tensor_none();
  b->bwd.dbias = b->db ? ng_tensor_of(b->db, 0, NG_F32) : ng_tensor_none();

  /* One scratch buffer, sized for the larger of the two passes, allocated here rather than on
   * every call (what a training loop would do). */
  ng_flce_info fi, bi;
  ng_status s = ng_flce_plan(env->ctx, env->queue, &b->p, &b->fwd, 0, &fi);
  if (s == NG_SUCCESS) s = ng_flce_plan(env->ctx, env->queue, &b->p, &b->bwd, 0, &bi);
  if (s != NG_SUCCESS) {
    rc = cli_fail_status(s, "flce plan", err, errlen);
    goto fail;
  }
  const size_t sbytes = fi.peak_bytes > bi.peak_bytes ? fi.peak_bytes : bi.peak_bytes;
  if (!(b->scratch = cli_alloc(env, sbytes, err, errlen))) goto fail;
  b->fwd.scratch = b->bwd.scratch = ng_tensor_of(b->scratch, 0, NG_F32);

  const double x = (double)(R * H * es), w = 4.0 * (double)(V * H), tgt = 4.0 * (double)R;
  const double bias = 4.0 * (double)V, l = 4.0 * (double)(none ? 2 * R : 1);
  const double mnk = 2.0 * (double)R * (double)V * (double)H;
  cases[0] = (cli_bench_case){.pass = "forward", .bytes = x + w + tgt + bias + l, .run = bench_fwd};
  b->more[0].flops = mnk;
  cases[1] = (cli_bench_case){.pass = "backward", .bytes = x + w + tgt + bias + l + (want_dx ? x : 0) + (want_dw ? w : 0) +
                                  (want_db ? bias : 0), .run = bench_bwd};
  b->more[1].flops = mnk * (1 + want_dx + want_dw);
  b->more[1].sub_pass = "gemms";
  b->more[1].sub_run = bench_gemms;
  const struct {
    const char *key;
    double value;
  } ex[] = {{"vocab", (double)V},
            {"chunk_rows", (double)bi.chunk_rows},
            {"chunks", (double)bi.chunks},
            {"v_block", (double)bi.v_block},
            {"gemm_calls", (double)bi.gemm_calls},
            {"scratch_bytes", (double)bi.scratch_bytes},
            {"gemm_temp_bytes", (double)bi.gemm_temp_bytes},
            {"extra_device_bytes", (double)bi.peak_bytes},
            {"vh4_bytes", w},
            {"extra_vs_vh4", w > 0 ? (double)bi.peak_bytes / w : 0}};
  for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
    b->more[1].extra[i].key = ex[i].key;
    b->more[1].extra[i].value = ex[i].value;
  }
  b->more[0].extra[0].key = "vocab";
  b->more[0].extra[0].value = (double)V;
  b->more[0].extra[1].key = "extra_device_bytes";
  b->more[0].extra[1].value = (double)fi.peak_bytes;
  cli_bench_attach(&cases[0], &b->more[0]);
  cli_bench_attach(&cases[1], &b->more[1]);
  *ncases = 2;
  *state = b;
  return CLI_OK;
fail:
  bench_cleanup(b);
  return rc;
}

const cli_op cli_op_flce = {"flce", run, bench_setup, bench_cleanup, NULL};
