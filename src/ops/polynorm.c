/* PolyNorm: validation, variant choice and enqueue (kernels in cl/polynorm.cl). */
#include "../ng_internal.h"

static ng_status check_params(ng_context *ctx, cl_command_queue queue, const ng_polynorm_params *p,
                              size_t *count) {
  if (!ctx) return ng_fail(NG_ERR_NULL_HANDLE, "ctx is NULL");
  if (!p) return ng_fail(NG_ERR_NULL_HANDLE, "params is NULL");
  ng_status s = ng_check_queue(ctx, queue);
  if (s == NG_SUCCESS) s = ng_check_rows(p->rows, p->n, count);
  if (s == NG_SUCCESS && p->rows > UINT32_MAX / 3)
    s = ng_fail(NG_ERR_INDEX_OVERFLOW, "rows %zu: rstd[rows, 3] exceeds the index range", p->rows);
  if (s == NG_SUCCESS) s = ng_check_scalar(p->eps, "eps", true);
  return s;
}

static ng_status check_rstd(ng_context *ctx, ng_tensor rstd, size_t rows) {
  ng_status s = ng_check_tensor(ctx, rstd, "rstd", rows * 3, true);
  if (s == NG_SUCCESS && rstd.dtype != NG_F32)
    s = ng_fail(NG_ERR_UNSUPPORTED_DTYPE, "rstd must be f32");
  return s;
}

/* Build options of the forward and backward programs; the launch path and
 * ng_polynorm_for_each_variant both use these, so ng_prebuild builds exactly what calls use. */
static void pass_opts(ng_opts *o, const ng_row_launch *l, ng_dtype x_dtype, bool bwd, bool dw,
                      bool db) {
  ng_opts_init(o);
  ng_opts_add(o, "DTYPE", x_dtype);
  ng_opts_add(o, "VEC", l->vec);
  ng_opts_add(o, "WG", l->wg);
  ng_launch_opts(o, l);
  ng_opts_add(o, "BWD", bwd);
  if (!bwd) return;
  ng_opts_add(o, "COMPUTE_DW", dw);
  ng_opts_add(o, "COMPUTE_DB", db);
}

/* The forward program: of the row launch l, or of the rows split across groups (c, when not
 * NULL: ng_polynorm_fwd_coop, which reads REG). */
static void fwd_opts(ng_opts *o, const ng_row_launch *l, const ng_coop *c, ng_dtype x_dtype) {
  pass_opts(o, c ? &c->l : l, x_dtype, false, false, false);
  if (c) ng_opts_add(o, "REG", c->l.reg_cols);
  if (c) ng_coop_opts(o, c);
}

/* The backward program of rows split across groups (ng_polynorm_bwd_coop): its launch's shape,
 * REG, which only that kernel reads, and with a gradient the gradients' dtype, which it writes. */
static void coop_opts(ng_opts *o, const ng_coop *c, ng_dtype x_dtype, bool dw, bool db,
                      ng_dtype w_dtype) {
  pass_opts(o, &c->l, x_dtype, true, dw, db);
  ng_opts_add(o, "REG", c->l.reg_cols);
  ng_coop_opts(o, c);
  if (dw || db) ng_opts_add(o, "G_DTYPE", w_dtype);
}

/* Scratch of the split kernel: one partial row of four columns (dw3, dw2, dw1, db) per set. */
static ng_status coop_scratch(const ng_coop *c, bool dw, bool db, size_t *bytes) {
  return ng_coop_partials(c, 4, dw || db ? 1 : 0, bytes);
}

/* The held backward's in-kernel sum of its partial rows (PN_CHUNK, pn_chunk_reduce in
 * cl/polynorm.cl): chunks of 128 rows summed by their last arriver, then the chunks' rows by the
 * last of those, instead of the ng_reduce_partials launch; the gradients' dtype is built in
 * (G_DTYPE), as the weight's is otherwise a kernel argument. NG_TUNE_FUSED_REDUCE turns it off
 * (1) or on (2) on any GPU-shaped launch (the tests force it on PoCL with wg=). By default on
 * NVIDIA, for groups of up to 128 work-items (N <= 2048 for 16-bit rows), for 16-bit rows with
 * dweight, for f16 rows with dbias alone and for groups of half a row (NG_ROWS_HALF_MID; bf16
 * dB alone at 2176 under NORMGRAD_TUNE: 92.8-93.0 -> 83.7-83.8 µs with the prefetch, 82.9-83.2
 * with the prefetch alone; 2560 88.4-88.8 -> 81.3-81.6, 87.4 alone). H100, rows·N = 2^25, old
 * and new binaries alternating, two runs:
 *  - bf16 with dW 1024 85.1-85.5 -> 81.5 us, 2048 81.9-82.2 -> 78.5-79.1, 4096 83.7-84.2 ->
 *    82.3-82.4; weight frozen (dB alone) 1024 84.9-85.7 -> 82.4-83.2, 2048 84.0-84.4 ->
 *    82.1-83.2; f16 with dW 1024 86.0-86.3 -> 82.1-83.7, 4096 86.7-87.2 -> 84.5-84.6; f32 with
 *    dW 1024 150.6-151.8 -> 148.1-149.2;
 *  - not taken: bf16 dB alone at 4096 (groups of 256) 80.1-80.3 -> 86.2-86.4, where the kernel
 *    took 78 registers instead of 64 and so three groups a compute unit instead of four; f32
 *    with dW at 4096 151.6-151.9 -> 152.1-152.8;
 *  - f16 dB alone (three runs, 2026-11-27): 4096 89.2-89.5 -> 85.4-86.7 us (0.77 -> 0.79-0.80),
 *    1000 rows of 4096 23.6-24.5 -> 22.8-23.5, 8192 (groups of 256 too) even, 82.0-82.8 ->
 *    82.5-83.0; bf16's at 4096 unchanged in the same runs (79.8-81.1 -> 80.2-81.2). */
static bool chunk_wanted(const ng_context *ctx, const ng_row_launch *l, ng_dtype xd, bool dw) {
  const bool half_row = (l->wg & (l->wg - 1)) != 0; /* NG_ROWS_HALF_MID's sizes alone */
  return l->wg > 1 && ng_reduce_on(ctx, l->nv_shfl && (l->wg <= 128 || (dw && xd != NG_F32) ||
                                                       xd == NG_F16 || half_row));
}

/* Groups a chunk: the PN_CHUNK option's value */
#define PN_CHUNK_ROWS 128

static void chunk_opts(ng_opts *o, bool on, ng_dtype g_dtype) {
  if (!on) return;
  ng_opts_add(o, "PN_CHUNK", PN_CHUNK_ROWS);
  ng_opts_add(o, "G_DTYPE", g_dtype);
}

/* The uints of pn_chunk_reduce's area: its counter, one per chunk, four per chunk row. */
static size_t chunk_area(const ng_row_launch *l) {
  const size_t chunks = (l->groups + PN_CHUNK_ROWS - 1) / PN_CHUNK_ROWS;
  return 1 + 5 * chunks;
}

/* The GPU kernels hold rows of up to PN_REG = 2 vectors per work-item (cl/polynorm.cl), whatever
 * a launch's reg_cols says (a CPU one says 1): the launches say so, since ng_coop_plan splits the
 * rows beyond what they hold. */
#define PN_HELD 2
/* bf16 rows beyond 512 vectors split across groups, though a 1024-wide group holds twice that
 * (H100, N = 16384, 2048 rows: 99.4-100.0 -> 97.1 us with dW, 97.4-98.0 -> 96.3 weight frozen) */
#define PN_COOP_HOLD 512
/* f32 rows split with two vectors a work-item beyond 1024 vectors, f16 rows as bf16's (H100,
 * rows·N = 2^25, two runs, with dW: f32 16384 227 -> 163 us, 32768 219-221 -> 172, 65536 246 ->
 * 192, frozen 212 -> 160-161, 202-206 -> 169-170, 241 -> 186, but 8192 154-155 -> 159; f16 8192
 * 86 -> 84-85, 16384 87-88 -> 84, 65536 107-109 -> 89, frozen 85-86 -> 85, 86-88 -> 84-85,
 * 110 -> 89). f16 rows widen their bits pair by pair (NG_COOP_F16_PACK; with dW, the binary
 * before and this one alternating, two runs: 4608 89.6-90.7 -> 82.5-82.6 us, 0.76 -> 0.83; 8192
 * 83.1-83.5 -> 82.2-82.3; 16384 85.4-85.7 -> 84.6-85.8; 65536 89.3-89.7 -> 86.6-86.7). */
#define PN_COOP_X (NG_COOP_F32 | NG_COOP_F16 | NG_COOP_F16_PACK)
#define PN_COOP_F32_FROM 1024

/* The forward splits bf16 rows beyond 2048 vectors across groups (ng_polynorm_fwd_coop), the
 * rows its 1024-wide groups do not hold (H100, bf16, rows·N = 2^25, three or four runs: 32768
 * 73.8-74.8 -> 60.3-61.4 us and 65536 66.1-66.8 -> 63.3-64.3, rows the launch streams). Rows of
 * 1025-2048 vectors split too until 2026-11-27 (16384 62.1-62.5 -> 58.4-58.8 us when it was
 * measured); the held rows have since overtaken the split (three runs, split -> held: 16384
 * 58.5-58.9 -> 54.9-55.7 us, 0.78-0.79 -> 0.83; 12288 64.9-65.8 -> 57.0-57.8, 0.70 -> 0.80;
 * 100 rows of 16384 13.9 -> 10.2, 512 rows 24.2 -> 22.9), as f16 rows, which never split
 * forward, had shown (16384 53.3 us against bf16's 59.2 split). */
#define PN_FWD_COOP_HOLD 2048
/* f32 rows split with bf16's four vectors a work-item beyond what the launch holds (65536 142 ->
 * 131-132 us, 32768 even at 123-124, but 16384 117.5 -> 122-123; with two vectors 32768 lost, 124
 * -> 134). bf16 and f32 rows publish each row's sums ahead
 * (ng_coop.ahead; H100, old and new binaries alternating, two to four runs: bf16 16384 59.7-60.5
 * -> 58.8-58.9 us, 32768 60.7-61.8 -> 57.8-58.2 (0.74-0.75 -> 0.79), 65536 63.7-64.3 ->
 * 58.8-59.4 (0.71-0.72 -> 0.78); f32 65536 132.5-133.5 -> 117.1-117.4 (0.68-0.69 -> 0.78-0.79)).
 * bf16 rows form and publish the next row's sums after this row's collect (NG_COOP_LATE16,
 * as RMSNorm's; H200, two runs: 32768 52.6-52.7 -> 49.4-49.6 us, 0.62 -> 0.66; 65536 54.1-54.9 ->
 * 51.3-51.8, 0.60 -> 0.63; after the stores about as much, f32 +1-2 %). f16 rows of 2049-4096
 * vectors split as bf16's, their bits widened pair by pair (NG_COOP_F16_PACK: 100 registers), in
 * calls of at least three rows a compute unit (H200, f16, streaming -> split, two runs: 1365 rows
 * of 24576 57.5-58.3 -> 48.1-48.8 us, 0.56 -> 0.68; 1024 of 32768 52.1-52.6 -> 47.2-47.7, 0.63
 * -> 0.69; 2047 of 16392 -2.6 %; 400 of 32768 -2.3 %, but 200 +21 % and 100-132 +28-30 %).
 * Longer f16 rows stream (65536 48.9-49.5 -> 49.6-50.2 split; on the H100 even, 61 us, before
 * the pairs and the sums ahead). Forced on (NG_TUNE_FUSED_REDUCE = 2) the rows' bound is lifted,
 * so that the tests' small calls reach the split. */
#define PN_FWD_COOP_X                                                                              \
  (NG_COOP_F32_FULL | NG_COOP_F16 | NG_COOP_F16_PACK | NG_COOP_AHEAD_BF16 | NG_COOP_AHEAD_F32 |    \
   NG_COOP_AHEAD_F16 | NG_COOP_LATE16)
#define PN_FWD_COOP_F32_FROM 2048
#define PN_FWD_COOP_F16_TO 4096
#define PN_FWD_COOP_F16_ROWS_PER_CU 3

/* The backward's f32 rows without dW publish each row's shares ahead (ng_coop.ahead; H100, old
 * and new binaries alternating, two runs: 65536 with dB alone 183.4-184.9 -> 160.5-160.9 us,
 * 0.74-0.75 -> 0.86; 32768 167.1-169.1 -> 154.2-155.1; both frozen 65536 178.0-178.2 ->
 * 152.3-153.7, 0.77 -> 0.89-0.90). With dW they lost (65536 182.1-182.6 -> 221.5-222.2, 32768
 * 165.3-166.7 -> 245.4-246.6), as did bf16 rows (65536 87.0 -> 135.1-135.9, with dB alone too;
 * 8192-32768 84.9-87.0 -> 96.6-98.8). dx keeps its bits: the same slices and additions. */
#define PN_COOP_AHEAD NG_COOP_AHEAD_F32

/* The plan of the backward's (bwd; of a pass that trains dW or not) or the forward's rows split
 * across groups, if they split. */
static bool coop_plan(const ng_context *ctx, const ng_row_launch *l, ng_dtype xd, size_t rows,
                      size_t n, bool bwd, bool dw, ng_coop *c) {
  if (xd == NG_F32 && n / l->vec <= (bwd ? PN_COOP_F32_FROM : PN_FWD_COOP_F32_FROM)) return false;
  if (!bwd && xd == NG_F16 &&
      (n / l->vec > PN_FWD_COOP_F16_TO ||
       (ctx->fused_reduce == 0 &&
        rows < PN_FWD_COOP_F16_ROWS_PER_CU * (size_t)ctx->info.compute_units)))
    return false;
  if (!bwd) return ng_coop_plan(ctx, l, xd, rows, n, PN_FWD_COOP_HOLD, PN_FWD_COOP_X, c);
  if (!ng_coop_plan(ctx, l, xd, rows, n, PN_COOP_HOLD, PN_COOP_X | (dw ? 0 : PN_COOP_AHEAD), c))
    return false;
  /* A single slice that its group nearly fills streams without the next-row prefetch (H100,
   * bf16 8192, one slice of 256 x 4, scan with prefetch=1: with dW 87.1-88.0 -> 82.9-83.7 us,
   * weight frozen 86.4-87.3 -> 82.8-83.3, f16 85.6-85.7 -> 82.5-84.4); a slice three quarters
   * full (6144: 80.3-81.4 -> 86.5-88.5) and two slices (16384) lost without it. A prefetch the
   * override or a table asks for stands (the H200 gains 6.5 % with it at 8192). */
  if (c->slices == 1 && !c->l.asked_prefetch &&
      n / l->vec > (size_t)c->l.wg * c->l.reg_cols * 15 / 16)
    c->l.prefetch = false;
  return true;
}

/* Groups of half a row for 16-bit rows: bf16's of 257-448 vectors (NG_ROWS_HALF_MID), f16's of
 * 257-384 (NG_ROWS_HALF_MID_384: at 3584 f16's both-frozen backward lost 5.6 % on 224 × 2). */
static ng_rows_mode half_mid(ng_dtype xd) {
  return xd == NG_BF16 ? NG_ROWS_HALF_MID : xd == NG_F16 ? NG_ROWS_HALF_MID_384 : 0;
}

/* The forward's launch mode (NG_ROWS_PAIRS; groups of half a row, half_mid). */
static ng_rows_mode fwd_mode(ng_dtype xd) {
  return NG_ROWS_FWD | NG_ROWS_PAIRS | (xd == NG_F32 ? 0 : NG_ROWS_X16) | half_mid(xd);
}

/* The backward's launch mode (NG_ROWS_POLY_DW with dweight, NG_ROWS_POLY_DB with dbias alone;
 * NG_ROWS_POLY_F16_3 for f16 rows with either; groups of half a row, half_mid, whatever the
 * gradients: the shape fixes dx's bits; with neither, the grid of NG_ROWS_POLY_FZ_960 / 1152). */
static ng_rows_mode bwd_mode(ng_dtype xd, bool dw, bool db) {
  const ng_rows_mode fz = xd == NG_BF16  ? NG_ROWS_POLY_FZ_960
                          : xd == NG_F16 ? NG_ROWS_POLY_FZ_1152
                                         : 0;
  return NG_ROWS_POLY_BWD | (xd == NG_F32 ? 0 : NG_ROWS_X16) | half_mid(xd) |
         (dw ? NG_ROWS_POLY_DW : db ? NG_ROWS_POLY_DB : fz) |
         (xd == NG_F16 && (dw || db) ? NG_ROWS_POLY_F16_3 : 0);
}

/* The row launch of the forward (bwd false) or of the backward (with dweight: dw; dbias: db) and
 * its scratch query (the group count sizes the partials; it depends on the dtype, the alignment
 * and the gradients, so the query takes the largest of the call's gradients' launches). */
static ng_row_launch launch(const ng_context *ctx, const ng_polynorm_params *p, bool vec_ok,
                            bool bwd, bool dw, bool db, ng_dtype xd) {
  /* A persistent grid (rows = SIZE_MAX asks for it): every group writes one row of dw/db
   * partials, so one group per row would make the reduction as long as the batch. The forward
   * takes it too, but for the rows NG_ROWS_PAIRS gives two a group. */
  /* with both parameters frozen (the LoRA pass, no partials) a kind of its own, whose grid and
   * prefetch may differ; its work-group shape is always the backward's (dx's bits) */
  const char *kind = !bwd ? "polynorm.fwd" : dw || db ? "polynorm.bwd" : "polynorm.bwd_frozen";
  ng_row_launch l = ng_choose_row_launch_k(ctx, kind, xd,
                                           bwd ? SIZE_MAX : p->rows, p->n, vec_ok,
                                           bwd ? bwd_mode(xd, dw, db) : fwd_mode(xd));
  l.reg_cols = PN_HELD;
  if (l.groups > p->rows) l.groups = (unsigned)p->rows;
  if (l.groups == 0) l.groups = 1;
  return l;
}

/* The tests' hooks: a pass's launch for vector-aligned buffers and its split plan */
static bool plan(const ng_context *ctx, size_t rows, size_t n, ng_dtype xd, bool bwd, bool dw,
                 bool db, ng_row_launch *l, ng_coop *c) {
  const ng_polynorm_params p = {rows, n, 1e-6f};
  *l = launch(ctx, &p, true, bwd, dw, db, xd);
  return coop_plan(ctx, l, xd, rows, n, bwd, dw, c);
}

bool ng_polynorm_fwd_plan(const ng_context *ctx, size_t rows, size_t n, ng_dtype xd, ng_coop *c) {
  ng_row_launch l;
  return plan(ctx, rows, n, xd, false, false, false, &l, c);
}

bool ng_polynorm_bwd_plan(const ng_context *ctx, size_t rows, size_t n, ng_dtype xd, bool dw,
                          bool db, ng_row_launch *l, ng_coop *c) {
  return plan(ctx, rows, n, xd, true, dw, db, l, c);
}

ng_status ng_polynorm_forward(ng_context *ctx, cl_command_queue queue, const ng_polynorm_params *p,
                              ng_tensor x, ng_tensor weight, ng_tensor bias, ng_tensor y,
                              ng_tensor rstd, cl_uint nwait, const cl_event *wait,
                              cl_event *event) {
  ng_clear_detail();
  size_t count = 0;
  ng_status s = check_params(ctx, queue, p, &count);
  if (s == NG_SUCCESS) s = ng_check_wait_list(nwait, wait);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, x, "x", count, true);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, y, "y", count, true);
  if (s == NG_SUCCESS) s = ng_check_same_dtype(x, "x", y, "y");
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, weight, "weight", 3, true);
  if (s == NG_SUCCESS && bias.mem) s = ng_check_tensor(ctx, bias, "bias", 1, true);
  if (s == NG_SUCCESS && bias.mem) s = ng_check_same_dtype(weight, "weight", bias, "bias");
  if (s == NG_SUCCESS) s = check_rstd(ctx, rstd, p->rows);
  if (s != NG_SUCCESS) return s;

  const bool vec_ok = ng_vec_aligned(ctx, x, p->n, 8) && ng_vec_aligned(ctx, y, p->n, 8);
  const ng_row_launch l = launch(ctx, p, vec_ok, false, false, false, x.dtype);
  /* long rows split across groups, when this queue gets a counter area */
  ng_coop cp;
  cl_mem sync = NULL;
  if (coop_plan(ctx, &l, x.dtype, p->rows, p->n, false, false, &cp))
    s = ng_coop_sync(ctx, queue, &cp, &sync);
  if (s != NG_SUCCESS) return s;
  ng_opts o;
  fwd_opts(&o, &l, sync ? &cp : NULL, x.dtype);
  cl_program prog;
  s = ng_get_program(ctx, "polynorm", &o, &prog);
  if (s != NG_SUCCESS) {
    if (sync) clReleaseMemObject(sync);
    return s;
  }

  cl_ulong xo = x.offset, wo = weight.offset, bo = bias.offset, yo = y.offset, ro = rstd.offset;
  cl_int pdt = weight.dtype, has_b = bias.mem != NULL;
  cl_uint rows = (cl_uint)p->rows, n = (cl_uint)p->n;
  float eps = p->eps;
  cl_ulong sync_off = 0;
  cl_uint slices = cp.slices;
  const ng_arg args[] = {NG_ARG(x.mem),    NG_ARG(xo),       NG_ARG(weight.mem), NG_ARG(wo),
                         NG_ARG(bias.mem), NG_ARG(bo),       NG_ARG(pdt),        NG_ARG(has_b),
                         NG_ARG(y.mem),    NG_ARG(yo),       NG_ARG(rstd.mem),   NG_ARG(ro),
                         NG_ARG(rows),     NG_ARG(n),        NG_ARG(eps),        NG_ARG(sync),
                         NG_ARG(sync_off), NG_ARG(slices)};
  if (!sync)
    return ng_enqueue(ctx, queue, prog, "ng_polynorm_fwd", (size_t)l.groups * l.wg, l.wg, args,
                      NG_ARRAY_LEN(args) - 3, nwait, wait, event);
  s = ng_enqueue(ctx, queue, prog, "ng_polynorm_fwd_coop", (size_t)cp.l.groups * cp.l.wg, cp.l.wg,
                 args, NG_ARRAY_LEN(args), nwait, wait, event);
  clReleaseMemObject(sync);
  return s;
}

ng_status ng_polynorm_backward_scratch_size(ng_context *ctx, const ng_polynorm_params *p,
                                            int compute_dweight, int compute_dbias, size_t *bytes) {
  ng_clear_detail();
  if (!ctx || !p || !bytes) return ng_fail(NG_ERR_NULL_HANDLE, "ctx, params or bytes is NULL");
  size_t count;
  ng_status s = ng_check_rows(p->rows, p->n, &count);
  if (s != NG_SUCCESS) return s;
  const bool dw = compute_dweight != 0, db = compute_dbias != 0;
  /* the grid depends on x's dtype and alignment, which the query is not told (16-bit rows of
   * 257-448 vectors take narrower groups, NG_ROWS_HALF_MID): the largest of the six. Rows may
   * be split across groups instead: each launch's plan too, as bf16's, which has the most sets
   * (f16 rows take it, f32 rows more slices of the same launch), and as its own dtype's. The
   * launches are those of the gradients asked (their kind's grid: the both-frozen pass, whose
   * kind may ask another, needs no scratch). */
  static const ng_dtype xds[] = {NG_F32, NG_F16, NG_BF16};
  size_t groups = 0, split = 0;
  for (int aligned = 0; aligned < 2 && s == NG_SUCCESS; aligned++)
    for (size_t i = 0; i < NG_ARRAY_LEN(xds) && s == NG_SUCCESS; i++) {
      const ng_row_launch l = launch(ctx, p, aligned != 0, true, dw, db, xds[i]);
      if (l.groups > groups) groups = l.groups;
      if (!dw && !db) continue;
      ng_coop c;
      size_t b = 0;
      if (coop_plan(ctx, &l, NG_BF16, p->rows, p->n, true, true, &c))
        s = coop_scratch(&c, dw, db, &b);
      if (b > split) split = b;
      if (s == NG_SUCCESS && !(xds[i] == NG_BF16 && dw) && /* else the plan just made */
          coop_plan(ctx, &l, xds[i], p->rows, p->n, true, dw, &c))
        s = coop_scratch(&c, dw, db, &b);
      if (b > split) split = b;
    }
  *bytes = groups * 4 * ((dw ? 3 : 0) + (db ? 1 : 0));
  if (split > *bytes) *bytes = split;
  return s;
}

/* The backward as one launch of ng_polynorm_bwd_coop, which also writes dweight and dbias. */
static ng_status coop_backward(ng_context *ctx, cl_command_queue queue, const ng_polynorm_params *p,
                               const ng_coop *cp, cl_mem sync, ng_tensor dy, ng_tensor x,
                               ng_tensor weight, ng_tensor rstd, ng_tensor dx, ng_tensor dweight,
                               ng_tensor dbias, bool acc, ng_tensor scratch, cl_uint nwait,
                               const cl_event *wait, cl_event *event) {
  const bool dw = dweight.mem != NULL, db = dbias.mem != NULL;
  ng_opts o;
  coop_opts(&o, cp, x.dtype, dw, db, weight.dtype);
  cl_program prog;
  ng_status s = ng_get_program(ctx, "polynorm", &o, &prog);
  if (s != NG_SUCCESS) return s;
  size_t bytes = 0;
  s = coop_scratch(cp, dw, db, &bytes);
  ng_scratch sc;
  if (s == NG_SUCCESS) s = ng_scratch_acquire(ctx, scratch, bytes, &sc);
  if (s != NG_SUCCESS) return s;
  cl_ulong dyo = dy.offset, xo = x.offset, wo = weight.offset, ro = rstd.offset, dxo = dx.offset;
  cl_ulong po = sc.offset_bytes / 4, dwo = dweight.offset, dbo = dbias.offset, sync_off = 0;
  cl_int pdt = weight.dtype, accumulate = acc;
  cl_uint rows = (cl_uint)p->rows, n = (cl_uint)p->n, slices = cp->slices;
  const ng_arg args[] = {NG_ARG(dy.mem),      NG_ARG(dyo),      NG_ARG(x.mem),     NG_ARG(xo),
                         NG_ARG(weight.mem),  NG_ARG(wo),       NG_ARG(pdt),       NG_ARG(rstd.mem),
                         NG_ARG(ro),          NG_ARG(dx.mem),   NG_ARG(dxo),       NG_ARG(sc.mem),
                         NG_ARG(po),          NG_ARG(dweight.mem), NG_ARG(dwo),    NG_ARG(dbias.mem),
                         NG_ARG(dbo),         NG_ARG(accumulate), NG_ARG(rows),    NG_ARG(n),
                         NG_ARG(sync),        NG_ARG(sync_off), NG_ARG(slices)};
  s = ng_enqueue(ctx, queue, prog, "ng_polynorm_bwd_coop", (size_t)cp->l.groups * cp->l.wg,
                 cp->l.wg, args, NG_ARRAY_LEN(args), nwait, wait, event);
  ng_scratch_release(&sc);
  return s;
}

ng_status ng_polynorm_backward(ng_context *ctx, cl_command_queue queue, const ng_polynorm_params *p,
                               ng_tensor dy, ng_tensor x, ng_tensor weight, ng_tensor rstd,
                               ng_tensor dx, ng_tensor dweight, ng_tensor dbias, unsigned flags,
                               ng_tensor scratch, cl_uint nwait, const cl_event *wait,
                               cl_event *event) {
  ng_clear_detail();
  size_t count = 0;
  ng_status s = check_params(ctx, queue, p, &count);
  if (s == NG_SUCCESS) s = ng_check_wait_list(nwait, wait);
  if (s == NG_SUCCESS && (flags & ~NG_ACCUMULATE_GRAD))
    s = ng_fail(NG_ERR_INVALID_VALUE, "unknown flags 0x%x", flags & ~NG_ACCUMULATE_GRAD);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, dy, "dy", count, true);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, x, "x", count, true);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, dx, "dx", count, true);
  if (s == NG_SUCCESS) s = ng_check_same_dtype(x, "x", dy, "dy");
  if (s == NG_SUCCESS) s = ng_check_same_dtype(x, "x", dx, "dx");
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, weight, "weight", 3, true);
  if (s == NG_SUCCESS) s = check_rstd(ctx, rstd, p->rows);
  const bool compute_dw = dweight.mem != NULL, compute_db = dbias.mem != NULL;
  if (s == NG_SUCCESS && compute_dw) s = ng_check_tensor(ctx, dweight, "dweight", 3, true);
  if (s == NG_SUCCESS && compute_dw) s = ng_check_same_dtype(weight, "weight", dweight, "dweight");
  if (s == NG_SUCCESS && compute_db) s = ng_check_tensor(ctx, dbias, "dbias", 1, true);
  if (s == NG_SUCCESS && compute_db) s = ng_check_same_dtype(weight, "weight", dbias, "dbias");
  if (s != NG_SUCCESS) return s;

  const bool vec_ok = ng_vec_aligned(ctx, x, p->n, 8) && ng_vec_aligned(ctx, dy, p->n, 8) &&
                      ng_vec_aligned(ctx, dx, p->n, 8);
  const ng_row_launch l = launch(ctx, p, vec_ok, true, compute_dw, compute_db, x.dtype);
  const bool acc = (flags & NG_ACCUMULATE_GRAD) != 0;
  /* long rows split across groups (frozen or not, so that dx has the same bits), when this
   * queue gets a counter area */
  ng_coop cp;
  cl_mem sync = NULL;
  if (coop_plan(ctx, &l, x.dtype, p->rows, p->n, true, compute_dw, &cp))
    s = ng_coop_sync(ctx, queue, &cp, &sync);
  if (s != NG_SUCCESS) return s;
  if (sync) {
    s = coop_backward(ctx, queue, p, &cp, sync, dy, x, weight, rstd, dx, dweight, dbias, acc,
                      scratch, nwait, wait, event);
    clReleaseMemObject(sync);
    return s;
  }
  /* the kernel's arguments of the gradients (ng_fused_plan with no sections: set, off); with the
   * in-kernel sum, the queue's counter area (none past NG_SYNC_QUEUES queues: a separate sum) */
  ng_fused f;
  s = ng_fused_plan(ctx, queue, &l, 3, 0, NG_FUSED_BY_SHAPE, dweight, dbias, acc, &f);
  cl_mem area = NULL;
  if (s == NG_SUCCESS && (compute_dw || compute_db) && chunk_wanted(ctx, &l, x.dtype, compute_dw))
    s = ng_sync_area(ctx, queue, chunk_area(&l), &area);
  if (s != NG_SUCCESS) return s;
  f.on = area != NULL;
  f.sync = area;
  const bool sep_reduce = (compute_dw || compute_db) && !f.on;
  ng_opts o;
  pass_opts(&o, &l, x.dtype, true, compute_dw, compute_db);
  chunk_opts(&o, f.on, weight.dtype);
  cl_program prog, rprog = NULL;
  s = ng_get_program(ctx, "polynorm", &o, &prog);
  if (s == NG_SUCCESS && sep_reduce) s = ng_reduce_program(ctx, weight.dtype, &rprog);
  const size_t groups = l.groups;
  ng_scratch sc;
  if (s == NG_SUCCESS)
    s = ng_scratch_acquire(ctx, scratch,
                           groups * 4 * ((compute_dw ? 3 : 0) + (compute_db ? 1 : 0)), &sc);
  if (s == NG_SUCCESS) { /* the counter area, if any, is released once below */
    cl_ulong dyo = dy.offset, xo = x.offset, wo = weight.offset, ro = rstd.offset;
    cl_ulong dxo = dx.offset, pdw = sc.offset_bytes / 4, pdb = pdw + (compute_dw ? groups * 3 : 0);
    cl_mem mdw = compute_dw ? sc.mem : NULL, mdb = compute_db ? sc.mem : NULL;
    cl_int pdt = weight.dtype;
    cl_uint rows = (cl_uint)p->rows, n = (cl_uint)p->n;
    const ng_arg args[] = {NG_ARG(dy.mem),     NG_ARG(dyo),    NG_ARG(x.mem), NG_ARG(xo),
                           NG_ARG(weight.mem), NG_ARG(wo),     NG_ARG(pdt),   NG_ARG(rstd.mem),
                           NG_ARG(ro),         NG_ARG(dx.mem), NG_ARG(dxo),   NG_ARG(mdw),
                           NG_ARG(pdw),        NG_ARG(mdb),    NG_ARG(pdb),   NG_ARG(rows),
                           NG_ARG(n),          NG_FUSED_KARGS(f)};
    s = ng_enqueue(ctx, queue, prog, "ng_polynorm_bwd", groups * l.wg, l.wg, args,
                   NG_ARRAY_LEN(args), nwait, wait, sep_reduce ? NULL : event);
    if (s == NG_SUCCESS && sep_reduce) { /* both gradients in one launch */
      const ng_reduce_section sw = {pdw, 3, dweight}, sb = {pdb, 1, dbias};
      s = ng_enqueue_reduce_sections(ctx, queue, rprog, sc.mem, l.groups, &sw, &sb, acc, 0, NULL,
                                     event);
    }
    ng_scratch_release(&sc);
  }
  if (area) clReleaseMemObject(area);
  return s;
}

/* Every program a call can use on ctx's device: per x dtype and alignment, the forward and the
 * four frozen combinations of the backward, for every work-group size the launch choice can give
 * (ng_variant_n_ctx's row lengths are asked for), and the gradient reductions. */
ng_status ng_polynorm_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user) {
  static const ng_dtype fl[] = {NG_F32, NG_F16, NG_BF16};
  ng_status s = NG_SUCCESS;
  for (int aligned = 1; aligned >= 0; aligned--)
    for (size_t ni = 0, n; (n = ng_variant_n_ctx(ctx, ni)) != 0; ni++) {
      for (size_t xi = 0; xi < NG_ARRAY_LEN(fl); xi++) {
        /* the launches the calls take (their kinds: a tuned or built-in launch is built too) */
        const ng_polynorm_params p = {(size_t)1 << 20, n, 1e-6f};
        const ng_row_launch lf = launch(ctx, &p, aligned != 0, false, false, false, fl[xi]);
        for (int v = 0; v < 5 && s == NG_SUCCESS; v++) { /* forward, then dw × db */
          const ng_row_launch lb = launch(ctx, &p, aligned != 0, true, v > 0 && ((v - 1) & 1),
                                          v > 0 && ((v - 1) >> 1), fl[xi]);
          ng_opts o;
          ng_coop cf; /* the forward's rows split across groups */
          if (v == 0) {
            const bool fc = coop_plan(ctx, &lf, fl[xi], (size_t)1 << 20, n, false, false, &cf);
            fwd_opts(&o, &lf, fc ? &cf : NULL, fl[xi]);
          }
          else pass_opts(&o, &lb, fl[xi], true, (v - 1) & 1, (v - 1) >> 1);
          ng_coop cp; /* rows split across groups: instead of lb, never with FUSED_RED */
          const bool dw = v > 0 && ((v - 1) & 1);
          if (v > 0 && coop_plan(ctx, &lb, fl[xi], (size_t)1 << 20, n, true, dw, &cp)) {
            for (size_t wi = 0; wi < (v > 1 ? NG_ARRAY_LEN(fl) : 1) && s == NG_SUCCESS; wi++) {
              coop_opts(&o, &cp, fl[xi], dw, (v - 1) >> 1, fl[wi]);
              s = fn(ctx, "polynorm", &o, user);
            }
          } else if (v > 1 && chunk_wanted(ctx, &lb, fl[xi], (v - 1) & 1)) {
            /* with partials: the gradients' dtype too */
            for (size_t wi = 0; wi < NG_ARRAY_LEN(fl) && s == NG_SUCCESS; wi++) {
              ng_opts of = o;
              chunk_opts(&of, true, fl[wi]);
              s = fn(ctx, "polynorm", &of, user);
            }
          } else {
            s = fn(ctx, "polynorm", &o, user);
          }
        }
      }
    }
  return s == NG_SUCCESS ? ng_reduce_for_each_variant(ctx, fn, user) : s;
}
