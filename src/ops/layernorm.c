/* LayerNorm: validation, variant choice and enqueue (kernels in cl/layernorm.cl). */
#include "../ng_internal.h"

static ng_status check_params(ng_context *ctx, cl_command_queue queue,
                              const ng_layernorm_params *p, size_t *count) {
  if (!ctx) return ng_fail(NG_ERR_NULL_HANDLE, "ctx is NULL");
  if (!p) return ng_fail(NG_ERR_NULL_HANDLE, "params is NULL");
  ng_status s = ng_check_queue(ctx, queue);
  if (s == NG_SUCCESS) s = ng_check_rows(p->rows, p->n, count);
  if (s == NG_SUCCESS) s = ng_check_scalar(p->eps, "eps", true);
  return s;
}

/* weight[n] and bias[n], each optional; when both are given they share the parameter dtype. */
static ng_status check_affine(ng_context *ctx, ng_tensor w, ng_tensor b, size_t n) {
  ng_status s = w.mem ? ng_check_tensor(ctx, w, "weight", n, true) : NG_SUCCESS;
  if (s == NG_SUCCESS && b.mem) s = ng_check_tensor(ctx, b, "bias", n, true);
  if (s == NG_SUCCESS && w.mem && b.mem) s = ng_check_same_dtype(w, "weight", b, "bias");
  return s;
}

/* Build options of the forward and backward programs; the launch paths and
 * ng_layernorm_for_each_variant both use these, so ng_prebuild builds exactly what calls use.
 * A dtype of -1 is an absent parameter; cp, where not NULL, the plan of rows split across
 * groups that replaces launch l. */
static void fwd_opts(ng_opts *o, const ng_row_launch *l, const ng_coop *cp, ng_dtype xd, int wd,
                     int bd) {
  if (cp) l = &cp->l;
  ng_opts_init(o);
  ng_row_opts_dt(o, l, xd, wd >= 0, wd >= 0 ? (ng_dtype)wd : NG_F32);
  ng_opts_add(o, "HAS_B", bd >= 0);
  /* the bias has the weight's dtype, except without a weight (W_DTYPE is then a placeholder) */
  if (bd >= 0 && wd < 0) ng_opts_add(o, "B_DTYPE", bd);
  /* w and b in registers across rows (cl/layernorm.cl) only for 16-bit rows in groups of 1024:
   * such a group runs alone on its compute unit with or without them, whereas narrower groups
   * lost resident groups to the 2·REG·8 extra registers (H100, bf16: 16384 0.71 -> 0.82 of copy;
   * 4096 0.86 -> 0.78 and 8192 0.84 -> 0.73 had they been used there; f32 0.74 -> 0.71) */
  ng_opts_add(o, "WREG", l->wg >= 1024 && l->reg_cols <= 2 && xd != NG_F32);
  if (cp) ng_opts_add(o, "LN_FWD_COOP", 1); /* a split launch (ln_fwd_coop_plan) */
  if (cp) ng_coop_opts(o, cp);
}

/* The forward of bf16 rows beyond the launch's registers, split across groups
 * (ng_layernorm_fwd_coop) instead of streamed twice: slices of 256 × 4 vectors, the weight in
 * local memory. H100, bf16, rows·N = 2^25, four runs, three groups per compute unit: 65536
 * 68.6-72.1 -> 64.0-65.0 us (0.64-0.67 -> 0.71-0.72), 131072 80.5-80.7 -> 69.0-69.1 (0.57 ->
 * 0.67). f32 rows split with two vectors a work-item (the bias's registers) beyond the 1024 × 2
 * groups that hold 16384 (f32, two runs: 32768 125.5-126.0 -> 114.7-115.1 us, 65536 148.1-148.3
 * -> 126.1); f16 rows streamed then (65536 66.4-67.1 -> 83.0-83.4 split; but see below).
 * Since 2026-11-27 each group publishes its pair of the next row before it collects this row's
 * (ng_coop.ahead), on two groups per compute unit (the second slice's registers), and bf16 rows
 * split from 2049 vectors (N > 16384) rather than past the 1024 × 4 groups' 32768. H100, old
 * and new kernels alternating, two runs: bf16 65536 64.1-64.2 -> 60.0-61.3 us (0.72 -> 0.76),
 * 131072 67.7-68.0 -> 65.5-67.1 (0.68 -> 0.70-0.73), 32768 (held) 61.4-61.6 -> 58.9-59.0 (0.75
 * -> 0.77); f32 65536 127.0-127.3 -> 114.1-115.0 (0.72 -> 0.80). Ahead on three groups per
 * compute unit lost (65536 74.0-74.5 us, f32 143.1-144.7), on four too (65.2-66.6, 155), and at
 * 32768 the split without it (62.3-62.7) did not beat the held row; at 16384 the split lost
 * before (60.1-61.7 against 54.4-54.7).
 * Since 2026-11-27 (later) f16 rows split as bf16's, their bits widened pair by pair
 * (NG_COOP_F16_PACK) and each row's pair published ahead, in calls of more rows than compute
 * units. H100, f16, rows·N = 2^25, streaming -> split under a measurement build, two runs: 65536
 * 68.4-68.8 -> 60.6-60.9 us, 131072 80.4-80.5 -> 66.2-67.2; without the ahead exchange 65536
 * 67.6-68.1, 32768 63.9-64.0 (the early f16 kernel, before the pairs: 65536 66.4-67.1 ->
 * 83.0-83.4); 100 rows of 65536 21.6-23.4 -> 24.9-25.9, hence the rows condition. Then the
 * binary before and this one alternating, two runs: 65536 68.1-68.4 -> 61.1-61.5 (0.68 ->
 * 0.75-0.76), 131072 79.9-80.4 -> 66.7-67.0 (0.58 -> 0.69), 32768 62.2-62.4 -> 60.2-60.7 (0.74 ->
 * 0.76-0.77), 24576 61.5-62.0 -> 60.1-60.7, 200 rows of 65536 36.9-37.9 -> 34.5-34.6; bf16
 * unchanged.
 * Since 2026-11-28 bf16 and f16 rows form and publish the next row's pair late (NG_COOP_LATE16;
 * this kernel after the row's stores), so that its loads wait beside this row's collect rather
 * than before it. H200, the same binary with and without, two runs each: bf16 32768 54.0-54.9 ->
 * 51.7-52.6 us (0.60 -> 0.62-0.63), 65536 56.4-57.0 -> 54.3 (0.57-0.58 -> 0.60); f16 53.8 ->
 * 51.2-51.5, 55.9-57.2 -> 54.1-54.7; after the collect (RMSNorm's order) 1-2 % behind; f32 lost
 * (99.9-100.9 -> 107.0-108.0, 108.8-109.6 -> 119.6-121.2) and keeps the order before. */
#define LN_FWD_COOP_HOLD 2048
static bool ln_fwd_coop_plan(const ng_context *ctx, const ng_row_launch *l, ng_dtype xd,
                             size_t rows, size_t n, ng_coop *c) {
  const bool f16 = xd == NG_F16 && rows > ctx->info.compute_units;
  const size_t hold = xd == NG_BF16 || f16 ? LN_FWD_COOP_HOLD : 0;
  return ng_coop_plan_shape(ctx, l, xd, rows, n, hold,
                            NG_COOP_F32 | NG_COOP_AHEAD_BF16 | NG_COOP_AHEAD_F32 |
                                NG_COOP_LATE16 |
                                (f16 ? NG_COOP_F16 | NG_COOP_F16_PACK | NG_COOP_AHEAD_F16 : 0),
                            4, 1, 2, c);
}

/* The backward's rows split across groups (ng_layernorm_bwd_coop): slices of 256 × 2 vectors,
 * three groups per compute unit, with the slice's weight (and, with both gradients, the dB
 * sums) in local memory; where more than NG_COOP_MAX_SLICES such slices would cover a row (16:
 * bf16 rows beyond 65536 values), ng_coop_plan's 256 × 4. H100, bf16, rows·N = 2^25, whole backward,
 * 256 × 4 with the weight from L2 -> 256 × 2 with it in local memory, two runs: dW and dB at
 * 32768 108.3-110.0 -> 99.3-99.7 us, at 65536 112.5-114.9 -> 105.0-107.7; weight frozen (dB
 * alone) 102.7-104.0 -> 91.7-92.0 and 105.6 -> 96.8-97.9. The same slices with 264 groups:
 * 105.4-105.8, 115.8-116.5, 99.0-99.1, 106.7-108.0; with 528: 102.2-103.3, 105.5-105.8,
 * 94.5-95.0, 95.5-95.9. 256 × 4 with the weight in local memory where it fits beside the
 * sums (dB alone): 96.3-96.7 and 96.4-97.0. f32 rows split with half the vectors (the same
 * register bytes), f16 rows as bf16's (whole backward, column split -> split, two runs: f32 with
 * dW and dB 32768 247 -> 196 us, 65536 247 -> 186, dB alone 241-242 -> 185-187, 242 -> 180; f16
 * at 65536 147 -> 105, dB alone 143-144 -> 92-93). */
#define LN_COOP_X (NG_COOP_F32 | NG_COOP_F16)
/* Whether the split kernel sums its sets' partial rows itself by default (ng_coop_reduce), as
 * RMSNorm's does: no. It measured slower than the separate ng_reduce_partials launch (H200,
 * bf16, whole backward, two runs: dW + dB 65536 96.7-97.7 -> 100.2-101.5 us, dB alone 65536
 * 86.3-87.2 -> 88.6-89.5; 32768 even). Its reducers' sums took 6-8 us where RMSNorm's were
 * hidden (a measurement build without them: 81.4-83.2 us, and with 16 reducers instead of 64
 * 98.2-98.4); not understood. NG_TUNE_FUSED_REDUCE = 2 still takes it (the tests do). */
#define LN_COOP_FUSED false
/* The plan of the split backward of a pass that trains dw and db. Its first kind publishes each
 * row's shares ahead (ng_coop.ahead) for bf16 and f32 rows: it then holds a second row's dy and x,
 * and bf16 rows with gradient sums take two groups per compute unit for it instead of three
 * (the same slices, so dx keeps its bits whatever is frozen). H100, rows·N = 2^25, whole
 * backward, old and new binaries alternating, two runs: bf16 both frozen 65536 89.7-89.8 ->
 * 81.5-81.9 us (0.77 -> 0.84), 32768 83.7-84.4 -> 80.5-80.6; f32 with dW and dB 65536
 * 188.4-189.3 -> 166.7-167.2 (0.73 -> 0.82), dB alone 185.1-186.9 -> 160.0-161.5, both frozen
 * 179.4-180.2 -> 155.3-155.4 (0.76 -> 0.88); bf16 with dW and dB 65536 104.4-105.8 ->
 * 97.8-98.1 (0.65 -> 0.70), 32768 about 100 -> 94.8-94.9, dB alone 65536 96.7-96.8 ->
 * 93.2-94.4, 32768 91.2-91.8 -> 89.4-90.5. Ahead with three groups per compute unit, bf16 with
 * gradient sums lost (65536 105.7 -> 126.7-129.2, dB alone 96.7 -> 117.2-118.4), as did two
 * groups without it (117.4-117.5); f16 rows measured even both frozen and keep the plain kind.
 * bf16 rows with dB alone take four groups since 2026-11-28, with their dB sums in local memory
 * (LN_DB_LOCAL, bwd_opts): 102 registers -> 62, where 80 lets three groups of 256 fit a compute
 * unit and 64 four (NVIDIA's -cl-nv-verbose); the 117-118 us above were three groups that did
 * not fit, so that groups waited for a set's groups not yet running. H200, bf16, rows·N = 2^25,
 * two rounds alternating in one run: 65536 88.1-88.3 -> 81.5-82.8 us (0.56 -> 0.60), 32768
 * 82.4-82.8 -> 80.0; three groups 85.5-86.8 and 81.8-82.1. The H100 was not lent to measure it.
 * With dW and dB the weight and both sums fill the 48 KB of local memory and the kernel keeps
 * 127 registers and two groups. */
/* Whether the first kind's slices of a pass keep the dB sums in local memory with dB alone:
 * the four groups per compute unit below rely on it (62 registers against 102), so the plan and
 * bwd_opts both ask here. */
static bool ln_db_alone_local(ng_dtype xd, bool dw, bool db) { return xd == NG_BF16 && db && !dw; }

static bool ln_coop_plan(const ng_context *ctx, const ng_row_launch *l, ng_dtype xd, size_t rows,
                         size_t n, bool dw, bool db, ng_coop *c) {
  const unsigned per_cu = ln_db_alone_local(xd, dw, db) ? 4 : xd == NG_BF16 && dw ? 2 : 3;
  return ng_coop_plan_shape(ctx, l, xd, rows, n, 0,
                            LN_COOP_X | NG_COOP_AHEAD_BF16 | NG_COOP_AHEAD_F32, 2, 2, per_cu, c) ||
         ng_coop_plan(ctx, l, xd, rows, n, 0, LN_COOP_X, c);
}

/* gd: the gradients' dtype (the bias's when there is no weight). The bias is not read backward
 * (it only says whether dB may be asked for). cp: the plan of rows split across groups, or NULL
 * for launch l. The split kernel keeps its slice of the weight in local memory where it fits
 * there (LN_WLOCAL, cl/layernorm.cl) beside its dB sums with both gradients, or with dB alone
 * in that plan's bf16 rows (LN_DB_LOCAL), and the reduction buffer: every plan of ln_coop_plan's
 * first kind. */
static void bwd_opts(ng_opts *o, const ng_context *ctx, const ng_row_launch *l,
                     const ng_coop *cp, ng_dtype xd, int wd, bool dw, bool db, bool fused,
                     ng_dtype gd) {
  /* the reducers' rows in flight (NG_RED_F) */
  const unsigned red_f = cp ? NG_COOP_RED_F : ng_fused_rows_in_flight(ctx, l);
  if (cp) l = &cp->l;
  ng_opts_init(o);
  ng_row_opts_dt(o, l, xd, wd >= 0, wd >= 0 ? (ng_dtype)wd : NG_F32);
  ng_opts_add(o, "COMPUTE_DW", dw);
  ng_opts_add(o, "COMPUTE_DB", db);
  if (fused) ng_opts_add(o, "FUSED_RED", 1);
  if (fused) ng_opts_add(o, "NG_RED_F", red_f);
  if (cp) ng_opts_add(o, "LN_BWD_COOP", 1); /* only split programs hold that kernel */
  if (cp) ng_coop_opts(o, cp);
  /* the gradients' dtype is W_DTYPE's, except for a bias without a weight */
  if (fused && wd < 0) ng_opts_add(o, "G_DTYPE", gd);
  /* the dB sums in local memory: with both gradients always, with dB alone in the plan's first
   * kind (its bf16 rows ahead) */
  const bool db_alone_local = cp && cp->ahead && ln_db_alone_local(xd, dw, db);
  const bool db_local = (cp && dw && db) || db_alone_local;
  if (db_alone_local) ng_opts_add(o, "LN_DB_LOCAL", 1);
  const size_t slots = (size_t)l->wg * l->reg_cols * (db_local ? 2 : 1);
  if (cp && wd >= 0 && slots * l->vec * 4 + (size_t)l->wg * 8 + 64 <= ctx->info.local_mem)
    ng_opts_add(o, "LN_WLOCAL", 1);
}

/* The forward's launch mode: 16-bit rows of 513-1024 vectors in groups of 256 × 4, a group a row,
 * on NVIDIA (NG_ROWS_256X4). The backward's: with both parameters frozen (no partials), 16-bit
 * rows of 513-2048 vectors take a larger grid on NVIDIA (NG_ROWS_MANY, NG_ROWS_MANY_2K), and rows
 * that fill their group of 128 or 256 a group a row (NG_ROWS_FULL1), and 16-bit rows of 257-320
 * vectors groups of half a row (NG_ROWS_HALF_MID_320). f32 rows of more than 768 vectors split,
 * forward and backward, rather than being held (NG_ROWS_F32_1SLOT). 16-bit rows of 257-384
 * vectors are held by 128 × 4 in the forward (NG_ROWS_FWD_128X4). */
static ng_rows_mode ln_fwd_mode(ng_dtype xd) {
  return ng_fwd_raw_mode(xd) |
         (xd == NG_F32 ? NG_ROWS_F32_1SLOT : NG_ROWS_256X4 | NG_ROWS_FWD_128X4);
}
ng_row_launch ng_layernorm_fwd_launch(const ng_context *ctx, size_t rows, size_t n, ng_dtype xd,
                                     bool vec_ok) {
  return ng_choose_row_launch_k(ctx, "layernorm.fwd", xd, rows, n, vec_ok, ln_fwd_mode(xd));
}
static ng_rows_mode ln_bwd_mode(bool partials, ng_dtype xd) {
  return ng_bwd_mode(partials, xd) | NG_ROWS_MANY | NG_ROWS_MANY_2K | NG_ROWS_FIT2_640 |
         NG_ROWS_FULL1 | NG_ROWS_F32_1SLOT | (xd == NG_F32 ? 0 : NG_ROWS_HALF_MID_320);
}

/* The backward's row launch: with both frozen there are no partials, so the forward's larger
 * grid may be used (larger still for rows of 513-1024 vectors: NG_ROWS_MANY) */
static ng_row_launch bwd_launch(const ng_context *ctx, ng_dtype xd, size_t rows, size_t n,
                                bool vec_ok, bool partials) {
  return ng_choose_row_launch_k(ctx, partials ? "layernorm.bwd" : "layernorm.bwd_frozen", xd,
                                rows, n, vec_ok, ln_bwd_mode(partials, xd));
}

bool ng_layernorm_bwd_plan(const ng_context *ctx, size_t rows, size_t n, ng_dtype xd, bool dw,
                           bool db, ng_row_launch *l, ng_coop *c) {
  *l = bwd_launch(ctx, xd, rows, n, true, dw || db);
  return ln_coop_plan(ctx, l, xd, rows, n, dw, db, c);
}

/* mean[rows] and rstd[rows], f32. */
static ng_status check_stat(ng_context *ctx, ng_tensor t, const char *what, size_t rows) {
  ng_status s = ng_check_tensor(ctx, t, what, rows, true);
  if (s == NG_SUCCESS && t.dtype != NG_F32)
    s = ng_fail(NG_ERR_UNSUPPORTED_DTYPE, "%s must be f32", what);
  return s;
}

ng_status ng_layernorm_forward(ng_context *ctx, cl_command_queue queue,
                               const ng_layernorm_params *p, ng_tensor x, ng_tensor weight,
                               ng_tensor bias, ng_tensor y, ng_tensor mean, ng_tensor rstd,
                               cl_uint nwait, const cl_event *wait, cl_event *event) {
  ng_clear_detail();
  size_t count = 0;
  ng_status s = check_params(ctx, queue, p, &count);
  if (s == NG_SUCCESS) s = ng_check_wait_list(nwait, wait);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, x, "x", count, true);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, y, "y", count, true);
  if (s == NG_SUCCESS) s = ng_check_same_dtype(x, "x", y, "y");
  if (s == NG_SUCCESS) s = check_affine(ctx, weight, bias, p->n);
  if (s == NG_SUCCESS) s = check_stat(ctx, mean, "mean", p->rows);
  if (s == NG_SUCCESS) s = check_stat(ctx, rstd, "rstd", p->rows);
  if (s != NG_SUCCESS) return s;

  const bool vec_ok = ng_vec_aligned(ctx, x, p->n, 8) && ng_vec_aligned(ctx, y, p->n, 8) &&
                      ng_vec_aligned(ctx, weight, p->n, 8) && ng_vec_aligned(ctx, bias, p->n, 8);
  const ng_row_launch l = ng_layernorm_fwd_launch(ctx, p->rows, p->n, x.dtype, vec_ok);
  /* rows split across groups where the queue gets a counter area */
  ng_coop cp;
  cl_mem sync = NULL;
  if (ln_fwd_coop_plan(ctx, &l, x.dtype, p->rows, p->n, &cp))
    s = ng_coop_sync(ctx, queue, &cp, &sync);
  if (s != NG_SUCCESS) return s;
  const bool coop = sync != NULL;
  ng_opts o;
  fwd_opts(&o, &l, coop ? &cp : NULL, x.dtype, weight.mem ? (int)weight.dtype : -1,
           bias.mem ? (int)bias.dtype : -1);
  cl_program prog;
  s = ng_get_program(ctx, "layernorm", &o, &prog);
  if (s != NG_SUCCESS) {
    if (sync) clReleaseMemObject(sync);
    return s;
  }

  cl_ulong xo = x.offset, wo = weight.offset, bo = bias.offset, yo = y.offset, mo = mean.offset,
           ro = rstd.offset;
  cl_uint rows = (cl_uint)p->rows, n = (cl_uint)p->n;
  float eps = p->eps;
  const ng_arg args[] = {NG_ARG(x.mem),    NG_ARG(xo), NG_ARG(weight.mem), NG_ARG(wo),
                         NG_ARG(bias.mem), NG_ARG(bo), NG_ARG(y.mem),      NG_ARG(yo),
                         NG_ARG(mean.mem), NG_ARG(mo), NG_ARG(rstd.mem),   NG_ARG(ro),
                         NG_ARG(rows),     NG_ARG(n),  NG_ARG(eps)};
  if (coop) {
    cl_ulong sync_off = 0;
    cl_uint slices = cp.slices;
    ng_arg cargs[NG_ARRAY_LEN(args) + 3];
    for (size_t i = 0; i < NG_ARRAY_LEN(args); i++) cargs[i] = args[i];
    cargs[NG_ARRAY_LEN(args)] = NG_ARG(sync);
    cargs[NG_ARRAY_LEN(args) + 1] = NG_ARG(sync_off);
    cargs[NG_ARRAY_LEN(args) + 2] = NG_ARG(slices);
    s = ng_enqueue(ctx, queue, prog, "ng_layernorm_fwd_coop", (size_t)cp.l.groups * cp.l.wg,
                   cp.l.wg, cargs, NG_ARRAY_LEN(cargs), nwait, wait, event);
    clReleaseMemObject(sync);
    return s;
  }
  /* GPU rows longer than the group holds in registers: their own kernel (cl/layernorm.cl) */
  return ng_enqueue(ctx, queue, prog,
                    ng_row_beyond_regs(&l, p->n) ? "ng_layernorm_fwd_stream" : "ng_layernorm_fwd",
                    (size_t)l.groups * l.wg, l.wg, args, NG_ARRAY_LEN(args), nwait, wait, event);
}

ng_status ng_layernorm_backward_scratch_size(ng_context *ctx, const ng_layernorm_params *p,
                                             int compute_dweight, int compute_dbias,
                                             size_t *bytes) {
  ng_clear_detail();
  if (!ctx || !p || !bytes) return ng_fail(NG_ERR_NULL_HANDLE, "ctx, params or bytes is NULL");
  size_t count;
  ng_status s = ng_check_rows(p->rows, p->n, &count);
  if (s != NG_SUCCESS) return s;
  *bytes = 0;
  const size_t sections = (compute_dweight ? 1u : 0u) + (compute_dbias ? 1u : 0u);
  if (sections == 0) return NG_SUCCESS;
  s = ng_partials_scratch_any(ctx, "layernorm.bwd",
                              NG_ROWS_FIT2_640 | NG_ROWS_HALF_MID_320 | NG_ROWS_F32_1SLOT, p->rows,
                              p->n, sections, 2, 0, LN_COOP_X, bytes);
  /* the split rows' own slices (ln_coop_plan): vector rows, bf16, f16 (bf16's slices, with
   * more groups than bf16's with gradients) or f32, whose launch may hold fewer vectors */
  const ng_dtype xds[] = {NG_BF16, NG_F16, NG_F32};
  for (size_t i = 0; i < NG_ARRAY_LEN(xds) && s == NG_SUCCESS; i++) {
    const ng_row_launch l = ng_choose_row_launch_k(ctx, "layernorm.bwd", xds[i], p->rows, p->n,
                                                   true, ln_bwd_mode(true, xds[i]));
    ng_coop c;
    size_t b = 0;
    if (ln_coop_plan(ctx, &l, xds[i], p->rows, p->n, compute_dweight, compute_dbias, &c))
      s = ng_coop_partials(&c, p->n, sections, &b);
    if (b > *bytes) *bytes = b;
  }
  if (s == NG_SUCCESS && *bytes) *bytes += NG_SCRATCH_VEC_PAD; /* ng_scratch_acquire_vec's */
  return s;
}

ng_status ng_layernorm_backward(ng_context *ctx, cl_command_queue queue,
                                const ng_layernorm_params *p, ng_tensor dy, ng_tensor x,
                                ng_tensor weight, ng_tensor bias, ng_tensor mean, ng_tensor rstd,
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
  if (s == NG_SUCCESS) s = check_affine(ctx, weight, bias, p->n);
  if (s == NG_SUCCESS) s = check_stat(ctx, mean, "mean", p->rows);
  if (s == NG_SUCCESS) s = check_stat(ctx, rstd, "rstd", p->rows);
  const bool compute_dw = dweight.mem != NULL, compute_db = dbias.mem != NULL;
  if (s == NG_SUCCESS && compute_dw && !weight.mem)
    s = ng_fail(NG_ERR_INVALID_VALUE, "dweight given but the op has no weight");
  if (s == NG_SUCCESS && compute_db && !bias.mem)
    s = ng_fail(NG_ERR_INVALID_VALUE, "dbias given but the op has no bias");
  if (s == NG_SUCCESS && compute_dw) s = ng_check_tensor(ctx, dweight, "dweight", p->n, true);
  if (s == NG_SUCCESS && compute_dw) s = ng_check_same_dtype(weight, "weight", dweight, "dweight");
  if (s == NG_SUCCESS && compute_db) s = ng_check_tensor(ctx, dbias, "dbias", p->n, true);
  if (s == NG_SUCCESS && compute_db) s = ng_check_same_dtype(bias, "bias", dbias, "dbias");
  if (s != NG_SUCCESS) return s;

  const bool partials = compute_dw || compute_db;
  /* the same in every pass (dx's bits): the scratch, whose offset the op rounds up, has no say */
  const bool vec_ok = ng_vec_aligned(ctx, x, p->n, 8) && ng_vec_aligned(ctx, dy, p->n, 8) &&
                      ng_vec_aligned(ctx, dx, p->n, 8) && ng_vec_aligned(ctx, weight, p->n, 8);
  const ng_row_launch l = bwd_launch(ctx, x.dtype, p->rows, p->n, vec_ok, partials);
  const size_t sections = (compute_dw ? 1u : 0u) + (compute_db ? 1u : 0u);
  /* rows split across groups (whatever is frozen, so that dx has the same bits), when this
   * queue gets a counter area; else the column split (with partials) or rows streamed twice */
  ng_coop cp;
  cl_mem sync = NULL;
  if (ln_coop_plan(ctx, &l, x.dtype, p->rows, p->n, compute_dw, compute_db, &cp))
    s = ng_coop_sync(ctx, queue, &cp, &sync);
  if (s != NG_SUCCESS) return s;
  const bool coop = sync != NULL;
  size_t nblocks = 0, rgroups = 0;
  const bool split =
      partials && !coop && ng_col_split(ctx, &l, p->rows, p->n, &nblocks, &rgroups);
  size_t scratch_bytes = 0; /* the row partials (column split: and the row sums) */
  if (partials && coop) s = ng_coop_partials(&cp, p->n, sections, &scratch_bytes);
  else if (partials) s = ng_partials_scratch(ctx, &l, p->rows, p->n, sections, 2, &scratch_bytes);
  const bool acc = (flags & NG_ACCUMULATE_GRAD) != 0;
  ng_fused f;
  if (coop) /* the split kernel sums its sets' partial rows itself only when forced */
    ng_coop_fused_plan(ctx, &cp, p->n, sections, LN_COOP_FUSED, dweight, dbias, acc, &f);
  else if (s == NG_SUCCESS)
    s = ng_fused_plan(ctx, queue, &l, p->n, split ? 0 : sections, NG_FUSED_BY_SHAPE, dweight,
                      dbias, acc, &f);
  const bool sep_reduce = partials && !f.on; /* separate ng_reduce_partials launches */
  const unsigned part_rows = coop ? cp.sets : split ? (unsigned)rgroups : l.groups;
  ng_opts o;
  bwd_opts(&o, ctx, &l, coop ? &cp : NULL, x.dtype, weight.mem ? (int)weight.dtype : -1,
           compute_dw, compute_db, f.on, compute_db ? dbias.dtype : NG_F32);
  cl_program prog, rprog = NULL;
  if (s == NG_SUCCESS) s = ng_get_program(ctx, "layernorm", &o, &prog);
  /* dweight and dbias share a dtype (check_affine): one reduction program and launch */
  if (s == NG_SUCCESS && sep_reduce)
    s = ng_reduce_program(ctx, compute_dw ? dweight.dtype : dbias.dtype, &rprog);
  ng_scratch sc;
  if (s == NG_SUCCESS) s = ng_scratch_acquire_vec(ctx, scratch, scratch_bytes, &sc);
  if (s != NG_SUCCESS) {
    if (sync) clReleaseMemObject(sync);
    return s;
  }

  cl_ulong dyo = dy.offset, xo = x.offset, wo = weight.offset, mo = mean.offset,
           ro = rstd.offset, dxo = dx.offset;
  cl_ulong po = sc.offset_bytes / 4;
  cl_uint rows = (cl_uint)p->rows, n = (cl_uint)p->n;
  const ng_arg args[] = {NG_ARG(dy.mem),     NG_ARG(dyo), NG_ARG(x.mem),    NG_ARG(xo),
                         NG_ARG(weight.mem), NG_ARG(wo),  NG_ARG(mean.mem), NG_ARG(mo),
                         NG_ARG(rstd.mem),   NG_ARG(ro),  NG_ARG(dx.mem),   NG_ARG(dxo),
                         NG_ARG(sc.mem),     NG_ARG(po),  NG_ARG(rows),     NG_ARG(n),
                         NG_FUSED_KARGS(f)};
  if (coop) {
    cl_ulong sync_off = 0;
    cl_uint slices = cp.slices;
    const ng_arg kargs[] = {NG_ARG(dy.mem),     NG_ARG(dyo), NG_ARG(x.mem),    NG_ARG(xo),
                            NG_ARG(weight.mem), NG_ARG(wo),  NG_ARG(mean.mem), NG_ARG(mo),
                            NG_ARG(rstd.mem),   NG_ARG(ro),  NG_ARG(dx.mem),   NG_ARG(dxo),
                            NG_ARG(sc.mem),     NG_ARG(po),  NG_ARG(rows),     NG_ARG(n),
                            NG_ARG(sync),       NG_ARG(sync_off), NG_ARG(slices),
                            NG_COOP_RED_KARGS(f)};
    s = ng_enqueue(ctx, queue, prog, "ng_layernorm_bwd_coop", (size_t)cp.l.groups * cp.l.wg,
                   cp.l.wg, kargs, NG_ARRAY_LEN(kargs), nwait, wait, sep_reduce ? NULL : event);
    clReleaseMemObject(sync);
  } else if (split) {
    cl_ulong so = po + (cl_ulong)rgroups * sections * p->n; /* the row sums follow the partials */
    cl_uint nb = (cl_uint)nblocks;
    const ng_arg sargs[] = {NG_ARG(dy.mem), NG_ARG(dyo), NG_ARG(x.mem),    NG_ARG(xo),
                            NG_ARG(weight.mem), NG_ARG(wo), NG_ARG(mean.mem), NG_ARG(mo),
                            NG_ARG(rstd.mem), NG_ARG(ro), NG_ARG(sc.mem),  NG_ARG(so),
                            NG_ARG(rows),   NG_ARG(n)};
    const size_t dot_groups = p->rows < ((size_t)1 << 20) ? p->rows : ((size_t)1 << 20);
    s = ng_enqueue(ctx, queue, prog, "ng_layernorm_bwd_dot", dot_groups * l.wg, l.wg, sargs,
                   NG_ARRAY_LEN(sargs), nwait, wait, NULL);
    const ng_arg cargs[] = {NG_ARG(dy.mem),   NG_ARG(dyo), NG_ARG(x.mem),    NG_ARG(xo),
                            NG_ARG(weight.mem), NG_ARG(wo), NG_ARG(mean.mem), NG_ARG(mo),
                            NG_ARG(rstd.mem), NG_ARG(ro),  NG_ARG(dx.mem),   NG_ARG(dxo),
                            NG_ARG(sc.mem),   NG_ARG(so),  NG_ARG(sc.mem),   NG_ARG(po),
                            NG_ARG(rows),     NG_ARG(n),   NG_ARG(nb)};
    if (s == NG_SUCCESS)
      s = ng_enqueue(ctx, queue, prog, "ng_layernorm_bwd_cols", nblocks * rgroups * l.wg, l.wg, cargs,
                     NG_ARRAY_LEN(cargs), 0, NULL, NULL);
  } else {
    s = ng_enqueue(ctx, queue, prog, "ng_layernorm_bwd", (size_t)l.groups * l.wg, l.wg, args,
                   NG_ARRAY_LEN(args), nwait, wait, sep_reduce ? NULL : event);
  }
  /* Sections of the scratch: dW partials first (when computed), then dB partials. */
  if (s == NG_SUCCESS && sep_reduce) {
    const ng_reduce_section sw = {po, p->n, dweight};
    const ng_reduce_section sb = {po + (compute_dw ? (size_t)part_rows * p->n : 0), p->n, dbias};
    s = ng_enqueue_reduce_sections(ctx, queue, rprog, sc.mem, part_rows, &sw, &sb, acc, 0, NULL,
                                   event);
  }
  ng_scratch_release(&sc);
  return s;
}

/* Every program a LayerNorm call can pick on ctx's device: per alignment and row length
 * (ng_variant_n_ctx's: on GPUs the work-group grows with the row), x dtype × weight (absent or a
 * dtype) × bias (absent, the weight's dtype, or any dtype without a weight) for the forward; for
 * the backward each trained subset of those parameters (none trained is the frozen launch), in
 * calls of many rows and of a few, with the in-kernel reduction where the launch takes it; and
 * the gradient reductions. */
ng_status ng_layernorm_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user) {
  static const ng_dtype fl[] = {NG_F32, NG_F16, NG_BF16};
  ng_status s = NG_SUCCESS;
  for (int aligned = 1; aligned >= 0; aligned--)
    for (size_t ni = 0, n; (n = ng_variant_n_ctx(ctx, ni)) != 0; ni++)
      for (size_t xi = 0; xi < NG_ARRAY_LEN(fl); xi++) {
        const ng_dtype xd = fl[xi];
        /* the kinds as the calls name them, so a tuned or built-in launch is built too */
        const char *kz = "layernorm.bwd_frozen", *kp = "layernorm.bwd";
        const size_t many = (size_t)1 << 20;
        const bool al = aligned != 0;
        const ng_row_launch lf = ng_layernorm_fwd_launch(ctx, many, n, xd, al);
        /* a few rows' (NG_ROWS_256X4 leaves them on the old shape) */
        const ng_row_launch lf1 = ng_layernorm_fwd_launch(ctx, 1, n, xd, al);
        /* the backward's of many rows and of a few (NG_ROWS_FIT2_640 leaves them on the old
         * shape), frozen (z) or with partials (p) */
        const ng_row_launch lz[2] = {
            ng_choose_row_launch_k(ctx, kz, xd, many, n, al, ln_bwd_mode(false, xd)),
            ng_choose_row_launch_k(ctx, kz, xd, 1, n, al, ln_bwd_mode(false, xd))};
        const ng_row_launch lp[2] = {
            ng_choose_row_launch_k(ctx, kp, xd, many, n, al, ln_bwd_mode(true, xd)),
            ng_choose_row_launch_k(ctx, kp, xd, 1, n, al, ln_bwd_mode(true, xd))};
        size_t nb, rg;
        const bool split = ng_col_split(ctx, &lp[0], (size_t)1 << 20, n, &nb, &rg);
        ng_coop cf; /* the forward's, instead of lf */
        const bool fcoop = ln_fwd_coop_plan(ctx, &lf, xd, (size_t)1 << 20, n, &cf);
        for (int wi = -1; wi < 3 && s == NG_SUCCESS; wi++)
          for (int bi = -1; bi < 3 && s == NG_SUCCESS; bi++) {
            if (wi >= 0 && bi >= 0 && bi != wi) continue; /* a bias has the weight's dtype */
            ng_opts o;
            fwd_opts(&o, &lf, fcoop ? &cf : NULL, xd, wi >= 0 ? (int)fl[wi] : -1,
                     bi >= 0 ? (int)fl[bi] : -1);
            s = fn(ctx, "layernorm", &o, user);
            if (s == NG_SUCCESS && !fcoop) {
              fwd_opts(&o, &lf1, NULL, xd, wi >= 0 ? (int)fl[wi] : -1, bi >= 0 ? (int)fl[bi] : -1);
              s = fn(ctx, "layernorm", &o, user);
            }
            /* trained: none, dW, dB, both; in a call of many rows, then of a few */
            for (int t = 0; t < 8 && s == NG_SUCCESS; t++) {
              const bool dw = t & 1, db = t & 2;
              if ((dw && wi < 0) || (db && bi < 0)) continue;
              const bool part = dw || db;
              const ng_row_launch *l = part ? &lp[t / 4] : &lz[t / 4];
              ng_coop cp; /* rows split across groups: instead of l */
              const ng_coop *c =
                  ln_coop_plan(ctx, l, xd, (size_t)1 << 20, n, dw, db, &cp) ? &cp : NULL;
              const size_t sec = (dw ? 1u : 0u) + (db ? 1u : 0u);
              const bool fused = c ? ng_coop_fused_wanted(ctx, c, n, sec, LN_COOP_FUSED)
                                   : part && !split &&
                                         ng_fused_wanted(ctx, l, n, sec, NG_FUSED_BY_SHAPE);
              bwd_opts(&o, ctx, l, c, xd, wi >= 0 ? (int)fl[wi] : -1, dw, db, fused,
                       bi >= 0 ? fl[bi] : NG_F32);
              s = fn(ctx, "layernorm", &o, user);
            }
          }
      }
  return s == NG_SUCCESS ? ng_reduce_for_each_variant(ctx, fn, user) : s;
}

