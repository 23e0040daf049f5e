/* RMSNorm forward and backward (SPEC.md "RMSNorm"), and fused add + RMSNorm (SPEC.md "Fused add
 * + RMSNorm"), which is the same math applied to s = rd(x + residual).
 *
 * Options beyond ng_common.clh: COMPUTE_DW (backward: 0 = frozen weight, every dW line compiled
 * out), REG (vector slots per work-item whose dW sums stay in registers), FUSED_ADD (forward:
 * form, store and normalize s = rd(x + residual) instead of x), HAS_DS (backward: add the
 * gradient ds_out that reaches s from later layers into dx). Without ds_out the fused backward is
 * exactly this RMSNorm backward run on s, so it shares the program.
 *
 * Both kernels run a persistent grid: work-group g handles rows g, g+G, … . With WG = 1 a row is
 * one work-item's loop (the CPU shape); otherwise WG work-items share a row and reduce through
 * local memory (the GPU shape). */

#define XT NG_STORE(DTYPE)
#define WT NG_STORE(W_DTYPE)
#define LDX(p, i) NG_LDV(DTYPE, p, i)
#define STX(p, i, v) NG_STV(DTYPE, p, i, v)
#define LDW(p, i) NG_LDV(W_DTYPE, p, i)
#define RDX(v) NG_RDV(DTYPE, v)

#ifndef COMPUTE_DW
#define COMPUTE_DW 1
#endif
#ifndef REG
#define REG 1
#endif
#ifndef FUSED_ADD
#define FUSED_ADD 0
#endif
#ifndef HAS_DS
#define HAS_DS 0
#endif
/* GPU forward: w' of the work-item's columns held in registers across rows (it costs REG·VEC
 * registers, which a row of REG > 2 slots cannot spare beside its own) */
#ifndef WREG
#define WREG (REG <= 2)
#endif
#define RAWX NG_RAWV(DTYPE)
#define WIDX(r) NG_WIDENV(DTYPE, r)
/* GPU backward, rows in registers: dy and x held in their storage bits (RAW_ROWS; half the
 * registers of floats for 16-bit rows) and widened at each use, which gives the same values,
 * or as floats. The host sets it (src/ops/rmsnorm.c says where each measured faster). */
#ifndef RAW_ROWS
#define RAW_ROWS 0
#endif
#if RAW_ROWS
#define BWD_ROWT RAWX
#define BWD_LD(p, i) NG_LDRV(DTYPE, p, i)
#define BWD_WIDEN(r) WIDX(r)
#else
#define BWD_ROWT floatV
#define BWD_LD(p, i) LDX(p, i)
#define BWD_WIDEN(r) (r)
#endif

/* w' = offset + w, or 1 without a weight. */
#if HAS_W
#define WPRIME(w, i, offset) ((floatV)(offset) + LDW(w, i))
#else
#define WPRIME(w, i, offset) ((floatV)(1.0f))
#endif

/* y for one vector of x (the casting modes of SPEC.md). */
inline floatV rms_out(floatV v, float rs, floatV wp, int mode) {
  if (mode == NG_CAST_GEMMA) return v * rs * wp;
  if (mode == NG_CAST_NONE && HAS_W) wp = RDX(wp);
  return RDX(v * rs) * wp;
}

#if FUSED_ADD
/* The first read of a row element: s = rd(x + residual), stored (it is the next residual), in
 * its storage bits; LOAD_IN widens them, which is rd(x + residual) exactly. The norm is of the
 * stored, rounded s; a second pass reads s back (each work-item its own elements, so no barrier
 * is needed): one read instead of two. */
inline RAWX fa_sum_raw(__global const XT *xr, __global const XT *resr, __global XT *sr, uint i) {
  const RAWX v = NG_NARROWV(DTYPE, LDX(xr, i) + LDX(resr, i));
  NG_STRV(DTYPE, sr, i, v);
  return v;
}
#define LOAD_RAW(i) fa_sum_raw(xr, resr, sr, i)
#define LOAD_IN(i) WIDX(LOAD_RAW(i))
#define RMS_FWD ng_fused_add_rmsnorm_fwd
#else
#define LOAD_IN(i) LDX(xr, i)
#define LOAD_RAW(i) NG_LDRV(DTYPE, xr, i)
#define RMS_FWD ng_rmsnorm_fwd
#endif

/* CPU shape, chunk j (ng_common.clh): w', the first read of the input, and the loop over one
 * row's chunks that writes y (rms_out's math, rounding with RDC_ / storing with STC_) and, with
 * PIPE, forms the next row's sum of squares in `acc`. */
#if HAS_W
#define WPRIMEC(j) ((floatC)(offset) + NG_LDC(W_DTYPE, w, j))
#else
#define WPRIMEC(j) ((floatC)(1.0f))
#endif
#if FUSED_ADD
inline floatC fa_sumc(__global const XT *xr, __global const XT *resr, __global XT *sr, uint j) {
  const floatC v = NG_RDC(DTYPE, NG_LDC(DTYPE, xr, j) + NG_LDC(DTYPE, resr, j));
  NG_STCT(DTYPE, sr, j, v); /* already exact in the dtype */
  return v;
}
#define LOAD_INC(j) fa_sumc(xr, resr, sr, j)
#define RMS_PF_IN(j)                                                                                 \
  do {                                                                                               \
    NG_PF_MEM(xr, j);                                                                                \
    NG_PF_MEM(resr, j);                                                                              \
  } while (0)
#else
#define LOAD_INC(j) NG_LDC(DTYPE, xr, j)
#define RMS_PF_IN(j) NG_PF_MEM(xr, j)
#endif
/* RMSNorm's forward asks for w' a few chunks ahead: w' (f32, 4·n bytes) and the three row
 * streams, about 10·n bytes a row, no longer stay in L1 from n ≈ 4096 on, and the loads of w'
 * miss it. PoCL on a 2-vCPU AMD EPYC (48 KB L1 a core), bf16, rows·n = 2^25, four or five
 * alternating runs: 4096 3.61-3.91 -> 3.07-3.56 ms, 16384 4.16-4.31 -> 3.82-4.29, 1024 and 2048
 * even. With w' held in L1 (a measurement build, wrong results) 4096 took 2.45-3.23. The fused
 * add's forward (more streams) and LayerNorm's (w and b) measured even or slower with it, so they
 * do not. */
#if HAS_W && !FUSED_ADD
#define RMS_PF(j) NG_PF_CHUNK(w, j)
#else
#define RMS_PF(j) ((void)0)
#endif
#define RMS_CPU_LOOP(PIPE, RDC_, STC_)                                                               \
  do {                                                                                               \
    for (uint j = 0; j < nc; j++) {                                                                  \
      if (PIPE) {                                                                                    \
        RMS_PF_IN(j);                                                                                \
        acc = ng_sqc(acc, LOAD_INC(j));                                                              \
      }                                                                                              \
      RMS_PF(j);                                                                                     \
      const floatC wp = WPRIMEC(j), xv = NG_LDC(DTYPE, cur, j);                                      \
      floatC out;                                                                                    \
      if (mode == NG_CAST_GEMMA) out = xv * rs * wp;                                                 \
      else out = RDC_(DTYPE, xv * rs) * (mode == NG_CAST_NONE && HAS_W ? RDC_(DTYPE, wp) : wp);     \
      STC_(DTYPE, yr, j, out);                                                                       \
    }                                                                                                \
  } while (0)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
RMS_FWD(__global const XT *x, ulong x_off,
#if FUSED_ADD
        __global const XT *res, ulong res_off, __global XT *s, ulong s_off,
#endif
        __global const WT *w, ulong w_off, __global XT *y, ulong y_off, __global float *rstd,
        ulong rstd_off, uint rows, uint n, float eps, float offset, int mode) {
  __local float red[WG];
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  x += x_off;
#if FUSED_ADD
  res += res_off;
  s += s_off;
#endif
  y += y_off;
  w += w_off;
  rstd += rstd_off;
#if WG == 1
  /* CPU shape (ng_common.clh): the group's block of rows, software-pipelined. The loop that
   * writes row r (its input now in cache) also reads row r+1 from memory and forms its sum of
   * squares, so memory streams the next row while the core does this row's rounding work,
   * instead of idling through a second pass. Each row's sum runs in the order of a plain loop
   * over the row. */
  (void)lid;
  (void)red;
  NG_ROW_BLOCK(r0, r1, rows);
  NG_CHUNKS(nc, tail, nv);
  /* A row whose rstd is finite and > 0 has only finite x (a non-finite x makes the sum of
   * squares Inf or NaN); if also every w' (as rms_out uses it) is finite, the row has no NaN
   * input and takes the rounding without the NaN test (same bits, ng_common.clh). */
  bool w_ok = true;
#if HAS_W
  for (uint j = 0; j < nc; j++) {
    floatC wp = WPRIMEC(j);
    if (mode == NG_CAST_NONE) wp = NG_RDC(DTYPE, wp);
    w_ok = w_ok && all(isfinite(wp));
  }
  if (tail) {
    floatV wp = WPRIME(w, nv - 1, offset);
    if (mode == NG_CAST_NONE) wp = RDX(wp);
    w_ok = w_ok && all(isfinite(wp));
  }
#endif
  floatV acc = (floatV)(0.0f);
  if (r0 < r1) {
    __global const XT *xr = x + (ulong)r0 * n;
#if FUSED_ADD
    __global const XT *resr = res + (ulong)r0 * n;
    __global XT *sr = s + (ulong)r0 * n;
#endif
    for (uint j = 0; j < nc; j++) acc = ng_sqc(acc, LOAD_INC(j));
    if (tail) {
      const floatV v = LOAD_IN(nv - 1);
      acc = fma(v, v, acc);
    }
  }
  for (uint r = r0; r < r1; r++) {
    const ulong o = (ulong)r * n;
    float rs = rsqrt(ng_hsum(acc) / (float)n + eps);
    if (mode == NG_CAST_NONE) rs = NG_RD1(DTYPE, rs);
    rstd[r] = rs;
    acc = (floatV)(0.0f);
    __global XT *yr = y + o;
    /* this row's input, and (through LOAD_IN) the next row's */
#if FUSED_ADD
    __global const XT *cur = s + o;
    __global const XT *xr = x + o + n, *resr = res + o + n;
    __global XT *sr = s + o + n;
#else
    __global const XT *cur = x + o;
    __global const XT *xr = x + o + n;
#endif
    const bool next = r + 1 < r1, fast = w_ok && rs > 0.0f && isfinite(rs);
    if (fast && next) RMS_CPU_LOOP(1, NG_RDCF, NG_STCF);
    else if (fast) RMS_CPU_LOOP(0, NG_RDCF, NG_STCF);
    else if (next) RMS_CPU_LOOP(1, NG_RDC, NG_STC);
    else RMS_CPU_LOOP(0, NG_RDC, NG_STC);
    if (tail) {
      if (next) {
        const floatV v = LOAD_IN(nv - 1);
        acc = fma(v, v, acc);
      }
      STX(yr, nv - 1, rms_out(LDX(cur, nv - 1), rs, WPRIME(w, nv - 1, offset), mode));
    }
  }
#else
  /* Rows of at most WG·REG vectors are held in registers, in their storage dtype: all of a
   * work-item's loads are issued before the first use, and the row is read from memory once.
   * The sums run in the same order as the streaming loop below, so both paths give the same
   * bits. */
  const bool cached = nv <= (uint)(WG * REG);
#if WREG
  /* w' of this work-item's columns, read once rather than once per row (an L2 read as large
   * as the row itself in f32) */
  floatV wc[REG];
#pragma unroll
  for (int k = 0; k < REG; k++) {
    const uint i = lid + (uint)k * WG;
    wc[k] = cached && i < nv ? WPRIME(w, i, offset) : (floatV)(0.0f);
  }
#define WC(k, i) wc[k]
#else
#define WC(k, i) WPRIME(w, i, offset)
#endif
  for (uint r = get_group_id(0); r < rows; r += get_num_groups(0)) {
    __global const XT *xr = x + (ulong)r * n;
    __global XT *yr = y + (ulong)r * n;
#if FUSED_ADD
    __global const XT *resr = res + (ulong)r * n;
    __global XT *sr = s + (ulong)r * n;
#endif
    floatV acc = (floatV)(0.0f);
    if (cached) {
      RAWX xs[REG];
#pragma unroll
      for (int k = 0; k < REG; k++) {
        const uint i = lid + (uint)k * WG;
        xs[k] = i < nv ? LOAD_RAW(i) : (RAWX)(0);
      }
#if PREFETCH
      if (r + get_num_groups(0) < rows) {
        const ulong nx = (ulong)(r + get_num_groups(0)) * n;
#pragma unroll
        for (int k = 0; k < REG; k++) {
          const uint i = lid + (uint)k * WG;
          if (i < nv) {
            NG_PREFETCH(x + nx + (ulong)i * VEC);
#if FUSED_ADD
            NG_PREFETCH(res + nx + (ulong)i * VEC);
#endif
          }
        }
      }
#endif
#pragma unroll
      for (int k = 0; k < REG; k++) {
        const floatV v = WIDX(xs[k]);
        acc = fma(v, v, acc);
      }
      const float ss = ng_wg_sum(ng_hsum(acc), red);
      float rs = rsqrt(ss / (float)n + eps);
      if (mode == NG_CAST_NONE) rs = NG_RD1(DTYPE, rs);
      if (lid == 0) rstd[r] = rs;
      NG_UNROLL_STORES
      for (int k = 0; k < REG; k++) {
        const uint i = lid + (uint)k * WG;
        if (i < nv) STX(yr, i, rms_out(WIDX(xs[k]), rs, WC(k, i), mode));
      }
      continue;
    }
    for (uint i = lid; i < nv; i += WG) {
      floatV v = LOAD_IN(i);
      acc = fma(v, v, acc);
    }
#if FUSED_ADD
    xr = sr;
#endif
    const float ss = ng_wg_sum(ng_hsum(acc), red);
    float rs = rsqrt(ss / (float)n + eps);
    if (mode == NG_CAST_NONE) rs = NG_RD1(DTYPE, rs);
    if (lid == 0) rstd[r] = rs;
    for (uint i = lid; i < nv; i += WG) STX(yr, i, rms_out(LDX(xr, i), rs, WPRIME(w, i, offset), mode));
  }
#endif
}

/* ---- forward of bf16 rows too long for a group's registers, split across groups (GPU) ------
 * The kernel above holds rows of up to WG·REG vectors (16384 bf16 elements in its 1024 × 2) and
 * streams longer ones twice, the second time from L2. Here S work-groups of 256 share each row,
 * a slice of WG·REG vectors each, held in registers as storage bits, and exchange their shares
 * of Σ x² (ng_common.clh, "rows split across work-groups"), so x is read once; every slice adds
 * the S shares in slice order and gets the same rstd. RMSNorm only: the fused add's stores of s
 * made it slower split than streamed (src/ops/rmsnorm.c). */
#if !FUSED_ADD
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_rmsnorm_fwd_coop(__global const XT *x, ulong x_off, __global const WT *w, ulong w_off,
                    __global XT *y, ulong y_off, __global float *rstd, ulong rstd_off, uint rows,
                    uint n, float eps, float offset, int mode, __global volatile uint *sync,
                    ulong sync_off, uint S) {
#if WG > 1
  __local float red[WG];
  /* the collected sums, two buffers in turn: the last row is collected without a work-group sum
   * (and its barriers) between it and the row before */
  __local float4 total[2];
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  x += x_off;
  y += y_off;
  w += w_off;
  rstd += rstd_off;
  NG_COOP_PLACE(tk, sync, sync_off, S, sets, k, sl, nv, sw, c0, ce);
  /* w' of the slice, read once for all the rows of the set. Read per row instead, the kernel
   * took 40 registers instead of 103 but 64.5 us instead of 57.4 at 32768 (H100, bf16), and
   * grids of 3-6 groups per compute unit did not win it back. */
  floatV wc[REG];
#pragma unroll
  for (int q = 0; q < REG; q++) {
    const uint i = c0 + (uint)q * WG;
    wc[q] = i < ce ? WPRIME(w, i, offset) : (floatV)(0.0f);
  }
  /* Under NG_COOP_AHEAD (bf16 and f32 rows, src/ops/rmsnorm.c) each group publishes its share of
   * the set's next row before it collects this row's, so the wait for the set's slowest group
   * overlaps that row's loads: xs holds this row's slice, xn the next row's. Without it each row
   * is loaded, published and collected in turn (f16 rows: the second slice took 58.6 -> 93 us at
   * 65536 on the H100). Under NG_COOP_LATE (bf16) the next row's sum is formed and published
   * after this row's collect, before its stores: the loads wait beside the collect. */
  RAWX xs[REG], xn[REG];
#define RMS_COOP_LOAD(xv, r_)                                                                      \
  do {                                                                                             \
    NG_SLICE_LOAD1(xv, x + (ulong)(r_) * n, c0, ce);                                               \
    /* the set's row after it, asked of L2 meanwhile (without it: 57.5 -> 73.3 us at 32768) */     \
    NG_SLICE_PREFETCH1(x, r_, sets, rows, n, c0, ce);                                              \
  } while (0)
#define RMS_COOP_SUMS(xv, it_)                                                                     \
  do {                                                                                             \
    floatV acc = (floatV)(0.0f);                                                                   \
    _Pragma("unroll") for (int q = 0; q < REG; q++) {                                              \
      const floatV v = WIDX((xv)[q]);                                                              \
      acc = fma(v, v, acc);                                                                        \
    }                                                                                              \
    const float mine = ng_wg_sum(ng_hsum(acc), red);                                               \
    ng_coop_publish((float4)(mine, 0.0f, 0.0f, 0.0f), 1, it_, k, sl, S, sync, sets);             \
  } while (0)
  if (NG_COOP_AHEAD && k < rows) {
    RMS_COOP_LOAD(xs, k);
    RMS_COOP_SUMS(xs, 0);
  }
  uint it = 0;
  for (uint r = k; r < rows; r += sets, it++) {
    __global XT *yr = y + (ulong)r * n;
    const bool more = r + sets < rows;
    if (!NG_COOP_AHEAD) {
      RMS_COOP_LOAD(xs, r);
      RMS_COOP_SUMS(xs, it);
    } else if (more) {
      RMS_COOP_LOAD(xn, r + sets);
      if (!NG_COOP_LATE) RMS_COOP_SUMS(xn, it + 1);
    }
    const float ss = ng_coop_collect(1, 0, 0, it, k, S, sync, sets, &total[it & 1]).x;
    if (NG_COOP_LATE && more) RMS_COOP_SUMS(xn, it + 1);
    float rs = rsqrt(ss / (float)n + eps);
    if (mode == NG_CAST_NONE) rs = NG_RD1(DTYPE, rs);
    if (sl == 0 && lid == 0) rstd[r] = rs;
    NG_UNROLL_STORES
    for (int q = 0; q < REG; q++) {
      const uint i = c0 + (uint)q * WG;
      if (i < ce) STX(yr, i, rms_out(WIDX(xs[q]), rs, wc[q], mode));
    }
    if (NG_COOP_AHEAD && more) {
#pragma unroll
      for (int q = 0; q < REG; q++) xs[q] = xn[q];
    }
  }
#undef RMS_COOP_LOAD
#undef RMS_COOP_SUMS
  (void)ng_coop_leave(sync, sets, &tk);
#else
  /* the CPU shape never takes this kernel: a row held by one work-item streams (above) */
  (void)x, (void)x_off, (void)w, (void)w_off, (void)y, (void)y_off, (void)rstd, (void)rstd_off;
  (void)rows, (void)n, (void)eps, (void)offset, (void)mode, (void)sync, (void)sync_off, (void)S;
#endif
}
#endif

/* dx = rstd·m − (rstd³/n)·(Σ m·x)·x (+ ds_out) with m = dy·w'; dW partial of this group
 * += dy·xhat. With FUSED_ADD's s in place of x this is also the fused op's backward.
 * dW partials: in registers (REG slots of VEC columns per work-item) when the row fits, else in
 * the group's own row of `part` (read-modify-write; on CPUs it stays in cache). Either way the
 * group writes its row of `part` and ng_reduce_partials sums the rows in a fixed order. */
/* Σ dy·w'·x over a row, streamed: the one definition of the backward's row sum for rows beyond
 * the registers, shared by the streaming path and ng_rmsnorm_bwd_dot so both give the same bits
 * (dx must not depend on whether dW is computed). */
inline float rms_row_dot(__global const XT *dyr, __global const XT *xr, __global const WT *w,
                         float offset, uint nv, __local float *red) {
  const uint lid = get_local_id(0);
  floatV acc = (floatV)(0.0f);
  for (uint i = lid; i < nv; i += WG) {
    const floatV m = LDX(dyr, i) * WPRIME(w, i, offset);
    acc = fma(m, LDX(xr, i), acc);
  }
  return ng_wg_sum(ng_hsum(acc), red);
}

#if HAS_DS
#define RMS_BWD ng_fused_add_rmsnorm_bwd
#define DX_OUT(i, v) ((v) + LDX(dsr, i))
#define DX_OUTC(j, v) ((v) + NG_LDC(DTYPE, dsr, j))
#define RMS_PF_DS(j) NG_PF_MEM(dsr, j)
#else
#define RMS_BWD ng_rmsnorm_bwd
#define DX_OUT(i, v) (v)
#define DX_OUTC(j, v) (v)
#define RMS_PF_DS(j) ((void)0)
#endif
/* dx before ds_out from dy d, w' wp and x xv, with the row's rstd rs and c; and x̂ as dW takes it
 * (rounded to the dtype in the llama mode; RD_ is NG_RDC for chunks, NG_RDV for vectors). One
 * expression for every path, so dx and dW have the same bits whichever runs. */
#define RMS_DX(d, wp, xv) (rs * ((d) * (wp)) - c * (xv))
#define RMS_XH(RD_, xv) (mode == NG_CAST_LLAMA ? RD_(DTYPE, (xv) * rs) : (xv) * rs)

/* CPU shape, chunk j: rms_row_dot's sum step for the row at dyn/xn, and the loop over one row's
 * chunks that writes dx (rounding with RDC_ / storing with STC_), adds to the dW partial row and,
 * with PIPE, forms the next row's sum in `acc`. */
#define RMS_DOTC(acc, j) ng_fmac(NG_LDC(DTYPE, dyn, j) * WPRIMEC(j), NG_LDC(DTYPE, xn, j), acc)
#if COMPUTE_DW
#define RMS_DW_CPU(j, d, xv, RDC_)                                                                   \
  NG_STC(NG_F32, prow, j, fma(d, RMS_XH(RDC_, xv), NG_LDC(NG_F32, prow, j)))
#else
#define RMS_DW_CPU(j, d, xv, RDC_) ((void)0)
#endif
#define RMS_BWD_CPU_LOOP(PIPE, RDC_, STC_)                                                           \
  do {                                                                                               \
    for (uint j = 0; j < nc; j++) {                                                                  \
      if (PIPE) {                                                                                    \
        NG_PF_MEM(dyn, j);                                                                           \
        NG_PF_MEM(xn, j);                                                                            \
        acc = RMS_DOTC(acc, j);                                                                      \
      }                                                                                              \
      RMS_PF_DS(j);                                                                                  \
      const floatC d = NG_LDC(DTYPE, dyr, j), xv = NG_LDC(DTYPE, xr, j);                             \
      STC_(DTYPE, dxr, j, DX_OUTC(j, RMS_DX(d, WPRIMEC(j), xv)));                                    \
      RMS_DW_CPU(j, d, xv, RDC_);                                                                    \
    }                                                                                                \
  } while (0)
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
RMS_BWD(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
        __global const WT *w, ulong w_off, __global const float *rstd, ulong rstd_off,
        __global XT *dx, ulong dx_off, __global float *part, ulong part_off, uint rows, uint n,
        float offset, int mode, NG_FUSED_ARGS
#if HAS_DS
        , __global const XT *ds, ulong ds_off
#endif
) {
  __local float red[WG];
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  dy += dy_off;
  x += x_off;
  w += w_off;
  rstd += rstd_off;
  dx += dx_off;
#if HAS_DS
  ds += ds_off;
#endif
  const bool in_regs = nv <= (uint)(WG * REG); /* the row (and its dW sums) fit in registers */
#if REG == 1
  /* w' read once (with one slot per work-item there are registers to spare for it) */
  const floatV wc0 = in_regs && lid < nv ? WPRIME(w, lid, offset) : (floatV)(0.0f);
#define WP_REG(k, i) wc0
#else
#define WP_REG(k, i) WPRIME(w, i, offset)
#endif
#if WG == 1
  /* CPU shape: the forward's treatment (ng_common.clh). The group takes a contiguous block of
   * rows; the loop that writes row r's dx also reads row r+1 from memory and forms its row sum,
   * so the second pass over a row runs from cache while memory streams the next one. The row
   * sum runs in the order of rms_row_dot (the same bits as before and as the GPU's streaming
   * path), and the dW partial row stays in cache across the block. */
  (void)lid;
  (void)red;
  NG_ROW_BLOCK(r0, r1, rows);
  NG_CHUNKS(nc, tail, nv);
#if COMPUTE_DW
  __global float *prow = part + part_off + (ulong)get_group_id(0) * n;
  NG_ZERO_ROW(prow, nc, tail, nv);
#else
  (void)part;
  (void)part_off;
#endif
  /* The rounding without its NaN test (NG_RDCF) gives the full rounding's bits unless a NaN with
   * a non-zero low half reaches it. A 16-bit input widens with a zero low half and arithmetic
   * keeps an input NaN's payload (or makes the default NaN), so only the f32 inputs can bring
   * one: every w' of the group and the row's rstd are checked for NaN. */
  bool w_ok = true;
#if HAS_W
  for (uint j = 0; j < nc; j++) w_ok = w_ok && !any(isnan(WPRIMEC(j)));
  if (tail) w_ok = w_ok && !any(isnan(WPRIME(w, nv - 1, offset)));
#endif
  floatV acc = (floatV)(0.0f);
  if (r0 < r1) {
    __global const XT *dyn = dy + (ulong)r0 * n, *xn = x + (ulong)r0 * n;
    for (uint j = 0; j < nc; j++) acc = RMS_DOTC(acc, j);
    if (tail) acc = fma(LDX(dyn, nv - 1) * WPRIME(w, nv - 1, offset), LDX(xn, nv - 1), acc);
  }
  for (uint r = r0; r < r1; r++) {
    const ulong o = (ulong)r * n;
    __global const XT *dyr = dy + o, *xr = x + o, *dyn = dy + o + n, *xn = x + o + n;
    __global XT *dxr = dx + o;
#if HAS_DS
    __global const XT *dsr = ds + o;
#endif
    const float rs = rstd[r];
    const float c = (rs * rs * rs) * ng_div(ng_hsum(acc), (float)n);
    acc = (floatV)(0.0f);
    const bool next = r + 1 < r1, fast = w_ok && !isnan(rs);
    if (fast && next) RMS_BWD_CPU_LOOP(1, NG_RDCF, NG_STCF_NT);
    else if (fast) RMS_BWD_CPU_LOOP(0, NG_RDCF, NG_STCF_NT);
    else if (next) RMS_BWD_CPU_LOOP(1, NG_RDC, NG_STC_NT);
    else RMS_BWD_CPU_LOOP(0, NG_RDC, NG_STC_NT);
    if (tail) {
      const uint i = nv - 1;
      if (next) acc = fma(LDX(dyn, i) * WPRIME(w, i, offset), LDX(xn, i), acc);
      const floatV d = LDX(dyr, i), xv = LDX(xr, i);
      STX(dxr, i, DX_OUT(i, RMS_DX(d, WPRIME(w, i, offset), xv)));
#if COMPUTE_DW
      NG_STV(NG_F32, prow, i, fma(d, RMS_XH(NG_RDV, xv), NG_LDV(NG_F32, prow, i)));
#endif
    }
  }
  NG_NT_FENCE();
#else
#if COMPUTE_DW
  floatV dwr[REG];
#pragma unroll
  for (int k = 0; k < REG; k++) dwr[k] = (floatV)(0.0f);
  __global float *prow = part + part_off + (ulong)get_group_id(0) * n;
  if (!in_regs)
    for (uint i = lid; i < nv; i += WG) NG_STV(NG_F32, prow, i, (floatV)(0.0f));
#else
  (void)part;
  (void)part_off;
  (void)mode;
#endif
  for (uint r = get_group_id(0); r < rows; r += get_num_groups(0)) {
    __global const XT *dyr = dy + (ulong)r * n;
    __global const XT *xr = x + (ulong)r * n;
    __global XT *dxr = dx + (ulong)r * n;
#if HAS_DS
    __global const XT *dsr = ds + (ulong)r * n;
#endif
    const float rs = rstd[r];
    floatV acc = (floatV)(0.0f);
    if (in_regs) {
      BWD_ROWT dys[REG], xs[REG];
#pragma unroll
      for (int k = 0; k < REG; k++) {
        const uint i = lid + (uint)k * WG;
        dys[k] = i < nv ? BWD_LD(dyr, i) : (BWD_ROWT)(0);
        xs[k] = i < nv ? BWD_LD(xr, i) : (BWD_ROWT)(0);
      }
#if PREFETCH
      if (r + get_num_groups(0) < rows) {
        const ulong nx = (ulong)(r + get_num_groups(0)) * n;
#pragma unroll
        for (int k = 0; k < REG; k++) {
          const uint i = lid + (uint)k * WG;
          if (i < nv) {
            NG_PREFETCH(dy + nx + (ulong)i * VEC);
            NG_PREFETCH(x + nx + (ulong)i * VEC);
#if HAS_DS
            NG_PREFETCH(ds + nx + (ulong)i * VEC);
#endif
          }
        }
      }
#endif
#pragma unroll
      for (int k = 0; k < REG; k++) {
        const uint i = lid + (uint)k * WG;
        if (i < nv) acc = fma(BWD_WIDEN(dys[k]) * WP_REG(k, i), BWD_WIDEN(xs[k]), acc);
      }
      const float dot = ng_wg_sum(ng_hsum(acc), red);
      const float c = (rs * rs * rs) * ng_div(dot, (float)n);
      NG_UNROLL_STORES
      for (int k = 0; k < REG; k++) {
        const uint i = lid + (uint)k * WG;
        if (i < nv) {
          const floatV d = BWD_WIDEN(dys[k]), xv = BWD_WIDEN(xs[k]);
          STX(dxr, i, DX_OUT(i, RMS_DX(d, WP_REG(k, i), xv)));
#if COMPUTE_DW
          dwr[k] = fma(d, RMS_XH(NG_RDV, xv), dwr[k]);
#endif
        }
      }
      continue;
    }
    const float dot = rms_row_dot(dyr, xr, w, offset, nv, red);
    const float c = (rs * rs * rs) * ng_div(dot, (float)n);
    for (uint i = lid; i < nv; i += WG) {
      const floatV d = LDX(dyr, i), xv = LDX(xr, i);
      STX(dxr, i, DX_OUT(i, RMS_DX(d, WPRIME(w, i, offset), xv)));
#if COMPUTE_DW
      NG_STV(NG_F32, prow, i, fma(d, RMS_XH(NG_RDV, xv), NG_LDV(NG_F32, prow, i)));
#endif
    }
  }
#if COMPUTE_DW
  if (in_regs) {
    NG_UNROLL_STORES
    for (int k = 0; k < REG; k++) {
      const uint i = lid + (uint)k * WG;
      if (i < nv) NG_STV(NG_F32, prow, i, dwr[k]);
    }
  }
#endif
#endif
#if FUSED_RED && COMPUTE_DW && WG > 1
  ng_fused_reduce(fsync + fsync_off, part + part_off, n, part, 0, true, false, fdw + fdw_off, fdb,
                  facc, fcw, freducers, red, 1);
#else
  NG_FUSED_UNUSED();
#endif
}

/* ---- backward with dW for rows too long for registers (GPU shape) ---------------------------
 * A 65536-wide row's dW sums would fill a compute unit's whole register file, so here the work
 * is split by columns instead: ng_rmsnorm_bwd_dot puts each row's Σ dy·w'·x in `dots` (with
 * rms_row_dot, as the streaming path above, so the same bits), then ng_rmsnorm_bwd_cols gives
 * each work-group a block of columns and a share of the rows: its dW sums stay in registers for
 * all of them and are written to its row of `part` once. dy and x are read twice, which still
 * beats the per-row read-modify-write of partial rows it replaces. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_rmsnorm_bwd_dot(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
                   __global const WT *w, ulong w_off, __global float *dots, ulong dots_off,
                   uint rows, uint n, float offset) {
  __local float red[WG];
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  dy += dy_off;
  x += x_off;
  w += w_off;
  dots += dots_off;
  for (uint r = get_group_id(0); r < rows; r += get_num_groups(0)) {
    const float dot = rms_row_dot(dy + (ulong)r * n, x + (ulong)r * n, w, offset, nv, red);
    if (lid == 0) dots[r] = dot;
  }
}

#if HAS_DS
#define RMS_COLS ng_fused_add_rmsnorm_bwd_cols
#else
#define RMS_COLS ng_rmsnorm_bwd_cols
#endif
/* Group g: column block g % nblocks (WG·REG vectors), rows g / nblocks, + rgroups, … */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
RMS_COLS(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
         __global const WT *w, ulong w_off, __global const float *rstd, ulong rstd_off,
         __global XT *dx, ulong dx_off, __global const float *dots, ulong dots_off,
         __global float *part, ulong part_off, uint rows, uint n, float offset, int mode,
         uint nblocks
#if HAS_DS
         , __global const XT *ds, ulong ds_off
#endif
) {
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  const uint blk = get_group_id(0) % nblocks, rg = get_group_id(0) / nblocks;
  const uint rgroups = get_num_groups(0) / nblocks;
  dy += dy_off;
  x += x_off;
  w += w_off;
  rstd += rstd_off;
  dx += dx_off;
  dots += dots_off;
#if HAS_DS
  ds += ds_off;
#endif
  floatV wc[REG], dwr[REG];
#pragma unroll
  for (int k = 0; k < REG; k++) {
    const uint i = blk * (WG * REG) + (uint)k * WG + lid;
    wc[k] = i < nv ? WPRIME(w, i, offset) : (floatV)(0.0f);
    dwr[k] = (floatV)(0.0f);
  }
  for (uint r = rg; r < rows; r += rgroups) {
    __global const XT *dyr = dy + (ulong)r * n;
    __global const XT *xr = x + (ulong)r * n;
    __global XT *dxr = dx + (ulong)r * n;
#if HAS_DS
    __global const XT *dsr = ds + (ulong)r * n;
#endif
    const float rs = rstd[r];
    const float c = (rs * rs * rs) * ng_div(dots[r], (float)n);
#pragma unroll
    for (int k = 0; k < REG; k++) {
      const uint i = blk * (WG * REG) + (uint)k * WG + lid;
      if (i < nv) {
        const floatV d = LDX(dyr, i), xv = LDX(xr, i);
        STX(dxr, i, DX_OUT(i, RMS_DX(d, wc[k], xv)));
        dwr[k] = fma(d, RMS_XH(NG_RDV, xv), dwr[k]);
      }
    }
  }
  __global float *prow = part + part_off + (ulong)rg * n;
#pragma unroll
  for (int k = 0; k < REG; k++) {
    const uint i = blk * (WG * REG) + (uint)k * WG + lid;
    if (i < nv) NG_STV(NG_F32, prow, i, dwr[k]);
  }
}

/* ---- backward of bf16 rows too long for a group's registers, split across groups (GPU) -----
 * The column split above reads dy and x twice. Here S work-groups share each row, a slice of
 * WG·REG vectors each, held in registers as storage bits, and exchange their shares of Σ dy·w'·x
 * (ng_common.clh, "rows split across work-groups"): dy and x are read once, and a group's dW
 * sums stay in registers for all the rows of its set (one partial row per set). */
#if HAS_DS
#define RMS_COOP ng_fused_add_rmsnorm_bwd_coop
#else
#define RMS_COOP ng_rmsnorm_bwd_coop
#endif
/* With HAS_DS, ds_out is loaded with dy and x, so that it is in flight through the wait (H100,
 * bf16, fused add frozen, loaded at its use -> early: 32768 135 -> 116 us, 65536 136 -> 115 us).
 * The dW sums live in local memory: in registers the kernel sits near 128 of them, past which
 * only one group fits an H100 compute unit, and small edits crossed that line (RMSNorm at 65536
 * with dW: 127 registers 96 us, 147 registers 156 us; in local memory 97 registers, 97 us; with
 * ds_out in registers too, 190 us against 148 with ds loaded at its use). */
/* RMS_BWD_COOP (set by the host for split launches only): the body, and with it the dW sums'
 * WG·REG·32 bytes of local memory, goes only into the programs that launch it. In every backward
 * program it made a held 512 × 4 launch's program need 66 KB of local memory, which a device
 * with 64 KB (AMD, Intel) would refuse to build although the kernel is never launched there. */
#ifndef RMS_BWD_COOP
#define RMS_BWD_COOP 0
#endif
#ifndef RMS_WLOCAL
#define RMS_WLOCAL 0
#endif
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
RMS_COOP(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
         __global const WT *w, ulong w_off, __global const float *rstd, ulong rstd_off,
         __global XT *dx, ulong dx_off, __global float *part, ulong part_off, uint rows, uint n,
         float offset, int mode, __global volatile uint *sync, ulong sync_off, uint S,
         NG_COOP_RED_ARGS
#if HAS_DS
         , __global const XT *ds, ulong ds_off
#endif
) {
#if WG > 1 && RMS_BWD_COOP
  __local float red[WG];
  __local float4 total[2]; /* in turn, as ng_rmsnorm_fwd_coop */
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  dy += dy_off;
  x += x_off;
  w += w_off;
  rstd += rstd_off;
  dx += dx_off;
#if HAS_DS
  ds += ds_off;
#endif
  NG_COOP_PLACE(tk, sync, sync_off, S, sets, k, s, nv, sw, c0, ce);
#if RMS_WLOCAL
  /* w' in local memory (both passes of src/ops/rmsnorm.c's rms_bwd_plan), which frees the
   * registers for a third group per compute unit frozen, a fourth with dW; each work-item's own
   * slots, no barrier */
  __local floatV wl[WG * REG];
#define RMS_WC(q) wl[(q) * WG + lid]
#else
  floatV wc[REG];
#define RMS_WC(q) wc[q]
#endif
#if COMPUTE_DW
  __local floatV dwl[WG * REG]; /* each work-item's own slots (q·WG + lid): no barrier needed */
#define RMS_DWR(q) dwl[(q) * WG + lid]
#endif
#pragma unroll
  for (int q = 0; q < REG; q++) {
    const uint i = c0 + (uint)q * WG;
    RMS_WC(q) = i < ce ? WPRIME(w, i, offset) : (floatV)(0.0f);
#if COMPUTE_DW
    RMS_DWR(q) = (floatV)(0.0f);
#endif
  }
  /* Under NG_COOP_AHEAD (RMSNorm's bf16 and f32 rows, src/ops/rmsnorm.c) each group publishes
   * its share of the set's next row before it collects this row's, as ng_rmsnorm_fwd_coop: dys and
   * xs hold this row's slices, dyn and xn the next's. Not with ds_out, whose slice RMS_BWD_NEXT loads
   * beside the row's (the host never asks for both). */
#if NG_COOP_AHEAD && HAS_DS
#error "NG_COOP_AHEAD with HAS_DS"
#endif
  RAWX dys[REG], xs[REG], dyn[REG], xn[REG];
#if HAS_DS
  RAWX dss[REG];
#define RMS_BWD_DS(r_)                                                                             \
  do {                                                                                             \
    NG_SLICE_LOAD1(dss, ds + (ulong)(r_) * n, c0, ce);                                             \
    NG_SLICE_PREFETCH1(ds, r_, sets, rows, n, c0, ce);                                             \
  } while (0)
#else
#define RMS_BWD_DS(r_) ((void)0)
#endif
#define RMS_BWD_NEXT(dyv, xv, r_, it_)                                                             \
  do {                                                                                             \
    NG_SLICE_LOAD2(dyv, xv, dy + (ulong)(r_) * n, x + (ulong)(r_) * n, c0, ce);                    \
    NG_SLICE_PREFETCH2(dy, x, r_, sets, rows, n, c0, ce);                                          \
    RMS_BWD_DS(r_);                                                                                \
    floatV acc = (floatV)(0.0f);                                                                   \
    _Pragma("unroll") for (int q = 0; q < REG; q++) acc =                                          \
        fma(WIDX((dyv)[q]) * RMS_WC(q), WIDX((xv)[q]), acc);                                       \
    const float mine = ng_wg_sum(ng_hsum(acc), red);                                               \
    ng_coop_publish((float4)(mine, 0.0f, 0.0f, 0.0f), 2, it_, k, s, S, sync, sets);               \
  } while (0)
  if (NG_COOP_AHEAD && k < rows) RMS_BWD_NEXT(dys, xs, k, 0);
  uint it = 0;
  for (uint r = k; r < rows; r += sets, it++) {
    __global XT *dxr = dx + (ulong)r * n;
    if (!NG_COOP_AHEAD) RMS_BWD_NEXT(dys, xs, r, it);
    else if (r + sets < rows) RMS_BWD_NEXT(dyn, xn, r + sets, it + 1);
    const float dot = ng_coop_collect(2, 0, 0, it, k, S, sync, sets, &total[it & 1]).x;
    const float rs = rstd[r];
    const float c = (rs * rs * rs) * ng_div(dot, (float)n);
    NG_UNROLL_STORES
    for (int q = 0; q < REG; q++) {
      const uint i = c0 + (uint)q * WG;
      if (i < ce) {
        const floatV d = WIDX(dys[q]), xv = WIDX(xs[q]);
#if HAS_DS
        STX(dxr, i, RMS_DX(d, RMS_WC(q), xv) + WIDX(dss[q])); /* DX_OUT's sum: the same bits */
#else
        STX(dxr, i, DX_OUT(i, RMS_DX(d, RMS_WC(q), xv)));
#endif
#if COMPUTE_DW && !RMS_WLOCAL
        RMS_DWR(q) = fma(d, RMS_XH(NG_RDV, xv), RMS_DWR(q));
#endif
      }
    }
#if COMPUTE_DW && RMS_WLOCAL
    /* The dW sums in a loop of their own, after the row's dx: in the loop above, beside the next
     * row's bits, NVIDIA's compiler gave the kernel 98 registers, here 80 (64 with the reducers'
     * eight rows in flight), so that four groups fit a compute unit (H200, bf16: 65536 85.9-86.6 ->
     * 78.7-79.0 us, src/ops/rmsnorm.c). The same additions in the same order: the same bits. */
#pragma unroll
    for (int q = 0; q < REG; q++)
      if (c0 + (uint)q * WG < ce)
        RMS_DWR(q) = fma(WIDX(dys[q]), RMS_XH(NG_RDV, WIDX(xs[q])), RMS_DWR(q));
#endif
    if (NG_COOP_AHEAD && r + sets < rows) {
#pragma unroll
      for (int q = 0; q < REG; q++) dys[q] = dyn[q], xs[q] = xn[q];
    }
  }
#undef RMS_BWD_NEXT
#undef RMS_BWD_DS
#undef RMS_WC
#if COMPUTE_DW
  __global float *prow = part + part_off + (ulong)k * n;
  NG_UNROLL_STORES
  for (int q = 0; q < REG; q++) {
    const uint i = c0 + (uint)q * WG;
    if (i < ce) NG_STV(NG_F32, prow, i, RMS_DWR(q));
  }
#else
  (void)part;
  (void)part_off;
  (void)mode;
#endif
#if FUSED_RED && COMPUTE_DW
  /* the sets' partial rows summed here rather than by a separate launch */
  ng_coop_reduce(sync, sets, &tk, part + part_off, n, part, 0, true, false, fdw + fdw_off, fdb,
                 facc, fcw, freducers, red, 1);
  (void)fdb_off;
#else
  NG_COOP_RED_UNUSED();
  (void)ng_coop_leave(sync, sets, &tk);
#endif
#else
  /* the CPU shape never takes this kernel: a row held by one work-item streams (above) */
  (void)dy, (void)dy_off, (void)x, (void)x_off, (void)w, (void)w_off, (void)rstd, (void)rstd_off;
  (void)dx, (void)dx_off, (void)part, (void)part_off, (void)rows, (void)n, (void)offset;
  (void)mode, (void)sync, (void)sync_off, (void)S;
  NG_COOP_RED_UNUSED();
#if HAS_DS
  (void)ds, (void)ds_off;
#endif
#endif
}
