/* Fused linear + cross-entropy: validation, chunking, the GEMM plan and the enqueue sequence
 * (kernels in cl/flce.cl, GEMMs through src/gemm.c).
 *
 * Per chunk of rows [r0, r0 + cr):
 *   (bf16/f16 input) X → f32 staging
 *   Z[cr, V]  = X·Wᵀ                    GEMM "logits"   (split along V where W would be copied)
 *   rows kernel: Z becomes g in place (bias, softcap, lse, loss, z-loss, accuracy, scaled grad)
 *   dbias    (+)= Σ_rows g              column sums, chunks in order
 *   dW[V, H] (+)= gᵀ·X                  GEMM "dweight", beta 1 into the caller's f32 buffer
 *   dX[cr, H] = g·W                     GEMM "dinput"  (f32: straight into dinput; else staged
 *                                       in the X scratch, which dW no longer needs, then stored)
 * The scratch is one allocation per call: [Z | X staging | per-row values | stats | CLBlast temp],
 * the last one a sub-buffer so that CLBlast sees (and checks) exactly its own size. */
#include "../ng_gemm.h"
#include "../ng_internal.h"

#include <stdlib.h>
#include <string.h>

enum { G_LOGITS = 0, G_DINPUT = 1, G_DWEIGHT = 2, G_COUNT = 3 };
enum { K_FIRST = 0, K_MIDDLE = 1, K_LAST = 2, K_COUNT = 3 };

/* row kernel flags (cl/flce.cl) */
enum {
  F_BIAS = 1, F_CEW = 2, F_SOFTCAP = 4, F_SMOOTH = 8, F_ZLOSS = 16, F_GRAD = 32, F_GO_ROW = 64,
  F_LOSS_PLUS_Z = 128
};

#define NG_INT_MAX 2147483647u /* CLBlast indexes with int */
#define FLCE_ALIGN 256u        /* rows of the aligned leading part of a split (any tile divides it) */
#define N_STATS 8
#define NG_FLCE_MIN_AUTO_BUDGET ((size_t)256 << 20)

typedef struct flce_plan {
  size_t c, c_last, nchunks, vb;
  bool stage; /* input (and dinput) not f32: converted through the f32 X scratch */
  bool need[G_COUNT];
  size_t z_off, x_off, rows_off, st_off; /* floats into the scratch */
  size_t temp_origin, temp_bytes, scratch_bytes, total_bytes;
  ng_gemm_plan gp[G_COUNT][K_COUNT];
  bool have[K_COUNT];
} flce_plan;

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

ng_flce_params ng_flce_params_default(size_t bt, size_t h, size_t v) {
  ng_flce_params p;
  memset(&p, 0, sizeof p);
  p.bt = bt;
  p.h = h;
  p.v = v;
  p.ignore_index = -100;
  p.reduction = NG_REDUCTION_MEAN;
  p.grad_output = 1.0f;
  p.chunk_rows = NG_FLCE_AUTO;
  p.scratch_budget = NG_FLCE_AUTO;
  p.v_block = NG_FLCE_AUTO;
  return p;
}

/* ---- validation ---------------------------------------------------------------------------- */
static ng_status check_params(ng_context *ctx, cl_command_queue queue, const ng_flce_params *p,
                              const ng_flce_tensors *t, unsigned flags) {
  if (!ctx) return ng_fail(NG_ERR_NULL_HANDLE, "ctx is NULL");
  if (!p) return ng_fail(NG_ERR_NULL_HANDLE, "params is NULL");
  if (!t) return ng_fail(NG_ERR_NULL_HANDLE, "tensors is NULL");
  ng_status s = ng_check_queue(ctx, queue);
  size_t cnt = 0;
  if (s == NG_SUCCESS) s = ng_check_rows(p->bt, p->h, &cnt);
  if (s == NG_SUCCESS) s = ng_check_rows(p->v, p->h, &cnt);
  if (s == NG_SUCCESS && (flags & ~NG_ACCUMULATE_GRAD))
    s = ng_fail(NG_ERR_INVALID_VALUE, "unknown flags 0x%x", flags & ~NG_ACCUMULATE_GRAD);
  if (s == NG_SUCCESS && (p->reduction < NG_REDUCTION_MEAN || p->reduction > NG_REDUCTION_NONE))
    s = ng_fail(NG_ERR_INVALID_VALUE, "reduction %d is not mean, sum or none", (int)p->reduction);
  if (s == NG_SUCCESS) s = ng_check_scalar(p->label_smoothing, "label_smoothing", true);
  if (s == NG_SUCCESS && p->label_smoothing > 1.0f)
    s = ng_fail(NG_ERR_INVALID_VALUE, "label_smoothing = %g must lie in [0, 1]",
                (double)p->label_smoothing);
  if (s == NG_SUCCESS) s = ng_check_scalar(p->softcap, "softcap", true);
  if (s == NG_SUCCESS) s = ng_check_scalar(p->lse_square_scale, "lse_square_scale", true);
  if (s == NG_SUCCESS) s = ng_check_scalar(p->grad_output, "grad_output", false);
  return s;
}

static bool present(ng_tensor x) { return x.mem != NULL; }

/* Dtypes, presence rules and sizes. With check_buffers false (ng_flce_plan) only the rules that
 * do not need the buffers are applied. */
static ng_status check_tensors(ng_context *ctx, const ng_flce_params *p, const ng_flce_tensors *t,
                               bool check_buffers) {
  const size_t bt = p->bt, h = p->h, v = p->v;
  const size_t out_n = p->reduction == NG_REDUCTION_NONE ? bt : 1;
  ng_status s = NG_SUCCESS;
#define CHECK(cond, code, ...)                                                                     \
  do {                                                                                             \
    if (s == NG_SUCCESS && !(cond)) s = ng_fail(code, __VA_ARGS__);                                \
  } while (0)
#define CHECK_BUF(x, what, count, fl)                                                              \
  do {                                                                                             \
    if (s == NG_SUCCESS && check_buffers) s = ng_check_tensor(ctx, x, what, count, fl);           \
  } while (0)
  CHECK(present(t->input), NG_ERR_NULL_BUFFER, "input: buffer is NULL");
  CHECK(ng_is_float_dtype(t->input.dtype), NG_ERR_UNSUPPORTED_DTYPE,
        "input: dtype must be f32, f16 or bf16");
  CHECK_BUF(t->input, "input", bt * h, true);
  CHECK(present(t->weight), NG_ERR_NULL_BUFFER, "weight: buffer is NULL");
  CHECK(t->weight.dtype == NG_F32, NG_ERR_UNSUPPORTED_DTYPE,
        "weight: dtype must be f32 (CLBlast SGEMM reads it in place; a converted copy would be "
        "the [V, H] temporary this op avoids)");
  CHECK_BUF(t->weight, "weight", v * h, true);
  CHECK(present(t->target), NG_ERR_NULL_BUFFER, "target: buffer is NULL");
  CHECK(t->target.dtype == NG_I32 || t->target.dtype == NG_I64, NG_ERR_UNSUPPORTED_DTYPE,
        "target: dtype must be i32 or i64");
  CHECK_BUF(t->target, "target", bt, false);
  if (present(t->bias)) {
    CHECK(t->bias.dtype == NG_F32, NG_ERR_UNSUPPORTED_DTYPE, "bias: dtype must be f32");
    CHECK_BUF(t->bias, "bias", v, true);
  }
  if (present(t->ce_weight)) {
    CHECK(t->ce_weight.dtype == NG_F32, NG_ERR_UNSUPPORTED_DTYPE, "ce_weight: dtype must be f32");
    CHECK_BUF(t->ce_weight, "ce_weight", v, true);
  }
  if (p->reduction == NG_REDUCTION_NONE)
    CHECK(present(t->grad_output), NG_ERR_NULL_BUFFER,
          "grad_output: reduction none needs a [bt] grad_output tensor");
  if (present(t->grad_output)) {
    CHECK(t->grad_output.dtype == NG_F32, NG_ERR_UNSUPPORTED_DTYPE,
          "grad_output: dtype must be f32");
    CHECK_BUF(t->grad_output, "grad_output", out_n, true);
  }
  CHECK(present(t->loss), NG_ERR_NULL_BUFFER, "loss: buffer is NULL");
  CHECK(t->loss.dtype == NG_F32, NG_ERR_UNSUPPORTED_DTYPE, "loss: dtype must be f32");
  CHECK_BUF(t->loss, "loss", out_n, true);
  if (present(t->z_loss)) {
    CHECK(t->z_loss.dtype == NG_F32, NG_ERR_UNSUPPORTED_DTYPE, "z_loss: dtype must be f32");
    CHECK_BUF(t->z_loss, "z_loss", out_n, true);
  }
  if (present(t->accuracy)) {
    CHECK(t->accuracy.dtype == NG_F32, NG_ERR_UNSUPPORTED_DTYPE, "accuracy: dtype must be f32");
    CHECK_BUF(t->accuracy, "accuracy", out_n, true);
  }
  if (present(t->dinput)) {
    CHECK(t->dinput.dtype == t->input.dtype, NG_ERR_DTYPE_MISMATCH,
          "dinput has dtype %s but input has %s",
          ng_dtype_name(t->dinput.dtype) ? ng_dtype_name(t->dinput.dtype) : "?",
          ng_dtype_name(t->input.dtype) ? ng_dtype_name(t->input.dtype) : "?");
    CHECK_BUF(t->dinput, "dinput", bt * h, true);
  }
  if (present(t->dweight)) {
    CHECK(t->dweight.dtype == NG_F32, NG_ERR_UNSUPPORTED_DTYPE, "dweight: dtype must be f32");
    CHECK_BUF(t->dweight, "dweight", v * h, true);
  }
  if (present(t->dbias)) {
    CHECK(present(t->bias), NG_ERR_INVALID_VALUE, "dbias given but the op has no bias");
    CHECK(t->dbias.dtype == NG_F32, NG_ERR_UNSUPPORTED_DTYPE, "dbias: dtype must be f32");
    CHECK_BUF(t->dbias, "dbias", v, true);
  }
  if (present(t->scratch)) {
    CHECK(t->scratch.dtype == NG_F32 && t->scratch.offset == 0, NG_ERR_INVALID_VALUE,
          "scratch: must be an f32 tensor at offset 0");
  }
  /* CLBlast's kernels index with int: every GEMM operand must stay below 2^31 elements. */
  CHECK(t->weight.offset <= NG_INT_MAX && v * h <= NG_INT_MAX - t->weight.offset,
        NG_ERR_INDEX_OVERFLOW, "weight: offset %zu + %zu elements reach 2^31 (CLBlast's int "
        "indexing)", t->weight.offset, v * h);
  if (present(t->dweight))
    CHECK(t->dweight.offset <= NG_INT_MAX && v * h <= NG_INT_MAX - t->dweight.offset,
          NG_ERR_INDEX_OVERFLOW, "dweight: offset %zu + %zu elements reach 2^31",
          t->dweight.offset, v * h);
  if (t->input.dtype == NG_F32) {
    CHECK(t->input.offset <= NG_INT_MAX && bt * h <= NG_INT_MAX - t->input.offset,
          NG_ERR_INDEX_OVERFLOW, "input: offset %zu + %zu elements reach 2^31", t->input.offset,
          bt * h);
    if (present(t->dinput))
      CHECK(t->dinput.offset <= NG_INT_MAX && bt * h <= NG_INT_MAX - t->dinput.offset,
            NG_ERR_INDEX_OVERFLOW, "dinput: offset %zu + %zu elements reach 2^31",
            t->dinput.offset, bt * h);
  }
#undef CHECK
#undef CHECK_BUF
  return s;
}

/* ---- planning ------------------------------------------------------------------------------ */
static void plan_free(flce_plan *pl) {
  for (int g = 0; g < G_COUNT; g++)
    for (int k = 0; k < K_COUNT; k++) ng_gemm_plan_free(&pl->gp[g][k]);
}

/* Rows of weight per call where a product must be split: the chunk rounded up to 256, or more
 * when a quarter of the logits chunk (c·V/4 floats) holds more rows of weight — fewer, larger
 * calls, and still a copy smaller than the chunk's own logits. */
static size_t auto_v_block(size_t c, size_t v, size_t h) {
  size_t vb = round_up(c, FLCE_ALIGN);
  const size_t q = c * v / (4 * h) / FLCE_ALIGN * FLCE_ALIGN;
  if (q > vb) vb = q;
  return vb;
}

/* The whole (unsplit) product of GEMM `which` for the chunk at rows [r0, r0 + cr). */
static ng_gemm chunk_gemm(const flce_plan *pl, const ng_flce_params *p, const ng_flce_tensors *t,
                          cl_mem scratch, int which, size_t r0, size_t cr, bool first_chunk,
                          bool accumulate) {
  const size_t h = p->h, v = p->v;
  cl_mem xm = pl->stage ? scratch : t->input.mem;
  const size_t xo = pl->stage ? pl->x_off : t->input.offset + r0 * h;
  ng_gemm g;
  memset(&g, 0, sizeof g);
  g.alpha = 1.0f;
  switch (which) {
  case G_LOGITS: /* Z[cr, V] = X[cr, H]·W[V, H]ᵀ */
    g.tb = true;
    g.m = cr, g.n = v, g.k = h;
    g.a = xm, g.a_off = xo, g.lda = h;
    g.b = t->weight.mem, g.b_off = t->weight.offset, g.ldb = h;
    g.c = scratch, g.c_off = pl->z_off, g.ldc = v;
    g.beta = 0.0f;
    break;
  case G_DINPUT: /* dX[cr, H] = G[cr, V]·W[V, H] */
    g.m = cr, g.n = h, g.k = v;
    g.a = scratch, g.a_off = pl->z_off, g.lda = v;
    g.b = t->weight.mem, g.b_off = t->weight.offset, g.ldb = h;
    g.c = pl->stage ? scratch : t->dinput.mem;
    g.c_off = pl->stage ? pl->x_off : t->dinput.offset + r0 * h;
    g.ldc = h;
    g.beta = 0.0f;
    break;
  default: /* dW[V, H] (+)= G[cr, V]ᵀ·X[cr, H] */
    g.ta = true;
    g.m = v, g.n = h, g.k = cr;
    g.a = scratch, g.a_off = pl->z_off, g.lda = v;
    g.b = xm, g.b_off = xo, g.ldb = h;
    g.c = t->dweight.mem, g.c_off = t->dweight.offset, g.ldc = h;
    g.beta = first_chunk && !accumulate ? 0.0f : 1.0f;
    break;
  }
  return g;
}

static void chunk_rows_of(const flce_plan *pl, size_t k, size_t *r0, size_t *cr) {
  *r0 = k * pl->c;
  *cr = k + 1 == pl->nchunks ? pl->c_last : pl->c;
}

static int kind_of(const flce_plan *pl, size_t k) {
  return k == 0 ? K_FIRST : k + 1 == pl->nchunks ? K_LAST : K_MIDDLE;
}

/* Plans of every GEMM for chunk size c (scratch layout included). `placeholder` stands for the
 * scratch buffer while planning (only offsets matter to CLBlast's size query). */
static ng_status plan_for(ng_context *ctx, cl_command_queue q, const ng_flce_params *p,
                          const ng_flce_tensors *t, unsigned flags, size_t c, flce_plan *pl) {
  const size_t bt = p->bt, h = p->h, v = p->v;
  plan_free(pl);
  memset(pl->have, 0, sizeof pl->have);
  pl->c = c;
  pl->nchunks = (bt + c - 1) / c;
  pl->c_last = bt - (pl->nchunks - 1) * c;
  pl->vb = p->v_block != NG_FLCE_AUTO ? p->v_block : auto_v_block(c, v, h);
  pl->stage = t->input.dtype != NG_F32;
  pl->need[G_LOGITS] = true;
  pl->need[G_DINPUT] = present(t->dinput);
  pl->need[G_DWEIGHT] = present(t->dweight);
  /* Z at offset 0 (so CLBlast need not copy g when V and the chunk fit its tiles). */
  pl->z_off = 0;
  pl->x_off = round_up(c * v, 64);
  pl->rows_off = pl->x_off + (pl->stage ? round_up(c * h, 64) : 0);
  pl->st_off = pl->rows_off + (p->reduction != NG_REDUCTION_NONE ? round_up(3 * bt, 64) : 0);
  pl->scratch_bytes = (pl->st_off + N_STATS) * 4;
  size_t align = ctx->info.base_align_bytes > 256 ? ctx->info.base_align_bytes : 256;
  pl->temp_origin = round_up(pl->scratch_bytes, align);

  const bool acc = (flags & NG_ACCUMULATE_GRAD) != 0;
  cl_mem ph = t->input.mem ? t->input.mem : (cl_mem)1; /* never dereferenced by the query */
  size_t temp = 0;
  for (int kind = 0; kind < K_COUNT; kind++) {
    size_t k = kind == K_FIRST ? 0 : kind == K_MIDDLE ? 1 : pl->nchunks - 1;
    if (kind == K_MIDDLE && pl->nchunks < 3) continue;
    if (kind == K_LAST && pl->nchunks < 2) continue;
    size_t r0, cr;
    chunk_rows_of(pl, k, &r0, &cr);
    pl->have[kind] = true;
    for (int g = 0; g < G_COUNT; g++) {
      if (!pl->need[g]) continue;
      ng_gemm whole = chunk_gemm(pl, p, t, ph, g, r0, cr, k == 0, acc);
      const ng_gemm_dim dim = g == G_LOGITS ? NG_GEMM_N : g == G_DINPUT ? NG_GEMM_K : NG_GEMM_M;
      const ng_gemm_operand big = g == G_DWEIGHT ? NG_GEMM_C : NG_GEMM_B;
      ng_status s = ng_gemm_plan_split(q, &whole, dim, big, pl->vb, FLCE_ALIGN,
                                       p->v_block != NG_FLCE_AUTO, &pl->gp[g][kind]);
      if (s != NG_SUCCESS) return s;
      if (pl->gp[g][kind].temp_bytes > temp) temp = pl->gp[g][kind].temp_bytes;
    }
  }
  /* Always a (small) temporary buffer of our own, so that CLBlast never allocates one. */
  pl->temp_bytes = round_up(temp > 256 ? temp : 256, 256);
  pl->total_bytes = pl->temp_origin + pl->temp_bytes;
  return NG_SUCCESS;
}

static size_t max_chunk_rows(const ng_flce_params *p) {
  /* The logits and the input chunk (c·V + c·H floats, plus alignment) must stay below 2^31
   * floats: CLBlast indexes the scratch with int. */
  size_t lim = (NG_INT_MAX - 128) / (p->v + p->h);
  return lim < 1 ? 1 : lim;
}

/* Automatic chunks are multiples of 256 rows (or of 64 below that): chunk-sized GEMM operands
 * then fit CLBlast's tiles and need no padded copy. */
static size_t round_chunk(size_t c) {
  if (c >= FLCE_ALIGN) return c / FLCE_ALIGN * FLCE_ALIGN;
  if (c >= 64) return c / 64 * 64;
  return c < 1 ? 1 : c;
}

static ng_status make_plan(ng_context *ctx, cl_command_queue q, const ng_flce_params *p,
                           const ng_flce_tensors *t, unsigned flags, flce_plan *pl) {
  memset(pl, 0, sizeof *pl);
  const size_t bt = p->bt, cap_rows = max_chunk_rows(p);
  const size_t max_alloc = (size_t)ctx->info.max_alloc;
  if (p->chunk_rows != NG_FLCE_AUTO) {
    size_t c = p->chunk_rows < bt ? p->chunk_rows : bt;
    if (c > cap_rows)
      return ng_fail(NG_ERR_INDEX_OVERFLOW, "chunk_rows %zu x (v + h) reaches 2^31 floats",
                     p->chunk_rows);
    ng_status s = plan_for(ctx, q, p, t, flags, c, pl);
    if (s == NG_SUCCESS && max_alloc && pl->total_bytes > max_alloc)
      s = ng_fail(NG_ERR_INVALID_VALUE,
                  "chunk_rows %zu needs %zu bytes of scratch, more than the device's largest "
                  "allocation (%zu)", c, pl->total_bytes, max_alloc);
    return s;
  }
  size_t budget = p->scratch_budget;
  if (budget == NG_FLCE_AUTO) {
    /* 1/64 of the device's memory, at least 256 MiB */
    cl_ulong gm = 0;
    clGetDeviceInfo(ctx->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gm, &gm, NULL);
    budget = (size_t)(gm / 64);
    if (budget < NG_FLCE_MIN_AUTO_BUDGET) budget = NG_FLCE_MIN_AUTO_BUDGET;
  }
  if (max_alloc && budget > max_alloc) budget = max_alloc;
  /* First guess: logits, staging and CLBlast's copies of the chunk operands per row. */
  const size_t per_row = 4 * (2 * p->v + 3 * p->h), fixed = 16 * bt + 4096;
  size_t c = budget > fixed ? (budget - fixed) / per_row : 1;
  c = round_chunk(c);
  if (c > bt) c = bt;
  if (c > cap_rows) c = cap_rows;
  if (c < 1) c = 1;
  /* Shrink until the plan fits (the guess above is rough), then grow by whole granules while
   * the next size still fits. */
  ng_status s = NG_SUCCESS;
  for (int it = 0;; it++) {
    s = plan_for(ctx, q, p, t, flags, c, pl);
    if (s != NG_SUCCESS) return s;
    if (pl->total_bytes <= budget) break;
    if (c == 1 || it == 12)
      return ng_fail(NG_ERR_INVALID_VALUE,
                     "scratch_budget %zu bytes is too small: %zu rows per chunk need %zu", budget,
                     c, pl->total_bytes);
    size_t nc = (size_t)((double)c * (double)budget / (double)pl->total_bytes * 0.95);
    if (nc >= c) nc = c - 1;
    c = round_chunk(nc);
  }
  for (int it = 0; it < 64 && c < bt; it++) {
    size_t nc = c >= FLCE_ALIGN ? c + FLCE_ALIGN : c >= 64 ? c + 64 : c + 1;
    if (nc > bt) nc = bt;
    if (nc > cap_rows) break;
    flce_plan up;
    memset(&up, 0, sizeof up);
    s = plan_for(ctx, q, p, t, flags, nc, &up);
    if (s != NG_SUCCESS || up.total_bytes > budget) {
      plan_free(&up);
      if (s != NG_SUCCESS) return s;
      break;
    }
    plan_free(pl);
    *pl = up;
    c = nc;
  }
  return NG_SUCCESS;
}

static void fill_info(const flce_plan *pl, ng_flce_info *info) {
  if (!info) return;
  memset(info, 0, sizeof *info);
  info->chunk_rows = pl->c;
  info->chunks = pl->nchunks;
  info->v_block = pl->vb;
  for (int g = 0; g < G_COUNT; g++) {
    if (!pl->need[g]) continue;
    info->gemm_strategy[g] = pl->gp[g][K_FIRST].strategy;
    for (int k = 0; k < K_COUNT; k++)
      if (pl->have[k] && pl->gp[g][k].temp_bytes > info->gemm_temp_max[g])
        info->gemm_temp_max[g] = pl->gp[g][k].temp_bytes;
    for (size_t c = 0; c < pl->nchunks; c++) info->gemm_calls += pl->gp[g][kind_of(pl, c)].count;
  }
  info->gemm_temp_bytes = pl->temp_bytes;
  info->scratch_bytes = pl->temp_origin;
  info->peak_bytes = pl->total_bytes;
}

ng_status ng_flce_plan(ng_context *ctx, cl_command_queue queue, const ng_flce_params *p,
                       const ng_flce_tensors *t, unsigned flags, ng_flce_info *info) {
  ng_clear_detail();
  if (!info) return ng_fail(NG_ERR_NULL_HANDLE, "info is NULL");
  ng_status s = check_params(ctx, queue, p, t, flags);
  if (s == NG_SUCCESS) s = check_tensors(ctx, p, t, false);
  if (s != NG_SUCCESS) return s;
  flce_plan pl;
  s = make_plan(ctx, queue, p, t, flags, &pl);
  if (s == NG_SUCCESS) fill_info(&pl, info);
  plan_free(&pl);
  return s;
}

/* ---- running ------------------------------------------------------------------------------- */
static ng_status check_targets(cl_command_queue q, const ng_flce_params *p, ng_tensor tg,
                               cl_uint nwait, const cl_event *wait) {
  const size_t es = ng_dtype_size(tg.dtype);
  void *host = malloc(p->bt * es);
  if (!host) return ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "target copy of %zu rows", p->bt);
  cl_int e = clEnqueueReadBuffer(q, tg.mem, CL_TRUE, tg.offset * es, p->bt * es, host, nwait,
                                 nwait ? wait : NULL, NULL);
  ng_status s = NG_SUCCESS;
  if (e != CL_SUCCESS) s = ng_fail(e, "target: reading it back for the range check failed");
  for (size_t i = 0; i < p->bt && s == NG_SUCCESS; i++) {
    const int64_t v = tg.dtype == NG_I64 ? ((const int64_t *)host)[i] : ((const int32_t *)host)[i];
    if (v != p->ignore_index && (v < 0 || (uint64_t)v >= p->v))
      s = ng_fail(NG_ERR_TARGET_OUT_OF_RANGE,
                  "target[%zu] = %lld lies outside [0, %zu) and is not ignore_index (%lld)", i,
                  (long long)v, p->v, (long long)p->ignore_index);
  }
  free(host);
  return s;
}

/* Call i of GEMM g for chunk k (rows from r0). A middle chunk runs the plan made for chunk 1,
 * moved to its rows: only the operands in the caller's row-indexed buffers (input, dinput)
 * move; staged ones live in the scratch at fixed places. */
static ng_gemm planned_call(const flce_plan *pl, int g, size_t k, size_t i, size_t r0) {
  const int kind = kind_of(pl, k);
  ng_gemm c = pl->gp[g][kind].calls[i];
  const size_t d = kind == K_MIDDLE ? r0 - pl->c : 0;
  if (d && !pl->stage) {
    if (g == G_LOGITS) c.a_off += d * c.lda;
    else if (g == G_DWEIGHT) c.b_off += d * c.ldb;
    else c.c_off += d * c.ldc;
  }
  return c;
}

static ng_status run_plan(cl_command_queue q, const flce_plan *pl, int g, size_t k, size_t r0,
                          cl_mem temp) {
  const ng_gemm_plan *gp = &pl->gp[g][kind_of(pl, k)];
  for (size_t i = 0; i < gp->count; i++) {
    ng_gemm c = planned_call(pl, g, k, i, r0);
    ng_status s = ng_gemm_enqueue(q, &c, temp);
    if (s != NG_SUCCESS) return s;
  }
  return NG_SUCCESS;
}

ng_status ng_flce_list_gemms(ng_context *ctx, cl_command_queue queue, const ng_flce_params *p,
                             const ng_flce_tensors *t, unsigned flags, ng_gemm **calls,
                             int **which, size_t *count, size_t *v_block, size_t *chunk) {
  ng_clear_detail();
  *calls = NULL;
  *which = NULL;
  *count = 0;
  ng_status s = check_params(ctx, queue, p, t, flags);
  if (s == NG_SUCCESS) s = check_tensors(ctx, p, t, false);
  if (s != NG_SUCCESS) return s;
  flce_plan pl;
  s = make_plan(ctx, queue, p, t, flags, &pl);
  size_t n = 0;
  for (size_t k = 0; s == NG_SUCCESS && k < pl.nchunks; k++)
    for (int g = 0; g < G_COUNT; g++)
      if (pl.need[g]) n += pl.gp[g][kind_of(&pl, k)].count;
  if (s == NG_SUCCESS) {
    *calls = malloc((n ? n : 1) * sizeof **calls);
    *which = malloc((n ? n : 1) * sizeof **which);
    if (!*calls || !*which) s = ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "GEMM list");
  }
  for (size_t k = 0; s == NG_SUCCESS && k < pl.nchunks; k++) {
    size_t r0, cr;
    chunk_rows_of(&pl, k, &r0, &cr);
    const int order[G_COUNT] = {G_LOGITS, G_DWEIGHT, G_DINPUT};
    for (int oi = 0; oi < G_COUNT; oi++) {
      const int g = order[oi];
      if (!pl.need[g]) continue;
      for (size_t i = 0; i < pl.gp[g][kind_of(&pl, k)].count; i++) {
        (*calls)[*count] = planned_call(&pl, g, k, i, r0);
        (*which)[(*count)++] = g;
      }
    }
  }
  if (s == NG_SUCCESS) {
    *v_block = pl.vb;
    *chunk = pl.c;
  }
  plan_free(&pl);
  return s;
}

static ng_status flce_run(ng_context *ctx, cl_command_queue queue, const ng_flce_params *p,
                          const ng_flce_tensors *t, unsigned flags, ng_flce_info *info,
                          bool gemms_only, cl_uint nwait, const cl_event *wait, cl_event *event) {
  ng_clear_detail();
  ng_status s = check_params(ctx, queue, p, t, flags);
  if (s == NG_SUCCESS) s = ng_check_wait_list(nwait, wait);
  if (s == NG_SUCCESS) s = check_tensors(ctx, p, t, true);
  if (s != NG_SUCCESS) return s;

  const ng_row_launch l = ng_choose_row_launch(ctx, p->bt, p->v, false, false);
  ng_opts o;
  ng_opts_init(&o);
  ng_opts_add(&o, "DTYPE", t->input.dtype);
  ng_opts_add(&o, "WG", l.wg);
  cl_program prog;
  s = ng_get_program(ctx, "flce", &o, &prog);
  if (s != NG_SUCCESS) return s;

  flce_plan pl;
  s = make_plan(ctx, queue, p, t, flags, &pl);
  if (s == NG_SUCCESS && present(t->scratch))
    s = ng_check_tensor(ctx, t->scratch, "scratch", pl.total_bytes / 4, true);
  if (s == NG_SUCCESS && !gemms_only) s = check_targets(queue, p, t->target, nwait, wait);
  if (s != NG_SUCCESS) {
    plan_free(&pl);
    return s;
  }
  /* Past this point the wait list has been waited for by the blocking read (in-order queue);
   * the GEMM-only path hands it to a marker instead. */
  if (gemms_only && nwait) {
    cl_int e = clEnqueueMarkerWithWaitList(queue, nwait, wait, NULL);
    if (e != CL_SUCCESS) {
      plan_free(&pl);
      return ng_fail(e, "clEnqueueMarkerWithWaitList failed");
    }
  }

  ng_scratch sc;
  s = ng_scratch_acquire(ctx, present(t->scratch) ? t->scratch : ng_tensor_none(),
                         pl.total_bytes, &sc);
  cl_mem temp = NULL;
  if (s == NG_SUCCESS) {
    cl_buffer_region reg = {pl.temp_origin, pl.temp_bytes};
    cl_int e = CL_SUCCESS;
    temp = clCreateSubBuffer(sc.mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &reg, &e);
    if (!temp) s = ng_fail(e, "clCreateSubBuffer for CLBlast's temporary (%zu bytes) failed",
                           pl.temp_bytes);
  }
  if (s != NG_SUCCESS) {
    ng_scratch_release(&sc);
    plan_free(&pl);
    return s;
  }
  cl_mem scr = sc.mem;
  const size_t h = p->h, v = p->v, bt = p->bt;
  if (gemms_only && pl.stage) {
    /* the staged input is not converted here: give the GEMMs zeros rather than stale bits */
    const float zero = 0.0f;
    cl_int e = clEnqueueFillBuffer(queue, scr, &zero, sizeof zero, pl.x_off * 4,
                                   pl.c * h * 4, 0, NULL, NULL);
    if (e != CL_SUCCESS) s = ng_fail(e, "clEnqueueFillBuffer of the input staging failed");
  }
  const bool none = p->reduction == NG_REDUCTION_NONE;
  const bool acc = (flags & NG_ACCUMULATE_GRAD) != 0;
  const bool grad = present(t->dinput) || present(t->dweight) || present(t->dbias);
  /* Re-aim the planned calls at the real scratch buffer. */
  for (int g = 0; g < G_COUNT; g++)
    for (int k = 0; k < K_COUNT; k++)
      for (size_t i = 0; i < pl.gp[g][k].count; i++) {
        ng_gemm *c = &pl.gp[g][k].calls[i];
        if (g == G_LOGITS) {
          c->c = scr;
          if (pl.stage) c->a = scr;
        } else if (g == G_DINPUT) {
          c->a = scr;
          if (pl.stage) c->c = scr;
        } else {
          c->a = scr;
          if (pl.stage) c->b = scr;
        }
      }

  const cl_ulong st_off = pl.st_off;
  const cl_ulong tg_off = t->target.offset;
  const cl_int t64 = t->target.dtype == NG_I64;
  const cl_long ign = p->ignore_index;
  const cl_uint vv = (cl_uint)v, btu = (cl_uint)bt;
  const size_t small_local = ctx->info.max_wg >= 64 ? 64 : ctx->info.max_wg;

  if (!gemms_only) {
    const cl_ulong w_off = t->ce_weight.offset, go_off = t->grad_output.offset;
    const float go_scalar = p->grad_output;
    const cl_int red = (cl_int)p->reduction;
    /* for none the row kernel reads grad_output per row; prep must not read [1] of it */
    cl_mem go_mem = none ? NULL : t->grad_output.mem;
    const ng_arg args[] = {NG_ARG(t->target.mem), NG_ARG(tg_off), NG_ARG(t64),   NG_ARG(btu),
                           NG_ARG(ign),           NG_ARG(t->ce_weight.mem), NG_ARG(w_off),
                           NG_ARG(vv),            NG_ARG(go_mem), NG_ARG(go_off),
                           NG_ARG(go_scalar),     NG_ARG(red),    NG_ARG(scr),   NG_ARG(st_off)};
    s = ng_enqueue(ctx, queue, prog, "ng_flce_prep", l.wg, l.wg, args, NG_ARRAY_LEN(args), 0, NULL,
                   NULL);
  }

  for (size_t k = 0; k < pl.nchunks && s == NG_SUCCESS; k++) {
    size_t r0, cr;
    chunk_rows_of(&pl, k, &r0, &cr);
    const cl_uint cru = (cl_uint)cr, r0u = (cl_uint)r0;
    if (pl.stage && !gemms_only) {
      const cl_ulong so = t->input.offset + r0 * h, dof = pl.x_off;
      const cl_uint cnt = (cl_uint)(cr * h);
      const ng_arg a[] = {NG_ARG(t->input.mem), NG_ARG(so), NG_ARG(scr), NG_ARG(dof),
                          NG_ARG(cnt)};
      s = ng_enqueue(ctx, queue, prog, "ng_flce_to_f32", round_up(cr * h, small_local), small_local,
                     a, NG_ARRAY_LEN(a), 0, NULL, NULL);
    }
    if (s == NG_SUCCESS) s = run_plan(queue, &pl, G_LOGITS, k, r0, temp);
    if (s == NG_SUCCESS && !gemms_only) {
      int fl = 0;
      if (present(t->bias)) fl |= F_BIAS;
      if (present(t->ce_weight)) fl |= F_CEW;
      if (p->softcap > 0.0f) fl |= F_SOFTCAP;
      if (p->label_smoothing > 0.0f) fl |= F_SMOOTH;
      if (p->lse_square_scale > 0.0f) fl |= F_ZLOSS;
      if (grad) fl |= F_GRAD;
      if (none) fl |= F_GO_ROW | F_LOSS_PLUS_Z;
      const cl_ulong zo = pl.z_off, bo = t->bias.offset, wo = t->ce_weight.offset;
      const cl_ulong goo = t->grad_output.offset;
      cl_mem ce_m, zl_m, acc_m;
      cl_ulong ce_o, zl_o, acc_o;
      if (none) {
        ce_m = t->loss.mem, ce_o = t->loss.offset;
        zl_m = t->z_loss.mem, zl_o = t->z_loss.offset;
        acc_m = t->accuracy.mem, acc_o = t->accuracy.offset;
      } else {
        ce_m = zl_m = acc_m = scr;
        ce_o = pl.rows_off, zl_o = pl.rows_off + bt, acc_o = pl.rows_off + 2 * bt;
      }
      const cl_int fli = fl;
      const float cap = p->softcap, eps = p->label_smoothing;
      const float eps_v = (float)((double)p->label_smoothing / (double)v);
      const float lam = p->lse_square_scale;
      cl_mem go_mem = none ? t->grad_output.mem : NULL;
      const ng_arg a[] = {NG_ARG(scr),          NG_ARG(zo),    NG_ARG(vv),   NG_ARG(cru),
                          NG_ARG(r0u),          NG_ARG(t->target.mem), NG_ARG(tg_off),
                          NG_ARG(t64),          NG_ARG(ign),   NG_ARG(t->bias.mem), NG_ARG(bo),
                          NG_ARG(t->ce_weight.mem), NG_ARG(wo), NG_ARG(go_mem), NG_ARG(goo),
                          NG_ARG(scr),          NG_ARG(st_off), NG_ARG(ce_m), NG_ARG(ce_o),
                          NG_ARG(zl_m),         NG_ARG(zl_o),  NG_ARG(acc_m), NG_ARG(acc_o),
                          NG_ARG(fli),          NG_ARG(cap),   NG_ARG(eps),  NG_ARG(eps_v),
                          NG_ARG(lam)};
      s = ng_enqueue(ctx, queue, prog, "ng_flce_rows", cr * l.wg, l.wg, a, NG_ARRAY_LEN(a), 0, NULL,
                     NULL);
    }
    if (s == NG_SUCCESS && present(t->dbias) && !gemms_only) {
      const cl_ulong zo = pl.z_off, dbo = t->dbias.offset;
      const cl_int add = (k > 0 || acc) ? 1 : 0;
      const ng_arg a[] = {NG_ARG(scr), NG_ARG(zo), NG_ARG(vv), NG_ARG(cru), NG_ARG(t->dbias.mem),
                          NG_ARG(dbo), NG_ARG(add)};
      s = ng_enqueue(ctx, queue, prog, "ng_flce_colsum", round_up(v, small_local), small_local, a,
                     NG_ARRAY_LEN(a), 0, NULL, NULL);
    }
    if (s == NG_SUCCESS && pl.need[G_DWEIGHT])
      s = run_plan(queue, &pl, G_DWEIGHT, k, r0, temp);
    if (s == NG_SUCCESS && pl.need[G_DINPUT]) {
      s = run_plan(queue, &pl, G_DINPUT, k, r0, temp);
      if (s == NG_SUCCESS && pl.stage && !gemms_only) {
        const cl_ulong so = pl.x_off, dof = t->dinput.offset + r0 * h;
        const cl_uint cnt = (cl_uint)(cr * h);
        const ng_arg a[] = {NG_ARG(scr), NG_ARG(so), NG_ARG(t->dinput.mem), NG_ARG(dof),
                            NG_ARG(cnt)};
        s = ng_enqueue(ctx, queue, prog, "ng_flce_from_f32", round_up(cr * h, small_local),
                       small_local, a, NG_ARRAY_LEN(a), 0, NULL, NULL);
      }
    }
  }

  if (s == NG_SUCCESS && !none && !gemms_only) {
    const cl_ulong ce_o = pl.rows_off, zl_o = pl.rows_off + bt, acc_o = pl.rows_off + 2 * bt;
    const cl_int red = (cl_int)p->reduction;
    const cl_ulong lo = t->loss.offset, zo = t->z_loss.offset, ao = t->accuracy.offset;
    const ng_arg a[] = {NG_ARG(scr),        NG_ARG(ce_o), NG_ARG(zl_o), NG_ARG(acc_o),
                        NG_ARG(btu),        NG_ARG(scr),  NG_ARG(st_off), NG_ARG(red),
                        NG_ARG(t->loss.mem), NG_ARG(lo),  NG_ARG(t->z_loss.mem), NG_ARG(zo),
                        NG_ARG(t->accuracy.mem), NG_ARG(ao)};
    s = ng_enqueue(ctx, queue, prog, "ng_flce_finish", l.wg, l.wg, a, NG_ARRAY_LEN(a), 0, NULL, NULL);
  }
  if (s == NG_SUCCESS && event) {
    cl_int e = clEnqueueMarkerWithWaitList(queue, 0, NULL, event);
    if (e != CL_SUCCESS) s = ng_fail(e, "clEnqueueMarkerWithWaitList for the op's event failed");
  }
  if (s == NG_SUCCESS) fill_info(&pl, info);
  clReleaseMemObject(temp);
  ng_scratch_release(&sc);
  plan_free(&pl);
  return s;
}

ng_status ng_flce(ng_context *ctx, cl_command_queue queue, const ng_flce_params *p,
                  const ng_flce_tensors *t, unsigned flags, ng_flce_info *info, cl_uint nwait,
                  const cl_event *wait, cl_event *event) {
  return flce_run(ctx, queue, p, t, flags, info, false, nwait, wait, event);
}

ng_status ng_flce_gemms_only(ng_context *ctx, cl_command_queue queue, const ng_flce_params *p,
                             const ng_flce_tensors *t, unsigned flags, ng_flce_info *info,
                             cl_uint nwait, const cl_event *wait, cl_event *event) {
  return flce_run(ctx, queue, p, t, flags, info, true, nwait, wait, event);
}
