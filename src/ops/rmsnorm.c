/* RMSNorm and fused add + RMSNorm: validation, variant choice and enqueue (kernels in
 * cl/rmsnorm.cl). The fused op is RMSNorm of s = rd(x + residual), so both share the checks and
 * launch code below; they differ only in the extra tensors (residual and s forward, ds_out
 * backward). */
#include "../ng_internal.h"

static ng_status check_params(ng_context *ctx, cl_command_queue queue, const ng_rmsnorm_params *p,
                              cl_uint nwait, const cl_event *wait, size_t *count) {
  if (!ctx) return ng_fail(NG_ERR_NULL_HANDLE, "ctx is NULL");
  if (!p) return ng_fail(NG_ERR_NULL_HANDLE, "params is NULL");
  ng_status s = ng_check_queue(ctx, queue);
  if (s == NG_SUCCESS) s = ng_check_wait_list(nwait, wait);
  if (s == NG_SUCCESS) s = ng_check_rows(p->rows, p->n, count);
  if (s == NG_SUCCESS) s = ng_check_scalar(p->eps, "eps", true);
  if (s == NG_SUCCESS) s = ng_check_scalar(p->offset, "offset", false);
  if (s == NG_SUCCESS && (p->casting_mode < NG_CAST_LLAMA || p->casting_mode > NG_CAST_NONE))
    s = ng_fail(NG_ERR_INVALID_VALUE, "casting_mode %d is not llama, gemma or none",
                (int)p->casting_mode);
  return s;
}

static ng_status check_weight(ng_context *ctx, ng_tensor w, size_t n) {
  return w.mem ? ng_check_tensor(ctx, w, "weight", n, true) : NG_SUCCESS;
}

/* Build options of the forward and backward programs; the launch path and
 * ng_rmsnorm_for_each_variant both use these, so prebuild builds exactly what calls use. */
static void fwd_opts(ng_opts *o, const ng_row_launch *l, const ng_coop *cp, ng_dtype xd,
                     bool has_w, ng_dtype wd, bool fused) {
  ng_opts_init(o);
  ng_row_opts_dt(o, cp ? &cp->l : l, xd, has_w, wd);
  if (fused) ng_opts_add(o, "FUSED_ADD", 1);
  if (cp) ng_coop_opts(o, cp);
}

/* dy and x in their storage bits where the registers are shortest: measured on the H100
 * (bf16, 16384: 0.67 -> 0.76 of copy with dW, fused 0.64 -> 0.68), and for bf16 rows in
 * groups of 512 × 2 with dW without ds_out (N = 6152-8192; H100, the binaries before and with
 * it alternating, two runs: 8192 84.5-86.1 -> 83.8-83.9 us (0.80-0.81 -> 0.82), 8000
 * 86.1-86.8 -> 84.4-84.7, 6656 87.2-88.1 -> 85.1-86.6, 7168 85.4-86.1 -> 84.9-85.4; f16 8192
 * lost, 85.2-85.9 -> 88.9-89.1; two groups a compute unit, which its 64 registers allow, lost:
 * 93.5-93.7). Not elsewhere, where the compiler's schedule came out slower (fused 8192 with dW
 * and ds_out 0.82 -> 0.71; frozen 32768, whose rows stream, 0.77 -> 0.69). */
bool ng_rms_raw_rows(const ng_row_launch *l, ng_dtype xd, bool compute_dw, bool has_ds) {
  const bool raw512 = xd == NG_BF16 && l->reg_cols == 2 && l->wg >= 512 && !has_ds;
  return compute_dw && (l->reg_cols >= 4 || raw512);
}

/* cp: the plan of rows split across groups (ng_rmsnorm_bwd_coop), or NULL for launch l; only
 * its programs hold that kernel (RMS_BWD_COOP, cl/rmsnorm.cl says why). */
static void bwd_opts(ng_opts *o, const ng_context *ctx, const ng_row_launch *l,
                     const ng_coop *cp, ng_dtype xd, bool has_w, ng_dtype wd, bool compute_dw,
                     bool has_ds, bool fused_red) {
  /* the reducers' rows in flight (NG_RED_F) */
  const unsigned red_f = cp ? ng_coop_red_f(cp) : ng_fused_rows_in_flight(ctx, l);
  if (cp) l = &cp->l;
  ng_opts_init(o);
  ng_row_opts_dt(o, l, xd, has_w, wd);
  if (cp) ng_opts_add(o, "RMS_BWD_COOP", 1);
  if (cp) ng_coop_opts(o, cp);
  /* w' in local memory: both passes of rms_bwd_plan's bf16 slices */
  if (cp && cp->ahead && xd == NG_BF16) ng_opts_add(o, "RMS_WLOCAL", 1);
  ng_opts_add(o, "COMPUTE_DW", compute_dw);
  if (has_ds) ng_opts_add(o, "HAS_DS", 1);
  if (fused_red) ng_opts_add(o, "FUSED_RED", 1);
  if (fused_red) ng_opts_add(o, "NG_RED_F", red_f);
  ng_opts_add(o, "RAW_ROWS", ng_rms_raw_rows(l, xd, compute_dw, has_ds));
}

/* A tensor of `count` elements that must have x's dtype. */
static ng_status check_like_x(ng_context *ctx, ng_tensor x, ng_tensor t, const char *what,
                              size_t count) {
  ng_status s = ng_check_tensor(ctx, t, what, count, true);
  if (s == NG_SUCCESS) s = ng_check_same_dtype(x, "x", t, what);
  return s;
}

static ng_status check_rstd(ng_context *ctx, ng_tensor rstd, size_t rows) {
  ng_status s = ng_check_tensor(ctx, rstd, "rstd", rows, true);
  if (s == NG_SUCCESS && rstd.dtype != NG_F32)
    s = ng_fail(NG_ERR_UNSUPPORTED_DTYPE, "rstd must be f32");
  return s;
}

/* Whether a forward may split long rows across groups (ng_rmsnorm_fwd_coop): RMSNorm's, where
 * it measured faster than streaming them (H100, bf16, rows·N = 2^25, four runs: 32768 58.8-59.7
 * -> 56.6-57.5 us, 65536 60.6-62.1 -> 59.4-60.2; at 16384, which the launch holds, 52.9-53.9 ->
 * 56.2-57.1), not the fused add's, where it measured slower (32768 106.1-107.0 -> 116.0-116.5,
 * 65536 111.8-112.9 -> 115.1-116.5; neither narrower slices nor larger grids won it back). */
static bool fwd_coop(bool fused) { return !fused; }

/* RMSNorm's f32 rows of 769-1024 vectors stream on NVIDIA rather than being held or split
 * (NG_ROWS_F32_STREAM_1K has the numbers): the launch gives them one slot, and the forward does
 * not split them. */
static bool fwd_splits(bool fused, ng_dtype xd, const ng_row_launch *l, size_t n) {
  return fwd_coop(fused) && !(xd == NG_F32 && l->vec == 8 && ng_f32_stream_rows(n / 8));
}

/* The forward's launch mode: RMSNorm's 16-bit rows from N = 4096 take two rows a group on NVIDIA
 * (NG_ROWS_PAIRS: up to 512 vectors; bf16 up to 1024, NG_ROWS_PAIRS_1K, where f16 lost). Shorter
 * rows measured even with it, the fused add's lost (ng_choose_row_launch_k has the numbers).
 * Rows of 2049-4096 vectors are held by groups of 1024 × 4 rather than split (NG_ROWS_HOLD4; bf16
 * rows in calls of at most a row a compute unit alone, NG_ROWS_HOLD4_FEW),
 * rows of 513-1024 vectors (the fused add's too) by groups of 256 × 4, a group a row
 * (NG_ROWS_256X4, which takes them from NG_ROWS_PAIRS_1K where there are enough rows). The fused
 * add's bf16 rows of 1024 vectors take 512 × 2 on a grid instead (NG_ROWS_512X2), and its f32
 * rows of more than 512 vectors stream (NG_ROWS_F32_1SLOT_512). 16-bit rows of 257-384 vectors
 * take 128 × 4, the fused add's too (NG_ROWS_FWD_128X4). */
static ng_rows_mode fwd_mode(bool fused, size_t n, ng_dtype xd) {
  if (xd == NG_F32) return NG_ROWS_FWD | (fused ? NG_ROWS_F32_1SLOT_512 : NG_ROWS_F32_STREAM_1K);
  if (fused)
    return NG_ROWS_FWD | NG_ROWS_256X4 | NG_ROWS_W256 | NG_ROWS_512X4 | NG_ROWS_FWD_128X4 |
           (xd == NG_BF16 ? NG_ROWS_512X2 : 0);
  const int pairs = n < 4096 ? 0 : xd == NG_BF16 ? NG_ROWS_PAIRS_1K : NG_ROWS_PAIRS;
  const ng_rows_mode hold4 = xd == NG_BF16 ? NG_ROWS_HOLD4_FEW : NG_ROWS_HOLD4;
  return NG_ROWS_FWD | NG_ROWS_X16 | pairs | hold4 | NG_ROWS_256X4 | NG_ROWS_FWD_128X4;
}
/* The forward's f32 and f16 rows split too, f32 with bf16's four vectors a work-item (H100,
 * rows·N = 2^25, streaming -> split, two runs: f32 65536 143.2-144.1 -> 123.6-124.6 us, 32768
 * even at 121; with two vectors 32768 lost, 122 -> 132; f16 65536 60.3-60.6 -> 58.0-58.6).
 * bf16 and f32 rows publish each row's sum ahead (ng_coop.ahead; H100, old and new binaries
 * alternating, four runs: bf16 65536 59.5-60.1 -> 55.5-56.4 us (0.77 -> 0.82), 131072 63.2-64.3
 * -> 54.9-57.3 (0.72 -> 0.80-0.83), 32768 57.6-57.9 -> 56.6-57.0; f32 65536 124.5-126.6 ->
 * 115.8-117.2 (0.72-0.74 -> 0.78-0.79)). 16-bit rows form and publish the next row's sum
 * after this row's collect, before its stores (NG_COOP_LATE16: the next row's loads then wait
 * beside the collect; H200, bf16, the same binary with and without, two runs: 65536 45.5-46.2
 * -> 44.1-44.7 us, 0.71-0.72 -> 0.74; 32768 even; f32 even, and kept first,
 * ng_coop_plan_shape). f16 rows publish ahead with their bits widened pair by pair
 * (NG_COOP_F16_PACK: 125 registers, two groups a compute unit; with vload_half8 the second
 * slice had lost on the H100, 58.6-59.1 -> 92.6-94.0 us at 65536): H200, f16, the same binary
 * with and without, two runs, 65536 51.6 -> 43.8-45.1 us (0.63 -> 0.72-0.75); 32768, which
 * 1024 × 4 holds, unchanged. */
#define FWD_COOP_X                                                                                 \
  (NG_COOP_F32_FULL | NG_COOP_F16 | NG_COOP_F16_PACK | NG_COOP_AHEAD_BF16 | NG_COOP_AHEAD_F32 |    \
   NG_COOP_AHEAD_F16 | NG_COOP_LATE16)

/* The forward's plan of rows split across groups for launch l, if they split (FWD_COOP_X). */
static bool fwd_plan(const ng_context *ctx, bool fused, const ng_row_launch *l, ng_dtype xd,
                     size_t rows, size_t n, ng_coop *c) {
  return fwd_splits(fused, xd, l, n) && ng_coop_plan(ctx, l, xd, rows, n, 0, FWD_COOP_X, c);
}

ng_row_launch ng_rmsnorm_fwd_launch(const ng_context *ctx, bool fused, size_t rows, size_t n,
                                    ng_dtype xd, bool vec_ok) {
  return ng_choose_row_launch_k(ctx, fused ? "fused-add-rmsnorm.fwd" : "rmsnorm.fwd", xd, rows, n,
                                vec_ok, fwd_mode(fused, n, xd));
}

bool ng_rmsnorm_fwd_plan(const ng_context *ctx, size_t rows, size_t n, ng_dtype xd, ng_coop *c) {
  const ng_row_launch l = ng_rmsnorm_fwd_launch(ctx, false, rows, n, xd, true);
  return fwd_plan(ctx, false, &l, xd, rows, n, c);
}

/* Forward; with `fused`, residual and s are required and y = RMSNorm(s = rd(x + residual)). */
static ng_status rms_forward(ng_context *ctx, cl_command_queue queue, const ng_rmsnorm_params *p,
                             bool fused, ng_tensor x, ng_tensor residual, ng_tensor weight,
                             ng_tensor y, ng_tensor sum, ng_tensor rstd, cl_uint nwait,
                             const cl_event *wait, cl_event *event) {
  size_t count = 0;
  ng_status s = check_params(ctx, queue, p, nwait, wait, &count);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, x, "x", count, true);
  if (s == NG_SUCCESS && fused) s = check_like_x(ctx, x, residual, "residual", count);
  if (s == NG_SUCCESS) s = check_like_x(ctx, x, y, "y", count);
  if (s == NG_SUCCESS && fused) s = check_like_x(ctx, x, sum, "s", count);
  if (s == NG_SUCCESS) s = check_weight(ctx, weight, p->n);
  if (s == NG_SUCCESS) s = check_rstd(ctx, rstd, p->rows);
  if (s != NG_SUCCESS) return s;

  bool vec_ok = ng_vec_aligned(ctx, x, p->n, 8) && ng_vec_aligned(ctx, y, p->n, 8) &&
                ng_vec_aligned(ctx, weight, p->n, 8);
  if (fused) vec_ok = vec_ok && ng_vec_aligned(ctx, residual, p->n, 8) &&
                      ng_vec_aligned(ctx, sum, p->n, 8);
  const ng_row_launch l = ng_rmsnorm_fwd_launch(ctx, fused, p->rows, p->n, x.dtype, vec_ok);
  /* RMSNorm's rows beyond the launch's registers split across groups, when this queue gets
   * a counter area (fwd_coop says why not the fused add's) */
  ng_coop cp;
  cl_mem sync = NULL;
  if (fwd_plan(ctx, fused, &l, x.dtype, p->rows, p->n, &cp))
    s = ng_coop_sync(ctx, queue, &cp, &sync);
  if (s != NG_SUCCESS) return s;
  const bool coop = sync != NULL;
  ng_opts o;
  fwd_opts(&o, &l, coop ? &cp : NULL, x.dtype, weight.mem != NULL, weight.dtype, fused);
  cl_program prog;
  s = ng_get_program(ctx, "rmsnorm", &o, &prog);
  if (s != NG_SUCCESS) {
    if (sync) clReleaseMemObject(sync);
    return s;
  }

  cl_ulong xo = x.offset, reso = residual.offset, so = sum.offset, wo = weight.offset,
           yo = y.offset, ro = rstd.offset;
  cl_uint rows = (cl_uint)p->rows, n = (cl_uint)p->n;
  float eps = p->eps, off = p->offset;
  cl_int mode = p->casting_mode;
  ng_arg args[20];
  cl_uint na = 0;
  args[na++] = NG_ARG(x.mem);
  args[na++] = NG_ARG(xo);
  if (fused) {
    args[na++] = NG_ARG(residual.mem);
    args[na++] = NG_ARG(reso);
    args[na++] = NG_ARG(sum.mem);
    args[na++] = NG_ARG(so);
  }
  const ng_arg rest[] = {NG_ARG(weight.mem), NG_ARG(wo),  NG_ARG(y.mem), NG_ARG(yo),
                         NG_ARG(rstd.mem),   NG_ARG(ro),  NG_ARG(rows),  NG_ARG(n),
                         NG_ARG(eps),        NG_ARG(off), NG_ARG(mode)};
  for (size_t i = 0; i < NG_ARRAY_LEN(rest); i++) args[na++] = rest[i];
  if (!coop)
    return ng_enqueue(ctx, queue, prog, fused ? "ng_fused_add_rmsnorm_fwd" : "ng_rmsnorm_fwd",
                      (size_t)l.groups * l.wg, l.wg, args, na, nwait, wait, event);
  cl_ulong sync_off = 0;
  cl_uint slices = cp.slices;
  args[na++] = NG_ARG(sync);
  args[na++] = NG_ARG(sync_off);
  args[na++] = NG_ARG(slices);
  s = ng_enqueue(ctx, queue, prog, "ng_rmsnorm_fwd_coop", (size_t)cp.l.groups * cp.l.wg, cp.l.wg,
                 args, na, nwait, wait, event);
  clReleaseMemObject(sync);
  return s;
}

ng_status ng_rmsnorm_forward(ng_context *ctx, cl_command_queue queue, const ng_rmsnorm_params *p,
                             ng_tensor x, ng_tensor weight, ng_tensor y, ng_tensor rstd,
                             cl_uint nwait, const cl_event *wait, cl_event *event) {
  ng_clear_detail();
  return rms_forward(ctx, queue, p, false, x, ng_tensor_none(), weight, y, ng_tensor_none(), rstd,
                     nwait, wait, event);
}

/* Fused add with ds_out splits bf16 rows beyond 1024 vectors across groups, though a group of
 * 512 × 4 holds twice that: its three tensors crowd the registers (H100, N = 16384, 2048 rows,
 * with dW 135.4-137.3 -> 128.7 us, frozen 114.4-115.9 -> 114.8; RMSNorm and fused add without
 * ds_out lost there, 89.7 -> 104.8 us with dW). Its rows of 513-1024 vectors take NG_ROWS_1K's
 * 1024 × 1 instead, which beat splitting them into sets of one group of 256 × 4 (bf16 N = 8192,
 * with dW 111.1-112.8 us split against 104.3-106.3, frozen 99.9-101.4 against 95.7-96.4). */
#define FA_DS_COOP_HOLD 1024
/* The backward's kernel: the fused add's (HAS_DS) only with ds_out; without it, RMSNorm's, whose
 * split plans it takes too. */
static bool rms_kernel(bool fused, bool has_ds) { return !fused || !has_ds; }
static size_t coop_hold(bool fused, bool has_ds) {
  return rms_kernel(fused, has_ds) ? 0 : FA_DS_COOP_HOLD;
}
/* The backward's f32 rows split with two vectors a work-item (H100, rows·N = 2^25, whole
 * backward, column split or rows streamed twice -> split, two runs: RMSNorm with dW 32768
 * 242 -> 175 us, 65536 242 -> 193, frozen 200 -> 175, 229 -> 193; fused add 283 -> 225, 284 -> 222,
 * frozen 258 -> 225, 272 -> 225); RMSNorm's f16 rows too (65536: 140-142 -> 93, frozen 111 ->
 * 80), and the fused add's since their bits are widened pair by pair (NG_COOP_F16_PACK: its split
 * kernel had taken 154 registers for f16 rows, one group a compute unit, and lost, 157 -> 197 us
 * at 65536). With it, H100, rows·N = 2^25, the binary before and this one alternating, two runs:
 * fused add with dW 16384 133.0-133.7 -> 111.2-112.0 us (0.69 -> 0.82), 32768 158.3-158.4 ->
 * 114.5-115.1 (0.58 -> 0.80), 65536 157.7-158.5 -> 117.5-117.8 (0.58 -> 0.78); weight frozen
 * 120.2-120.6 -> 100.1-101.7, 111.4-112.6 -> 102.7-104.3, 137.9-138.0 -> 104.9 (0.66 -> 0.87);
 * RMSNorm with dW 32768 90.0-90.8 -> 88.8-89.0, 65536 93.2-93.4 -> 91.2-92.1, frozen even (one
 * run of 89.6 at 65536 against 80.5 in the other). */
/* RMSNorm's f32 rows also publish each row's sum ahead (ng_coop.ahead; H100, old and new
 * binaries alternating, two runs: with dW 65536 190.3-190.7 -> 159.5-166.2 us (0.72 -> 0.83-0.86),
 * 32768 173.3-173.9 -> 158.3-161.0 (0.79 -> 0.86-0.87), frozen 65536 195.4-195.8 -> 154.4-157.8
 * (0.70 -> 0.87-0.89)); bf16 rows lost with the second slices (with dW 65536 96 -> 149 us, frozen
 * 84.6 -> 121.8, 32768 92.5 -> 117) and f16 ones were not tried. */
/* The fused add's bf16 rows with ds_out are widened pair by pair too (NG_COOP_BF16_PACK: 124 ->
 * 117 registers). H100, bf16, rows·N = 2^25, the binary before and this one alternating, two
 * runs: with dW 16384 114.2-115.1 -> 111.1 us (0.80 -> 0.82-0.83), 32768 115.2-115.4 -> 113.6-113.7
 * (0.79 -> 0.80), 65536 119.4-120.1 -> 116.7-117.3 (0.77 -> 0.78); weight frozen 101.7-102.5 ->
 * 100.7-100.9, 103.2-103.8 -> 102.6, 105.6-106.1 -> 104.4-104.9. RMSNorm's own split backward
 * (which the fused add without ds_out runs) was even or slower with it (65536 with dW 92.7-93.3
 * -> 93.4-94.8 us). */
static unsigned coop_x(bool fused, bool has_ds) {
  return NG_COOP_F32 | NG_COOP_F16 | NG_COOP_F16_PACK |
         (rms_kernel(fused, has_ds) ? NG_COOP_AHEAD_F32 : NG_COOP_BF16_PACK);
}

/* The split backward's plan for a pass with or without dW. RMSNorm's bf16 rows take slices of
 * 256 × 2 vectors and publish each row's share ahead (ng_coop.ahead); w' lives in local memory
 * (RMS_WLOCAL, bwd_opts), frozen beside three groups a compute unit, with dW (whose sums take
 * local memory too) beside four, whose reducers keep eight rows in flight instead of sixteen
 * (64 registers, cl/rmsnorm.cl). The slices are the same either way, so dx keeps its bits; both
 * passes ask local memory for w' (lslots 2), so a device without it gives neither this plan.
 * Until 2026-11-28 w' stayed in registers with dW, beside two groups: the kernel took 115
 * registers, and 98 with w' in local memory, past the 80 at which three groups of 256 fit.
 * H200, bf16, rows·N = 2^25, whole backward with dW, in one run each (alternating, two rounds):
 * w' in local memory on two groups 85.7-85.8 -> 96.4-96.9 us at 65536; the dW sums in a loop of
 * their own (80 registers) on three groups 85.9-86.5 -> 81.7-82.1 at 65536 and 81.0-81.8 ->
 * 78.7-78.8 at 32768; with the reducers' eight rows (64) on four 79.0-79.2 (0.57 -> 0.62) and
 * 76.3-77.2 (0.60 -> 0.64-0.65), the fused add without ds_out at 65536 86.0-86.2 -> 79.4-79.9;
 * on three 82.9-83.7 and 77.9-78.6. This build against c6f8b74: 85.9-86.6 -> 78.7-79.0,
 * 80.1-80.9 -> 76.2-77.0. The H100 was not lent to measure it. The frozen pass keeps three
 * groups: four gained 2-4 % on the H200 (64.4-64.5 -> 62.9-63.1 us at 32768, 66.1-66.3 -> 63.9
 * at 65536) but lost on the H100 (below). H100, bf16, rows·N = 2^25, the binary before the ahead
 * exchange (a3d7bdb) -> this one, alternating, two runs: frozen
 * 65536 85.0-85.7 -> 78.0-78.5 us (0.81 -> 0.88), 32768 82.7-83.2 -> 76.7-77.5 (0.83 -> 0.89);
 * with dW 32768 92.7-92.8 -> 87.2-87.6 (0.74 -> 0.79), 65536 95.7 -> 93.2-94.5 (0.72 -> 0.73-0.74;
 * the 256 × 4 one-row loop of 84a6516 measured 91.9-93.7 there). With dW, w' in local memory
 * lost then (three groups 125.5-130.5 us, whose third group did not fit beside the kernel's 98
 * registers, so that groups waited for a set's groups not yet running; two 94.3-100.5), and so
 * did frozen w' in registers
 * (81.3-85.3) and four groups (79.6-81.3). f16 rows keep 256 × 4 (with dW 92.2 -> 95.4), and
 * rows of more than 16 such slices (bf16 N > 65536) the 256 × 4 plan (131072 frozen even).
 * The fused add without ds_out runs RMSNorm's kernel and takes RMSNorm's plans (this one, and
 * f32 rows ahead: coop_x); until 2026-11-27 it kept the fused add's plan: H100, rows·N = 2^25,
 * old and new binaries alternating, three rounds: bf16 frozen 32768 81.9-82.2 -> 76.7-77.9 us,
 * 65536 84.2-97.3 -> 77.3-77.8, with dW 88.3-90.2 -> 86.3-86.7 and 65536 even; f32 with dW
 * 65536 116.2-117.6 -> 89.2-89.9, frozen 115.4-121.1 -> 84.5-87.6.
 * The bf16 plan keeps whole slices (NG_COOP_WHOLE), both passes, so that dx keeps its bits: with
 * the even shares of the other split kernels (cl/ng_common.clh, ng_coop_width) the pass with dW
 * lost its fourth group (H200, bf16, rows·N = 2^25, the binaries with and without, two rounds:
 * 18432 91.5-91.6 -> 126.1-126.3 us, 20480 88.0 -> 122.6-123.1, and 40960, whose slices are
 * whole either way, 86.8-87.2 -> 123.6-125.3); frozen even (18432 65.5-67.5 -> 65.8-66.4). */
#define RMS_COOP_DW_RED_F 8
static bool rms_bwd_plan(const ng_context *ctx, const ng_row_launch *l, bool fused, bool has_ds,
                         bool dw, ng_dtype xd, size_t rows, size_t n, ng_coop *c) {
  if (rms_kernel(fused, has_ds) && xd == NG_BF16 &&
      ng_coop_plan_shape(ctx, l, xd, rows, n, 0,
                         coop_x(fused, has_ds) | NG_COOP_AHEAD_BF16 | NG_COOP_WHOLE, 2, 2,
                         dw ? 4 : 3, c)) {
    if (dw) c->red_f = RMS_COOP_DW_RED_F;
    return true;
  }
  return ng_coop_plan(ctx, l, xd, rows, n, coop_hold(fused, has_ds), coop_x(fused, has_ds), c);
}

/* The fused add's split backward with ds_out runs without the next-row prefetch, except for
 * f32 rows past 32768, unless the override or a table sets it (the launch's asked_prefetch). H100,
 * rows·N = 2^25, whole backward, two runs each, prefetch on -> off:
 *  - bf16 with dW 16384 115.6-116.2 -> 110.8-111.3 us (0.79 -> 0.82), 32768 118.8-122.9 ->
 *    114.0-114.3 (0.77 -> 0.80), 65536 120.8-121.0 -> 117.5-118.0; weight frozen 105.1-105.9 ->
 *    101.1 (0.87 -> 0.90), 107.1 -> 102.7 (0.85 -> 0.89), 108.9-109.1 -> 106.4-106.6 (confirmed
 *    on this rule's own binary: with dW 114.6-116.1 -> 109.0-110.0 and 118.0-118.3 -> 113.9-114.0,
 *    frozen 103.5-103.8 -> 100.0-100.2 and 105.9 -> 102.7-102.8);
 *  - f32 with dW 16384 210.6-211.7 -> 202.5-204.2, 32768 219.7-221.4 -> 215.5-216.0, frozen
 *    32768 221.5 -> 217.6; but 65536 219.2-221.2 -> 222.8-225.3, frozen 226.6 -> 229.4.
 * The other split backwards lost without it (RMSNorm 65536 94.6 -> 102.9-103.5, LayerNorm 32768
 * 98.2-98.4 -> 111.9-112.0, PolyNorm 16384 83.2-83.5 -> 85.2-85.4), as did the fused add's held
 * rows (1024-8192 with dW: 101-117 -> 115-126). */
static void coop_prefetch(bool fused, bool has_ds, ng_dtype xd, size_t n, ng_coop *cp) {
  if (rms_kernel(fused, has_ds) || cp->l.asked_prefetch) return;
  if (xd == NG_F32 && n > 32768) return;
  cp->l.prefetch = false;
}

/* The backward's launch mode (ng_choose_row_launch_k): a frozen backward keeps no partials, so
 * it may use the forward's larger grid (but one group a unit for rows of four slots:
 * NG_ROWS_ONE); the fused add's with ds_out fewer groups with dW (NG_ROWS_FEW) and more frozen
 * (NG_ROWS_MANY, NG_ROWS_MANY_512), groups of half a row for 16-bit rows of 257-288 vectors
 * (NG_ROWS_HALF_MID_DS) and 1024 × 1 for 16-bit rows of 513-1024 vectors (NG_ROWS_1K); without
 * ds_out (RMSNorm's kernel) groups of half a row (NG_ROWS_FIT2; 16-bit rows of 257-448 vectors
 * too, NG_ROWS_HALF_MID) and bf16 rows of 1025-2048 vectors without the prefetch
 * (NG_ROWS_DW_NOPF); f32 rows past 768 vectors (with ds_out past 512) and f16 rows past 1024
 * (without ds_out) go to the split rather than being held (NG_ROWS_F32_1SLOT,
 * NG_ROWS_F16_1SLOT). The variant list asks for the same. */
static ng_rows_mode rms_bwd_mode(bool compute_dw, bool has_ds, ng_dtype xd) {
  return ng_bwd_mode(compute_dw, xd) | NG_ROWS_ONE |
         (has_ds ? (compute_dw ? NG_ROWS_FEW : NG_ROWS_MANY | NG_ROWS_MANY_512) | NG_ROWS_1K |
                       NG_ROWS_HALF_MID_DS
                 : NG_ROWS_FIT2 | NG_ROWS_HALF_MID |
                       (xd == NG_BF16 ? NG_ROWS_DW_NOPF : xd == NG_F16 ? NG_ROWS_F16_1SLOT : 0)) |
         (xd != NG_F32 ? 0 : has_ds ? NG_ROWS_F32_1SLOT_512 : NG_ROWS_F32_1SLOT);
}

/* The tuned-table kind of a backward launch. */
static const char *rms_kind(bool fused, bool compute_dw) {
  if (fused) return compute_dw ? "fused-add-rmsnorm.bwd" : "fused-add-rmsnorm.bwd_frozen";
  return compute_dw ? "rmsnorm.bwd" : "rmsnorm.bwd_frozen";
}

/* The backward's row launch, as the op, its scratch query and the tests' plan take it. */
static ng_row_launch bwd_launch(const ng_context *ctx, bool fused, bool has_ds, bool dw,
                                ng_dtype xd, size_t rows, size_t n, bool vec_ok) {
  return ng_choose_row_launch_k(ctx, rms_kind(fused, dw), xd, rows, n, vec_ok,
                                rms_bwd_mode(dw, has_ds, xd));
}

bool ng_rmsnorm_bwd_plan(const ng_context *ctx, size_t rows, size_t n, ng_dtype xd, bool fused,
                         bool has_ds, bool dw, ng_row_launch *l, ng_coop *c) {
  *l = bwd_launch(ctx, fused, has_ds, dw, xd, rows, n, true);
  return rms_bwd_plan(ctx, l, fused, has_ds, dw, xd, rows, n, c);
}

static ng_status scratch_size(ng_context *ctx, const ng_rmsnorm_params *p, int compute_dweight,
                              size_t *bytes, bool fused) {
  if (!ctx || !p || !bytes) return ng_fail(NG_ERR_NULL_HANDLE, "ctx, params or bytes is NULL");
  size_t count;
  ng_status s = ng_check_rows(p->rows, p->n, &count);
  if (s != NG_SUCCESS) return s;
  *bytes = 0;
  if (!compute_dweight) return NG_SUCCESS;
  /* with NG_ROWS_FIT2's two groups a unit and NG_ROWS_HALF_MID's three or four (a call without
   * ds_out); without NG_ROWS_1K and NG_ROWS_FEW (with it), whose grids need fewer partial rows */
  s = ng_partials_scratch_any(ctx, rms_kind(fused, true),
                              NG_ROWS_FIT2 | NG_ROWS_HALF_MID | NG_ROWS_F32_1SLOT,
                              p->rows, p->n, 1, 1, coop_hold(fused, true), coop_x(fused, true),
                              bytes);
  /* with ds_out the fused add's f32 rows leave the registers from 513 vectors, not 769
   * (NG_ROWS_F32_1SLOT_512): that launch too */
  size_t b32 = 0;
  if (s == NG_SUCCESS && fused)
    s = ng_partials_scratch_any(ctx, rms_kind(fused, true), NG_ROWS_FIT2 | NG_ROWS_F32_1SLOT_512,
                                p->rows, p->n, 1, 1, coop_hold(fused, true), coop_x(fused, true),
                                &b32);
  if (b32 > *bytes) *bytes = b32;
  /* the split rows' own plans (rms_bwd_plan) and launches, each x dtype, the fused add with and
   * without ds_out: their slices and sets are computed here rather than assumed to need no
   * more */
  const ng_dtype xds[] = {NG_BF16, NG_F16, NG_F32};
  for (int ds = fused ? 1 : 0; ds >= 0 && s == NG_SUCCESS; ds--) {
    for (size_t i = 0; i < NG_ARRAY_LEN(xds) && s == NG_SUCCESS; i++) {
      const ng_row_launch l = bwd_launch(ctx, fused, ds, true, xds[i], p->rows, p->n, true);
      ng_coop c;
      size_t b = 0;
      if (rms_bwd_plan(ctx, &l, fused, ds, true, xds[i], p->rows, p->n, &c))
        s = ng_coop_partials(&c, p->n, 1, &b);
      if (b > *bytes) *bytes = b;
      /* and the launch itself, where a queue without a counter area falls back to it: f16 rows
       * past 1024 vectors get one slot (NG_ROWS_F16_1SLOT), which the queries above (bf16 and
       * f32 launches) do not ask for */
      b = 0;
      if (s == NG_SUCCESS) s = ng_partials_scratch(ctx, &l, p->rows, p->n, 1, 1, &b);
      if (b > *bytes) *bytes = b;
    }
  }
  if (s == NG_SUCCESS && *bytes) *bytes += NG_SCRATCH_VEC_PAD; /* ng_scratch_acquire_vec's */
  return s;
}

ng_status ng_rmsnorm_backward_scratch_size(ng_context *ctx, const ng_rmsnorm_params *p,
                                           int compute_dweight, size_t *bytes) {
  ng_clear_detail();
  return scratch_size(ctx, p, compute_dweight, bytes, false);
}

/* The backward's default for summing dW in the kernel (ng_fused_wanted): RMSNorm's, and the
 * fused add's without ds_out (the same kernel), by shape. The fused add with ds_out, in its
 * NG_ROWS_FEW grid, only for 16-bit rows of 65-128 vectors (bf16 N = 520-1024: six groups of 128
 * work-items a compute unit), and never elsewhere. H100, with dW and ds_out, rows·N = 2^25,
 * separate -> in-kernel, the same binary, four or five runs (2026-11-26): bf16 at 1024
 * 101.2-102.0 -> 99.6-100.9 us (0.90 -> 0.91-0.92), f16 101.2-103.4 -> 100.0-101.2, bf16
 * 1000 x 1024 19.2-22.0 -> 15.8-16.8; but f16 at 2048 102.0-102.3 -> 105.6-112.4, bf16 at 2048
 * 101.2-102.2 -> 100.9-101.6, at 512 even (103.7-103.8 -> 102.8-104.2), f32 at 1024 and 2048
 * even; with the grid of the other ops (before NG_ROWS_FEW): 2048 105.5-107.2 -> 104.6-105.7,
 * 8192 111.8-113.2 -> 111.6-115.0, 4096 106.1-106.6 -> 118.6-119.9 (there the time went to the
 * groups' arrival: a measurement build without the reducers' loads still took 119.3). */
static ng_fused_rule rms_fuse_rule(bool has_ds, ng_dtype x_dtype, size_t n,
                                   const ng_row_launch *l) {
  if ((l->wg & (l->wg - 1)) != 0) return NG_FUSED_NEVER; /* NG_ROWS_FIT2 (rms_backward) */
  if (!has_ds) return NG_FUSED_BY_SHAPE;
  const bool x16 = x_dtype == NG_BF16 || x_dtype == NG_F16;
  return x16 && n > 64 * 8 && n <= 128 * 8 ? NG_FUSED_ALWAYS : NG_FUSED_NEVER;
}

/* Backward; `x` is the normalized input (s for the fused op), ds_out (optional) is added to dx. */
static ng_status rms_backward(ng_context *ctx, cl_command_queue queue, const ng_rmsnorm_params *p,
                              bool fused, const char *x_name, ng_tensor dy, ng_tensor ds_out,
                              ng_tensor x,
                              ng_tensor weight, ng_tensor rstd, ng_tensor dx, ng_tensor dweight,
                              unsigned flags, ng_tensor scratch, cl_uint nwait,
                              const cl_event *wait, cl_event *event) {
  size_t count = 0;
  ng_status s = check_params(ctx, queue, p, nwait, wait, &count);
  if (s == NG_SUCCESS && (flags & ~NG_ACCUMULATE_GRAD))
    s = ng_fail(NG_ERR_INVALID_VALUE, "unknown flags 0x%x", flags & ~NG_ACCUMULATE_GRAD);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, dy, "dy", count, true);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, x, x_name, count, true);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, dx, "dx", count, true);
  if (s == NG_SUCCESS) s = ng_check_same_dtype(x, x_name, dy, "dy");
  if (s == NG_SUCCESS) s = ng_check_same_dtype(x, x_name, dx, "dx");
  const bool has_ds = ds_out.mem != NULL;
  if (s == NG_SUCCESS && has_ds) s = ng_check_tensor(ctx, ds_out, "ds_out", count, true);
  if (s == NG_SUCCESS && has_ds) s = ng_check_same_dtype(x, x_name, ds_out, "ds_out");
  if (s == NG_SUCCESS) s = check_weight(ctx, weight, p->n);
  if (s == NG_SUCCESS) s = check_rstd(ctx, rstd, p->rows);
  const bool compute_dw = dweight.mem != NULL;
  if (s == NG_SUCCESS && compute_dw && !weight.mem)
    s = ng_fail(NG_ERR_INVALID_VALUE, "dweight given but the op has no weight");
  if (s == NG_SUCCESS && compute_dw) s = ng_check_tensor(ctx, dweight, "dweight", p->n, true);
  if (s == NG_SUCCESS && compute_dw) s = ng_check_same_dtype(weight, "weight", dweight, "dweight");
  if (s != NG_SUCCESS) return s;

  /* the same in every pass (dx's bits): the scratch, whose offset the op rounds up, has no say */
  const bool vec_ok = ng_vec_aligned(ctx, x, p->n, 8) && ng_vec_aligned(ctx, dy, p->n, 8) &&
                      ng_vec_aligned(ctx, dx, p->n, 8) && ng_vec_aligned(ctx, weight, p->n, 8) &&
                      ng_vec_aligned(ctx, ds_out, p->n, 8);
  const ng_row_launch l =
      bwd_launch(ctx, fused, has_ds, compute_dw, x.dtype, p->rows, p->n, vec_ok);
  /* rows split across groups (frozen or not, so that dx has the same bits), when this queue
   * gets a counter area; else the column split (with dW) or rows streamed twice */
  ng_coop cp;
  cl_mem sync = NULL;
  if (rms_bwd_plan(ctx, &l, fused, has_ds, compute_dw, x.dtype, p->rows, p->n, &cp))
    s = ng_coop_sync(ctx, queue, &cp, &sync);
  if (s != NG_SUCCESS) return s;
  const bool coop = sync != NULL;
  if (coop) coop_prefetch(fused, has_ds, x.dtype, p->n, &cp);
  size_t nblocks = 0, rgroups = 0;
  const bool split =
      compute_dw && !coop && ng_col_split(ctx, &l, p->rows, p->n, &nblocks, &rgroups);
  size_t scratch_bytes = 0; /* the row partials (column split: and the row dots) */
  if (compute_dw && coop) s = ng_coop_partials(&cp, p->n, 1, &scratch_bytes);
  else if (compute_dw) s = ng_partials_scratch(ctx, &l, p->rows, p->n, 1, 1, &scratch_bytes);
  const bool acc = (flags & NG_ACCUMULATE_GRAD) != 0;
  ng_fused f;
  if (coop) /* the split kernel sums its sets' partial rows itself where that is wanted */
    ng_coop_fused_plan(ctx, &cp, p->n, compute_dw ? 1 : 0, true, dweight, ng_tensor_none(), acc,
                       &f);
  else if (s == NG_SUCCESS)
    s = ng_fused_plan(ctx, queue, &l, p->n, compute_dw && !split ? 1 : 0,
                      rms_fuse_rule(has_ds, x.dtype, p->n, &l), dweight, ng_tensor_none(), acc, &f);
  const bool sep_reduce = compute_dw && !f.on; /* a separate ng_reduce_partials launch */
  ng_opts o;
  bwd_opts(&o, ctx, &l, coop ? &cp : NULL, x.dtype, weight.mem != NULL, weight.dtype, compute_dw,
           has_ds, f.on);
  cl_program prog, rprog = NULL;
  if (s == NG_SUCCESS) s = ng_get_program(ctx, "rmsnorm", &o, &prog);
  if (s == NG_SUCCESS && sep_reduce) s = ng_reduce_program(ctx, dweight.dtype, &rprog);
  ng_scratch sc;
  if (s == NG_SUCCESS) s = ng_scratch_acquire_vec(ctx, scratch, scratch_bytes, &sc);
  if (s != NG_SUCCESS) {
    if (sync) clReleaseMemObject(sync);
    return s;
  }

  cl_ulong dyo = dy.offset, xo = x.offset, wo = weight.offset, ro = rstd.offset, dxo = dx.offset;
  cl_ulong po = sc.offset_bytes / 4, dso = ds_out.offset;
  cl_uint rows = (cl_uint)p->rows, n = (cl_uint)p->n;
  float off = p->offset;
  cl_int mode = p->casting_mode;
  const ng_arg args[] = {NG_ARG(dy.mem),     NG_ARG(dyo), NG_ARG(x.mem),    NG_ARG(xo),
                         NG_ARG(weight.mem), NG_ARG(wo),  NG_ARG(rstd.mem), NG_ARG(ro),
                         NG_ARG(dx.mem),     NG_ARG(dxo), NG_ARG(sc.mem),   NG_ARG(po),
                         NG_ARG(rows),       NG_ARG(n),   NG_ARG(off),      NG_ARG(mode),
                         NG_FUSED_KARGS(f),  NG_ARG(ds_out.mem), NG_ARG(dso)};
  /* The last two arguments exist only in the HAS_DS variant. */
  const cl_uint nargs = (cl_uint)NG_ARRAY_LEN(args) - (has_ds ? 0 : 2);
  const unsigned part_rows = coop ? cp.sets : split ? (unsigned)rgroups : l.groups;
  if (coop) {
    cl_ulong sync_off = 0;
    cl_uint slices = cp.slices;
    const ng_arg kargs[] = {NG_ARG(dy.mem),     NG_ARG(dyo),      NG_ARG(x.mem),    NG_ARG(xo),
                            NG_ARG(weight.mem), NG_ARG(wo),       NG_ARG(rstd.mem), NG_ARG(ro),
                            NG_ARG(dx.mem),     NG_ARG(dxo),      NG_ARG(sc.mem),   NG_ARG(po),
                            NG_ARG(rows),       NG_ARG(n),        NG_ARG(off),      NG_ARG(mode),
                            NG_ARG(sync),       NG_ARG(sync_off), NG_ARG(slices),
                            NG_COOP_RED_KARGS(f), NG_ARG(ds_out.mem), NG_ARG(dso)};
    s = ng_enqueue(ctx, queue, prog,
                   has_ds ? "ng_fused_add_rmsnorm_bwd_coop" : "ng_rmsnorm_bwd_coop",
                   (size_t)cp.l.groups * cp.l.wg, cp.l.wg, kargs,
                   (cl_uint)NG_ARRAY_LEN(kargs) - (has_ds ? 0 : 2), nwait, wait,
                   sep_reduce ? NULL : event);
    clReleaseMemObject(sync);
  } else if (split) {
    cl_ulong dots = po + rgroups * p->n; /* the row dots follow the partials */
    cl_uint nb = (cl_uint)nblocks;
    const ng_arg dargs[] = {NG_ARG(dy.mem),     NG_ARG(dyo), NG_ARG(x.mem),  NG_ARG(xo),
                            NG_ARG(weight.mem), NG_ARG(wo),  NG_ARG(sc.mem), NG_ARG(dots),
                            NG_ARG(rows),       NG_ARG(n),   NG_ARG(off)};
    const size_t dot_groups = p->rows < ((size_t)1 << 20) ? p->rows : ((size_t)1 << 20);
    s = ng_enqueue(ctx, queue, prog, "ng_rmsnorm_bwd_dot", dot_groups * l.wg, l.wg, dargs,
                   (cl_uint)NG_ARRAY_LEN(dargs), nwait, wait, NULL);
    const ng_arg cargs[] = {NG_ARG(dy.mem),     NG_ARG(dyo),  NG_ARG(x.mem),    NG_ARG(xo),
                            NG_ARG(weight.mem), NG_ARG(wo),   NG_ARG(rstd.mem), NG_ARG(ro),
                            NG_ARG(dx.mem),     NG_ARG(dxo),  NG_ARG(sc.mem),   NG_ARG(dots),
                            NG_ARG(sc.mem),     NG_ARG(po),   NG_ARG(rows),     NG_ARG(n),
                            NG_ARG(off),        NG_ARG(mode), NG_ARG(nb),
                            NG_ARG(ds_out.mem), NG_ARG(dso)};
    if (s == NG_SUCCESS)
      s = ng_enqueue(ctx, queue, prog,
                     has_ds ? "ng_fused_add_rmsnorm_bwd_cols" : "ng_rmsnorm_bwd_cols",
                     nblocks * rgroups * l.wg, l.wg, cargs,
                     (cl_uint)NG_ARRAY_LEN(cargs) - (has_ds ? 0 : 2), 0, NULL, NULL);
  } else {
    s = ng_enqueue(ctx, queue, prog, has_ds ? "ng_fused_add_rmsnorm_bwd" : "ng_rmsnorm_bwd",
                   (size_t)l.groups * l.wg, l.wg, args, nargs, nwait, wait,
                   sep_reduce ? NULL : event);
  }
  if (s == NG_SUCCESS && sep_reduce) {
    const ng_reduce_section sw = {po, p->n, dweight};
    s = ng_enqueue_reduce_sections(ctx, queue, rprog, sc.mem, part_rows, &sw, NULL, acc, 0, NULL,
                                   event);
  }
  ng_scratch_release(&sc);
  return s;
}

ng_status ng_rmsnorm_backward(ng_context *ctx, cl_command_queue queue, const ng_rmsnorm_params *p,
                              ng_tensor dy, ng_tensor x, ng_tensor weight, ng_tensor rstd,
                              ng_tensor dx, ng_tensor dweight, unsigned flags, ng_tensor scratch,
                              cl_uint nwait, const cl_event *wait, cl_event *event) {
  ng_clear_detail();
  return rms_backward(ctx, queue, p, false, "x", dy, ng_tensor_none(), x, weight, rstd, dx, dweight,
                      flags, scratch, nwait, wait, event);
}

/* ---- fused add + RMSNorm --------------------------------------------------------------------- */
static ng_rmsnorm_params as_rms(const ng_fused_add_rmsnorm_params *p) {
  ng_rmsnorm_params r = {p->rows, p->n, p->eps, p->offset, p->casting_mode};
  return r;
}

ng_status ng_fused_add_rmsnorm_forward(ng_context *ctx, cl_command_queue queue,
                                       const ng_fused_add_rmsnorm_params *p, ng_tensor x,
                                       ng_tensor residual, ng_tensor weight, ng_tensor y,
                                       ng_tensor s, ng_tensor rstd, cl_uint nwait,
                                       const cl_event *wait, cl_event *event) {
  ng_clear_detail();
  if (!p) return ng_fail(NG_ERR_NULL_HANDLE, "params is NULL");
  const ng_rmsnorm_params rp = as_rms(p);
  return rms_forward(ctx, queue, &rp, true, x, residual, weight, y, s, rstd, nwait, wait, event);
}

ng_status ng_fused_add_rmsnorm_backward(ng_context *ctx, cl_command_queue queue,
                                        const ng_fused_add_rmsnorm_params *p, ng_tensor dy,
                                        ng_tensor ds_out, ng_tensor s, ng_tensor weight,
                                        ng_tensor rstd, ng_tensor dx, ng_tensor dweight,
                                        unsigned flags, ng_tensor scratch, cl_uint nwait,
                                        const cl_event *wait, cl_event *event) {
  ng_clear_detail();
  if (!p) return ng_fail(NG_ERR_NULL_HANDLE, "params is NULL");
  const ng_rmsnorm_params rp = as_rms(p);
  return rms_backward(ctx, queue, &rp, true, "s", dy, ds_out, s, weight, rstd, dx, dweight, flags,
                      scratch, nwait, wait, event);
}

ng_status ng_fused_add_rmsnorm_backward_scratch_size(ng_context *ctx,
                                                     const ng_fused_add_rmsnorm_params *p,
                                                     int compute_dweight, size_t *bytes) {
  ng_clear_detail();
  if (!p) return ng_fail(NG_ERR_NULL_HANDLE, "params is NULL");
  const ng_rmsnorm_params rp = as_rms(p);
  return scratch_size(ctx, &rp, compute_dweight, bytes, true);
}

/* Every program the RMSNorm (or, with `fused`, the fused add + RMSNorm) calls can pick on this
 * device: x dtype × (no weight, or a weight of each dtype) × forward / frozen backward / backward
 * with dW × each launch shape the device can get (vector width 8 or 1; ng_variant_n_ctx's row
 * lengths; calls of many rows and of a few), and the dweight reductions. Other shape effects (the
 * group count) are kernel arguments. Duplicates are left to the caller. */
static ng_status for_each_variant(ng_context *ctx, bool fused, ng_variant_fn fn, void *user) {
  static const ng_dtype fl[] = {NG_F32, NG_F16, NG_BF16};
  ng_status s = NG_SUCCESS;
  for (int pass = 0; pass < 3; pass++) /* forward, frozen backward, backward with dW */
    for (int aligned = 1; aligned >= 0; aligned--)
      for (size_t ni = 0, n; (n = ng_variant_n_ctx(ctx, ni)) != 0; ni++)
        for (size_t xi = 0; xi < NG_ARRAY_LEN(fl); xi++) {
          /* the launches, as the op asks for them: [0] a call of many rows; [1] one of a few
           * rows, which NG_ROWS_256X4 and NG_ROWS_FIT2 leave on the old shape; [2] the fused
           * add's backward with ds_out */
          const ng_rows_mode mode = pass == 0 ? fwd_mode(fused, n, fl[xi])
                                              : rms_bwd_mode(pass == 2, false, fl[xi]);
          /* the kind as the calls name it, so a tuned or built-in launch is built too */
          const char *k = pass == 0 ? (fused ? "fused-add-rmsnorm.fwd" : "rmsnorm.fwd")
                                    : rms_kind(fused, pass == 2);
          const int nv = pass > 0 && fused ? 3 : 2; /* the launches this pass asks for */
          ng_row_launch ls[3];
          ls[0] = ng_choose_row_launch_k(ctx, k, fl[xi], (size_t)1 << 20, n, aligned != 0, mode);
          ls[1] = ng_choose_row_launch_k(ctx, k, fl[xi], 1, n, aligned != 0, mode);
          if (nv == 3)
            ls[2] = ng_choose_row_launch_k(ctx, k, fl[xi], (size_t)1 << 20, n, aligned != 0,
                                           rms_bwd_mode(pass == 2, true, fl[xi]));
          size_t nb, rg;
          for (int wi = pass == 2 ? 0 : -1; wi < (int)NG_ARRAY_LEN(fl); wi++) {
            const bool has_w = wi >= 0; /* dW needs a weight */
            const ng_dtype wd = has_w ? fl[wi] : NG_F32;
            for (int v = 0; v < nv; v++) {
              const int ds = v == 2; /* ds_out given or not */
              const ng_row_launch l = ls[v];
              ng_coop cp; /* rows split across groups: instead of l */
              const bool coop =
                  pass > 0 ? rms_bwd_plan(ctx, &l, fused, ds != 0, pass == 2, fl[xi],
                                          (size_t)1 << 20, n, &cp)
                           : fwd_plan(ctx, fused, &l, fl[xi], (size_t)1 << 20, n, &cp);
              if (coop && pass > 0) coop_prefetch(fused, ds != 0, fl[xi], n, &cp);
              const bool fused_red =
                  pass == 2 && (coop ? ng_coop_fused_wanted(ctx, &cp, n, 1, true)
                                     : ng_fused_wanted(ctx, &l, n, 1,
                                                       rms_fuse_rule(ds != 0, fl[xi], n, &l)) &&
                                           !ng_col_split(ctx, &l, (size_t)1 << 20, n, &nb, &rg));
              ng_opts o;
              if (pass == 0) fwd_opts(&o, &l, coop ? &cp : NULL, fl[xi], has_w, wd, fused);
              else bwd_opts(&o, ctx, &l, coop ? &cp : NULL, fl[xi], has_w, wd, pass == 2, ds != 0,
                            fused_red);
              if (s == NG_SUCCESS) s = fn(ctx, "rmsnorm", &o, user);
            }
          }
      }
  return s == NG_SUCCESS ? ng_reduce_for_each_variant(ctx, fn, user) : s;
}

ng_status ng_rmsnorm_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user) {
  return for_each_variant(ctx, false, fn, user);
}

ng_status ng_fused_add_rmsnorm_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user) {
  return for_each_variant(ctx, true, fn, user);
}
