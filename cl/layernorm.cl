/* LayerNorm forward and backward (SPEC.md "LayerNorm").
 *
 * Options beyond ng_common.clh: HAS_B and B_DTYPE (forward: a bias is present, and its dtype —
 * the weight's when there is a weight), COMPUTE_DW / COMPUTE_DB (backward: 0 = frozen weight /
 * bias, every line of that gradient compiled out), REG (vector slots per work-item held in
 * registers: the row when it fits, and its dW/dB sums).
 *
 * Same persistent grid as cl/rmsnorm.cl: work-group g handles rows g, g+G, … ; WG = 1 is a row
 * per work-item (CPUs), WG > 1 a row per work-group with local-memory reductions (GPUs). Rows of
 * at most WG·REG vectors are read into registers once; longer rows stream from memory (and
 * cache) once per pass. In the backward both paths sum in the same order, so they give the same
 * bits; the GPU forward of longer rows (ng_layernorm_fwd_stream) merges chunk statistics
 * instead, to read the row once fewer. */

#define XT NG_STORE(DTYPE)
#define WT NG_STORE(W_DTYPE)
#define LDX(p, i) NG_LDV(DTYPE, p, i)
#define STX(p, i, v) NG_STV(DTYPE, p, i, v)
#define LDW(p, i) NG_LDV(W_DTYPE, p, i)

#ifndef HAS_B
#define HAS_B 1
#endif
#ifndef B_DTYPE
#define B_DTYPE W_DTYPE
#endif
#define BT NG_STORE(B_DTYPE)
#ifndef COMPUTE_DW
#define COMPUTE_DW 1
#endif
#ifndef COMPUTE_DB
#define COMPUTE_DB 1
#endif
#ifndef REG
#define REG 1
#endif
#define NEED_PART (COMPUTE_DW || COMPUTE_DB)
/* GPU forward: the weight and bias of the work-item's columns held in registers across rows
 * (2·REG·VEC registers). The host sets it: 16-bit rows in groups of 1024 with two slots
 * (src/ops/layernorm.c says why). */
#ifndef WREG
#define WREG 0
#endif

/* Vector i of the weight and the bias, or 1 and 0 for an absent one (which ln_out_reg does not
 * apply). */
#if HAS_W
#define LN_WV(i) LDW(w, i)
#else
#define LN_WV(i) ((floatV)(1.0f))
#endif
#if HAS_B
#define LN_BV(i) NG_LDV(B_DTYPE, b, i)
#else
#define LN_BV(i) ((floatV)(0.0f))
#endif

/* y for one vector: xhat·w + b, each factor only when present; wv, bv are w and b. */
inline floatV ln_out_reg(floatV v, float mu, float rs, floatV wv, floatV bv) {
  floatV o = (v - mu) * rs;
#if HAS_W
  o = o * wv;
#endif
#if HAS_B
  o = o + bv;
#endif
  return o;
}
inline floatV ln_out(floatV v, float mu, float rs, __global const WT *w, __global const BT *b,
                     uint i) {
  return ln_out_reg(v, mu, rs, LN_WV(i), LN_BV(i));
}

/* CPU shape, chunk j (ng_common.clh): ln_out's math, and the row loop of the forward's
 * software pipeline. One pass over chunk j: writes y of row r (STC_), adds the centred squares of
 * row r+1 (from cache) to `ss` when S1, and the values of row r+2 (from memory) to `sm` when S2. */
inline floatC ln_outc(floatC v, float mu, float rs, __global const WT *w, __global const BT *b,
                      uint j) {
  floatC o = (v - mu) * rs;
#if HAS_W
  o = o * NG_LDC(W_DTYPE, w, j);
#endif
#if HAS_B
  o = o + NG_LDC(B_DTYPE, b, j);
#endif
  return o;
}
#define LN_CPU_LOOP(S1, S2, STC_)                                                                    \
  do {                                                                                               \
    for (uint j = 0; j < nc; j++) {                                                                  \
      if (S2) {                                                                                      \
        NG_PF_MEM(x2, j);                                                                            \
        sm = ng_addc(sm, NG_LDC(DTYPE, x2, j));                                                      \
      }                                                                                              \
      if (S1) ss = ng_sqc(ss, NG_LDC(DTYPE, x1, j) - mu1);                                           \
      STC_(DTYPE, yr, j, ln_outc(NG_LDC(DTYPE, x0, j), mu0, rs0, w, b, j));                          \
    }                                                                                                \
    if (tail) {                                                                                      \
      if (S2) sm += LDX(x2, nv - 1);                                                                 \
      if (S1) {                                                                                      \
        const floatV d = LDX(x1, nv - 1) - mu1;                                                      \
        ss = fma(d, d, ss);                                                                          \
      }                                                                                              \
      STX(yr, nv - 1, ln_out(LDX(x0, nv - 1), mu0, rs0, w, b, nv - 1));                              \
    }                                                                                                \
  } while (0)

/* Streaming rows (GPU shape): a row's statistics from one read of it. Work-item lid takes its
 * vectors lid, lid + WG, … in chunks of LN_CH, forms each chunk's exact two-pass statistics in
 * registers (its mean, then the squares of the deviations from it) and merges them into its
 * running (count, sum, M2) as Chan et al. do, which never forms E[x²] − mean²; the group takes
 * the row's mean from the sum of the sums, then M2 = Σ M2_w + n_w·(mean_w − mean)². Mean and
 * then centred squares in two passes would read the row three times with the output's, the
 * last two from L2.
 * The values are x − K with K the row's first element (exact for values within a factor of two
 * of each other). The merge drops the term 2·n_c·(m_c − mean)·(true chunk mean − m_c), which is
 * the chunk mean's rounding, relative to |m_c|: for a row of mean 1000 and spread 0.1 in f32
 * that took rstd 2.5·10⁻⁵ off; shifted, |m_c| is about the spread (at most √n spreads, since K
 * is one of the row's values). */
#ifndef LN_CH
#define LN_CH 2
#endif
typedef struct {
  float n, s, m2;
} ln_st;
inline ln_st ln_chunk(ln_st a, const floatV *v, uint i0, uint nv) {
  float cs = 0.0f;
  uint c = 0;
#pragma unroll
  for (int k = 0; k < LN_CH; k++)
    if (i0 + (uint)k * WG < nv) {
      cs += ng_hsum(v[k]);
      c++;
    }
  const float cn = (float)(c * VEC), m = cs / cn;
  floatV q = (floatV)(0.0f);
#pragma unroll
  for (int k = 0; k < LN_CH; k++)
    if (i0 + (uint)k * WG < nv) {
      const floatV d = v[k] - m;
      q = fma(d, d, q);
    }
  const float cq = ng_hsum(q);
  if (a.n == 0.0f) return (ln_st){cn, cs, cq};
  const float tn = a.n + cn, d = m - a.s / a.n;
  a.m2 += cq + d * d * (a.n * cn / tn);
  a.s += cs;
  a.n = tn;
  return a;
}
/* this work-item's share of the row's M2 about the row's mean mu */
inline float ln_dev(ln_st a, float mu) {
  if (a.n == 0.0f) return 0.0f;
  const float d = a.s / a.n - mu;
  return fma(a.n * d, d, a.m2);
}

/* Mean first, then the centred sum of squares in a second pass over the row: E[x²] − mean²
 * would cancel catastrophically when |mean| ≫ std. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_layernorm_fwd(__global const XT *x, ulong x_off, __global const WT *w, ulong w_off,
                 __global const BT *b, ulong b_off, __global XT *y, ulong y_off,
                 __global float *mean, ulong mean_off, __global float *rstd, ulong rstd_off,
                 uint rows, uint n, float eps) {
  __local float red[WG];
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  x += x_off;
  y += y_off;
  w += w_off;
  b += b_off;
  mean += mean_off;
  rstd += rstd_off;
#if WG == 1
  /* CPU shape (ng_common.clh): the group's block of rows in a three-stage software pipeline.
   * One loop over the chunks writes y of row r, forms the centred sum of squares of row r+1
   * (read last time, now in cache) and the sum of row r+2 (from memory), so memory streams
   * while the core works and the three sums' dependency chains overlap. Every sum runs in the
   * order of a plain loop over its row. */
  (void)lid;
  (void)red;
  NG_ROW_BLOCK(r0, r1, rows);
  NG_CHUNKS(nc, tail, nv);
  /* A row whose mean is finite has no NaN or Inf x; with every w and b finite it has no NaN
   * input, and it is stored with the rounding without the NaN test (same bits, ng_common.clh). */
  bool wb_ok = true;
  for (uint j = 0; j < nc; j++) {
#if HAS_W
    wb_ok = wb_ok && all(isfinite(NG_LDC(W_DTYPE, w, j)));
#endif
#if HAS_B
    wb_ok = wb_ok && all(isfinite(NG_LDC(B_DTYPE, b, j)));
#endif
  }
  if (tail) {
#if HAS_W
    wb_ok = wb_ok && all(isfinite(LDW(w, nv - 1)));
#endif
#if HAS_B
    wb_ok = wb_ok && all(isfinite(NG_LDV(B_DTYPE, b, nv - 1)));
#endif
  }
  floatV sm = (floatV)(0.0f), ss = (floatV)(0.0f);
  float mu0 = 0.0f, rs0 = 0.0f, mu1 = 0.0f;
  if (r0 < r1) {
    __global const XT *xr = x + (ulong)r0 * n;
    for (uint j = 0; j < nc; j++) sm = ng_addc(sm, NG_LDC(DTYPE, xr, j));
    if (tail) sm += LDX(xr, nv - 1);
    mu1 = ng_hsum(sm) / (float)n;
    sm = (floatV)(0.0f);
  }
  /* k: the row whose centred sum forms now; row k-1 is written, row k+1 summed */
  for (uint k = r0; k < r1; k++) {
    __global const XT *x1 = x + (ulong)k * n, *x0 = x1 - n, *x2 = x1 + n;
    __global XT *yr = y + (ulong)k * n - n;
    const bool s2 = k + 1 < r1;
    if (k == r0) {
      for (uint j = 0; j < nc; j++) {
        if (s2) sm = ng_addc(sm, NG_LDC(DTYPE, x2, j));
        ss = ng_sqc(ss, NG_LDC(DTYPE, x1, j) - mu1);
      }
      if (tail) {
        if (s2) sm += LDX(x2, nv - 1);
        const floatV d = LDX(x1, nv - 1) - mu1;
        ss = fma(d, d, ss);
      }
    } else {
      const bool fast = wb_ok && isfinite(mu0);
      if (s2 && fast) LN_CPU_LOOP(1, 1, NG_STCF);
      else if (s2) LN_CPU_LOOP(1, 1, NG_STC);
      else if (fast) LN_CPU_LOOP(1, 0, NG_STCF);
      else LN_CPU_LOOP(1, 0, NG_STC);
    }
    mu0 = mu1;
    rs0 = rsqrt(ng_hsum(ss) / (float)n + eps);
    mean[k] = mu0;
    rstd[k] = rs0;
    if (s2) mu1 = ng_hsum(sm) / (float)n;
    sm = (floatV)(0.0f);
    ss = (floatV)(0.0f);
  }
  if (r0 < r1) {
    __global const XT *x0 = x + (ulong)(r1 - 1) * n, *x1 = x0, *x2 = x0;
    __global XT *yr = y + (ulong)(r1 - 1) * n;
    if (wb_ok && isfinite(mu0)) LN_CPU_LOOP(0, 0, NG_STCF);
    else LN_CPU_LOOP(0, 0, NG_STC);
  }
#else
  const bool cached = nv <= (uint)(WG * REG);
#if WREG
  /* read once rather than once per row: in f32 they are four times the bytes of a bf16 row, from
   * L2 */
  floatV wv[REG], bv[REG];
#pragma unroll
  for (int k = 0; k < REG; k++) {
    const uint i = lid + (uint)k * WG;
    const bool on = cached && i < nv;
    wv[k] = on ? LN_WV(i) : (floatV)(0.0f);
    bv[k] = on ? LN_BV(i) : (floatV)(0.0f);
  }
#define LN_OUT_K(v, k, i) ln_out_reg(v, mu, rs, wv[k], bv[k])
#else
#define LN_OUT_K(v, k, i) ln_out(v, mu, rs, w, b, i)
#endif
  for (uint r = get_group_id(0); r < rows; r += get_num_groups(0)) {
    __global const XT *xr = x + (ulong)r * n;
    __global XT *yr = y + (ulong)r * n;
    floatV acc = (floatV)(0.0f);
    if (cached) { /* in the storage dtype (ng_common.clh), widened at each use */
      NG_RAWV(DTYPE) xs[REG];
#pragma unroll
      for (int k = 0; k < REG; k++) {
        const uint i = lid + (uint)k * WG;
        xs[k] = i < nv ? NG_LDRV(DTYPE, xr, i) : (NG_RAWV(DTYPE))(0);
      }
#if PREFETCH
      /* the group's next row, so memory is busy through this row's two reductions */
      if (r + get_num_groups(0) < rows) {
        const ulong nx = (ulong)(r + get_num_groups(0)) * n;
#pragma unroll
        for (int k = 0; k < REG; k++) {
          const uint i = lid + (uint)k * WG;
          if (i < nv) NG_PREFETCH(x + nx + (ulong)i * VEC);
        }
      }
#endif
#pragma unroll
      for (int k = 0; k < REG; k++) acc += NG_WIDENV(DTYPE, xs[k]);
      const float mu = ng_wg_sum(ng_hsum(acc), red) / (float)n;
      acc = (floatV)(0.0f);
#pragma unroll
      for (int k = 0; k < REG; k++) {
        const floatV d = NG_WIDENV(DTYPE, xs[k]) - mu;
        if (lid + (uint)k * WG < nv) acc = fma(d, d, acc);
      }
      const float rs = rsqrt(ng_wg_sum(ng_hsum(acc), red) / (float)n + eps);
      if (lid == 0) {
        mean[r] = mu;
        rstd[r] = rs;
      }
      NG_UNROLL_STORES
      for (int k = 0; k < REG; k++) {
        const uint i = lid + (uint)k * WG;
        if (i < nv) STX(yr, i, LN_OUT_K(NG_WIDENV(DTYPE, xs[k]), k, i));
      }
      continue;
    }
    /* The host sends longer rows to ng_layernorm_fwd_stream, so it does not reach this
     * three-pass loop (mean, centred squares, output). It stays because NVIDIA's compiler gives
     * the register-held path above worse code without it: bf16 16384 55.5 → 58.0 µs, f32 16384
     * 124.3 → 127.9 µs, and 12 bytes spilled at REG = 4 (H100, same binary otherwise). */
    for (uint i = lid; i < nv; i += WG) acc += LDX(xr, i);
    const float mu = ng_wg_sum(ng_hsum(acc), red) / (float)n;
    acc = (floatV)(0.0f);
    for (uint i = lid; i < nv; i += WG) {
      const floatV d = LDX(xr, i) - mu;
      acc = fma(d, d, acc);
    }
    const float rs = rsqrt(ng_wg_sum(ng_hsum(acc), red) / (float)n + eps);
    if (lid == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    for (uint i = lid; i < nv; i += WG) STX(yr, i, ln_out(LDX(xr, i), mu, rs, w, b, i));
  }
#endif
}

/* GPU forward of rows longer than the group's registers (the host takes it for them): the
 * statistics of x − K in one read (ln_chunk), K the row's first element, then y from a second
 * read, from L2. A kernel of its own so that its registers do not count against
 * ng_layernorm_fwd's register-held rows: as a branch of that kernel it cost those rows 3–6 %
 * (H100, bf16, 4096 and 16384). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_layernorm_fwd_stream(__global const XT *x, ulong x_off, __global const WT *w, ulong w_off,
                        __global const BT *b, ulong b_off, __global XT *y, ulong y_off,
                        __global float *mean, ulong mean_off, __global float *rstd,
                        ulong rstd_off, uint rows, uint n, float eps) {
#if WG > 1
  __local float red[WG];
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  x += x_off;
  y += y_off;
  w += w_off;
  b += b_off;
  mean += mean_off;
  rstd += rstd_off;
  for (uint r = get_group_id(0); r < rows; r += get_num_groups(0)) {
    __global const XT *xr = x + (ulong)r * n;
    __global XT *yr = y + (ulong)r * n;
    const float kx = NG_LD1(DTYPE, xr, 0);
    ln_st st = {0.0f, 0.0f, 0.0f};
    for (uint i0 = lid; i0 < nv; i0 += LN_CH * WG) {
      floatV v[LN_CH];
#pragma unroll
      for (int k = 0; k < LN_CH; k++) {
        const uint i = i0 + (uint)k * WG;
        v[k] = i < nv ? LDX(xr, i) - kx : (floatV)(0.0f);
      }
      st = ln_chunk(st, v, i0, nv);
    }
    const float my = ng_wg_sum(st.s, red) / (float)n;
    const float mu = kx + my, rs = rsqrt(ng_wg_sum(ln_dev(st, my), red) / (float)n + eps);
    if (lid == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    for (uint i = lid; i < nv; i += WG) STX(yr, i, ln_out(LDX(xr, i), mu, rs, w, b, i));
  }
#else
  (void)x, (void)x_off, (void)w, (void)w_off, (void)b, (void)b_off, (void)y, (void)y_off;
  (void)mean, (void)mean_off, (void)rstd, (void)rstd_off, (void)rows, (void)n, (void)eps;
#endif
}

/* ---- forward of bf16 rows beyond a group's registers, split across groups (GPU) -------------
 * Instead of ng_layernorm_fwd_stream, where the host takes it (LN_FWD_COOP: the program of such a
 * launch, so that no other program holds its local array): as ng_rmsnorm_fwd_coop (cl/rmsnorm.cl),
 * S work-groups share each row, a slice of WG·REG vectors each, held in registers as storage
 * bits, so x is read once, and the slice's weight and bias are read once for all the rows of
 * the set, the weight into local memory and the bias into registers (both in registers took an
 * earlier version to 158 registers, one group per H100 compute unit; both in local memory do not
 * fit beside slices of 256 × 4). The streaming kernel reads them from L2 for every row: 8 bytes
 * of f32 a value against the 4 the row moves to and from memory (H100, bf16, 65536: 70.0 -> 64
 * us without those reads, a measurement). Statistics: each slice forms the exact two-pass sum
 * and M2 of its values of x − K (K the row's first element, as the streaming kernel), and every
 * slice merges the S pairs in slice order (ng_coop_collect), so all get the same mean and rstd:
 * one exchange a row. */
#ifndef LN_FWD_COOP
#define LN_FWD_COOP 0
#endif
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_layernorm_fwd_coop(__global const XT *x, ulong x_off, __global const WT *w, ulong w_off,
                      __global const BT *b, ulong b_off, __global XT *y, ulong y_off,
                      __global float *mean, ulong mean_off, __global float *rstd,
                      ulong rstd_off, uint rows, uint n, float eps,
                      __global volatile uint *sync, ulong sync_off, uint S) {
#if WG > 1 && LN_FWD_COOP
  __local float red[WG];
  __local float4 total[2]; /* in turn, as ng_rmsnorm_fwd_coop */
  const uint lid = get_local_id(0);
#if HAS_W
  __local floatV wl[WG * REG]; /* each work-item's own slots (q·WG + lid): no barrier needed */
#define LN_WL(q) wl[(q) * WG + lid]
#else
#define LN_WL(q) ((floatV)(1.0f))
#endif
#if HAS_B
  floatV bv[REG];
#define LN_BL(q) bv[q]
#else
#define LN_BL(q) ((floatV)(0.0f))
#endif
  const uint nv = n / VEC;
  x += x_off;
  y += y_off;
  w += w_off;
  b += b_off;
  mean += mean_off;
  rstd += rstd_off;
  NG_COOP_PLACE(tk, sync, sync_off, S, sets, k, sl, nv, sw, c0, ce);
  const uint cover = sw * VEC; /* values of a slice; the last one the rest */
  const float cnt = (float)min(cover, n - sl * cover);
#pragma unroll
  for (int q = 0; q < REG; q++) {
    const uint i = c0 + (uint)q * WG;
#if HAS_W
    LN_WL(q) = i < ce ? LN_WV(i) : (floatV)(0.0f);
#endif
#if HAS_B
    LN_BL(q) = i < ce ? LN_BV(i) : (floatV)(0.0f);
#endif
  }
  /* Under NG_COOP_AHEAD (bf16 and f32 rows, on two groups per compute unit for the second
   * slice's registers: ln_fwd_coop_plan) each group publishes its pair for the set's next row
   * before it collects this row's, as ng_rmsnorm_fwd_coop: xs and kx are this row's, xn and kn
   * the next's. Under NG_COOP_LATE (16-bit rows) the next row's pair is formed and published
   * after this row's stores (after its collect, as RMSNorm's, measured 1-2 % slower). */
  NG_RAWV(DTYPE) xs[REG], xn[REG];
  float kx = 0.0f, kn = 0.0f;
#define LN_FWD_LOAD(xv, kv, r_)                                                                    \
  do {                                                                                             \
    __global const XT *xr_ = x + (ulong)(r_) * n;                                                  \
    kv = NG_LD1(DTYPE, xr_, 0);                                                                    \
    NG_SLICE_LOAD1(xv, xr_, c0, ce);                                                               \
    NG_SLICE_PREFETCH1(x, r_, sets, rows, n, c0, ce);                                              \
  } while (0)
#define LN_FWD_SUMS(xv, kv, it_)                                                                   \
  do {                                                                                             \
    floatV acc = (floatV)(0.0f);                                                                   \
    _Pragma("unroll") for (int q = 0; q < REG; q++) if (c0 + (uint)q * WG < ce) acc +=             \
        NG_WIDENV(DTYPE, (xv)[q]) - (kv);                                                          \
    const float su = ng_wg_sum(ng_hsum(acc), red), ms = su / cnt;                                  \
    acc = (floatV)(0.0f);                                                                          \
    _Pragma("unroll") for (int q = 0; q < REG; q++) if (c0 + (uint)q * WG < ce) {                  \
      const floatV d = (NG_WIDENV(DTYPE, (xv)[q]) - (kv)) - ms;                                    \
      acc = fma(d, d, acc);                                                                        \
    }                                                                                              \
    const float m2 = ng_wg_sum(ng_hsum(acc), red);                                                 \
    ng_coop_publish((float4)(su, m2, 0.0f, 0.0f), 2, it_, k, sl, S, sync, sets);                   \
  } while (0)
  if (NG_COOP_AHEAD && k < rows) {
    LN_FWD_LOAD(xs, kx, k);
    LN_FWD_SUMS(xs, kx, 0);
  }
  uint it = 0;
  for (uint r = k; r < rows; r += sets, it++) {
    __global XT *yr = y + (ulong)r * n;
    const bool more = r + sets < rows;
    if (!NG_COOP_AHEAD) {
      LN_FWD_LOAD(xs, kx, r);
      LN_FWD_SUMS(xs, kx, it);
    } else if (more) {
      LN_FWD_LOAD(xn, kn, r + sets);
      if (!NG_COOP_LATE) LN_FWD_SUMS(xn, kn, it + 1);
    }
    const float2 st = ng_coop_collect(2, cover, n, it, k, S, sync, sets, &total[it & 1]).xy;
    const float mu = kx + st.x, rs = rsqrt(st.y / (float)n + eps);
    if (sl == 0 && lid == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    NG_UNROLL_STORES
    for (int q = 0; q < REG; q++) {
      const uint i = c0 + (uint)q * WG;
      if (i < ce) STX(yr, i, ln_out_reg(NG_WIDENV(DTYPE, xs[q]), mu, rs, LN_WL(q), LN_BL(q)));
    }
    if (NG_COOP_AHEAD && more) {
      if (NG_COOP_LATE) LN_FWD_SUMS(xn, kn, it + 1);
#pragma unroll
      for (int q = 0; q < REG; q++) xs[q] = xn[q];
      kx = kn;
    }
  }
#undef LN_FWD_LOAD
#undef LN_FWD_SUMS
  (void)ng_coop_leave(sync, sets, &tk);
#undef LN_WL
#undef LN_BL
#else
  /* not a split launch's program (the CPU shape never takes one) */
  (void)x, (void)x_off, (void)w, (void)w_off, (void)b, (void)b_off, (void)y, (void)y_off;
  (void)mean, (void)mean_off, (void)rstd, (void)rstd_off, (void)rows, (void)n, (void)eps;
  (void)sync, (void)sync_off, (void)S;
#endif
}

/* g = w·dy (dy without a weight) */
#if HAS_W
#define GRAD(d, i) ((d) * LDW(w, i))
#else
#define GRAD(d, i) (d)
#endif
/* dx from g = w·dy (DX_OF; DX from dy d), xhat (xh) and the row's c1, c2, rstd: one expression for every path and
 * every frozen variant, so dx has the same bits whatever is frozen. */
#define DX_OF(g, xh) (((g) - (xh) * c1 - c2) * rs)
#define DX(d, xh, i) DX_OF(GRAD(d, i), xh)

/* The backward's row sums. CPU shape: 8 lanes of partial sums, which LLVM keeps in one SIMD
 * register. GPU shape: one scalar per work-item (each holds only REG vectors of a row), which
 * leaves the registers to the row itself. Both paths of a shape use the same order. */
#if WG == 1
typedef floatV accT;
#define ACC_ADD(a, v) ((a) + (v))
#define ACC_FMA(u, v, a) fma(u, v, a)
#define ACC_SUM(a) ng_hsum(a)
#else
typedef float accT;
#define ACC_ADD(a, v) ((a) + ng_hsum(v))
#define ACC_FMA(u, v, a) ((a) + ng_hsum((u) * (v)))
#define ACC_SUM(a) (a)
#endif

/* CPU shape, chunk j: ln_row_sums's step for the row at dyn/xn (its mean mun, rstd rsn) into
 * a1, a2; and the loop over row r's chunks that writes dx (STC_), adds to the partial rows and,
 * with PIPE, forms the next row's sums. */
#if HAS_W
#define GRADC(d, j) ((d) * NG_LDC(W_DTYPE, w, j))
#else
#define GRADC(d, j) (d)
#endif
/* LN_SUMSC's step from the row's dy and xhat chunks, which the pipelined loop below also needs for
 * the partials */
#define LN_SUMS_OF(dn, xhn, j)                                                                       \
  do {                                                                                               \
    const floatC g_ = GRADC(dn, j);                                                                  \
    a1 = ng_fmac(xhn, g_, a1);                                                                       \
    a2 = ng_addc(a2, g_);                                                                            \
  } while (0)
#define LN_SUMSC(j) LN_SUMS_OF(NG_LDC(DTYPE, dyn, j), (NG_LDC(DTYPE, xn, j) - mun) * rsn, j)
#define LN_SUMS_TAIL()                                                                               \
  do {                                                                                               \
    const floatV xh_ = (LDX(xn, nv - 1) - mun) * rsn, g_ = GRAD(LDX(dyn, nv - 1), nv - 1);           \
    a1 = fma(xh_, g_, a1);                                                                           \
    a2 = a2 + g_;                                                                                    \
  } while (0)
/* Chunk j of the dW and dB partial rows: this row's terms (d, xh) and, with TWO, the next row's
 * (dn, xhn) after them, in one load and store of each partial (the same additions, in the same
 * order, as two rows' updates one after the other). */
#if COMPUTE_DW
#define LN_DW_CPU(j, d, xh, dn, xhn, TWO)                                                            \
  do {                                                                                               \
    floatC p_ = fma(d, xh, NG_LDC(NG_F32, pw, j));                                                   \
    if (TWO) p_ = fma(dn, xhn, p_);                                                                  \
    NG_STC(NG_F32, pw, j, p_);                                                                       \
  } while (0)
#else
#define LN_DW_CPU(j, d, xh, dn, xhn, TWO) ((void)0)
#endif
#if COMPUTE_DB
#define LN_DB_CPU(j, d, dn, TWO)                                                                     \
  do {                                                                                               \
    floatC q_ = NG_LDC(NG_F32, pb, j) + (d);                                                         \
    if (TWO) q_ = q_ + (dn);                                                                         \
    NG_STC(NG_F32, pb, j, q_);                                                                       \
  } while (0)
#else
#define LN_DB_CPU(j, d, dn, TWO) ((void)0)
#endif
/* One vector i of row r: dx and its dW / dB partials (the GPU streaming loop, and the odd last
 * vector of a CPU row). */
#if COMPUTE_DW
#define LN_DW_VEC(i, d, xh) NG_STV(NG_F32, pw, i, fma(d, xh, NG_LDV(NG_F32, pw, i)))
#else
#define LN_DW_VEC(i, d, xh) ((void)0)
#endif
#if COMPUTE_DB
#define LN_DB_VEC(i, d) NG_STV(NG_F32, pb, i, NG_LDV(NG_F32, pb, i) + (d))
#else
#define LN_DB_VEC(i, d) ((void)0)
#endif
#define LN_BWD_VEC(i)                                                                                \
  do {                                                                                               \
    const floatV d = LDX(dyr, i), xh = (LDX(xr, i) - mu) * rs;                                       \
    STX(dxr, i, DX(d, xh, i));                                                                       \
    LN_DW_VEC(i, d, xh);                                                                             \
    LN_DB_VEC(i, d);                                                                                 \
  } while (0)
/* PART: 0 no partials (this row's were added with the row before), 1 this row's, 2 this row's
 * and the next row's, whose terms the PIPE half has at hand: each partial row is loaded and
 * stored once for two rows, the same bits. PoCL, 2-vCPU EPYC, bf16, rows·N = 2^25, with dW and
 * dB, old and new alternating, seven rounds in two runs: 4096 4.67-5.43 -> 4.44-5.03 ms; 1024
 * 4.63-5.19 -> 4.50-5.39 and 16384 4.82-5.68 -> 4.54-5.26, even within the machine's noise.
 * RMSNorm's loop took the same change and was even or slower (1024 4.61-5.24 -> 4.79-5.50 ms,
 * the fused add's at 4096 5.54-6.81 -> 5.80-7.09), so it keeps one update a row. */
#define LN_BWD_CPU_LOOP(PIPE, STC_, PART)                                                            \
  do {                                                                                               \
    for (uint j = 0; j < nc; j++) {                                                                  \
      floatC dn_ = (floatC)(0.0f), xhn_ = (floatC)(0.0f);                                            \
      if (PIPE) {                                                                                    \
        NG_PF_MEM(dyn, j);                                                                           \
        NG_PF_MEM(xn, j);                                                                            \
        dn_ = NG_LDC(DTYPE, dyn, j);                                                                 \
        xhn_ = (NG_LDC(DTYPE, xn, j) - mun) * rsn;                                                   \
        LN_SUMS_OF(dn_, xhn_, j);                                                                    \
      }                                                                                              \
      const floatC d = NG_LDC(DTYPE, dyr, j), xh = (NG_LDC(DTYPE, xr, j) - mu) * rs;                 \
      STC_(DTYPE, dxr, j, DX_OF(GRADC(d, j), xh));                                                   \
      if (PART) {                                                                                    \
        LN_DW_CPU(j, d, xh, dn_, xhn_, PART == 2);                                                   \
        LN_DB_CPU(j, d, dn_, PART == 2);                                                             \
      }                                                                                              \
    }                                                                                                \
  } while (0)

/* (Σ xhat·g, Σ g) over a row, streamed: the one definition of the backward's row sums for rows
 * beyond the registers, shared by the streaming path and ng_layernorm_bwd_dot so both give the
 * same bits (dx must not depend on which gradients are computed). */
inline float2 ln_row_sums(__global const XT *dyr, __global const XT *xr, __global const WT *w,
                          float mu, float rs, uint nv, __local float2 *red) {
  const uint lid = get_local_id(0);
  accT a1 = 0.0f, a2 = 0.0f;
  for (uint i = lid; i < nv; i += WG) {
    const floatV xh = (LDX(xr, i) - mu) * rs, g = GRAD(LDX(dyr, i), i);
    a1 = ACC_FMA(xh, g, a1);
    a2 = ACC_ADD(a2, g);
  }
  return ng_wg_sum2((float2)(ACC_SUM(a1), ACC_SUM(a2)), red);
}

/* dx = (g − xhat·c1 − c2)·rstd with c1 = Σ xhat·g / n, c2 = Σ g / n; this group's partials
 * dW += dy·xhat and dB += dy. Rows of at most WG·REG vectors (`in_regs`) are held in registers,
 * and so are the partials; longer rows stream, with the partials in the group's own rows of
 * `part` (read-modify-write; on CPUs they stay in cache). The two cases are separate loops so
 * that the register arrays are not live in the streaming one. `part` holds G rows of dW
 * partials (when COMPUTE_DW) followed by G rows of dB partials (when COMPUTE_DB); the host sums
 * each section in a fixed order (ng_reduce_partials). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_layernorm_bwd(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
                 __global const WT *w, ulong w_off, __global const float *mean, ulong mean_off,
                 __global const float *rstd, ulong rstd_off, __global XT *dx, ulong dx_off,
                 __global float *part, ulong part_off, uint rows, uint n, NG_FUSED_ARGS) {
  __local float2 red[WG];
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  dy += dy_off;
  x += x_off;
  w += w_off;
  mean += mean_off;
  rstd += rstd_off;
  dx += dx_off;
#if FUSED_RED && NEED_PART && WG > 1
#define LN_FUSED_REDUCE()                                                                            \
  ng_fused_reduce(fsync + fsync_off, part + part_off, n,                                              \
                  part + part_off + (COMPUTE_DW ? (ulong)get_num_groups(0) * n : 0), n, COMPUTE_DW,  \
                  COMPUTE_DB, fdw + fdw_off, fdb + fdb_off, facc, fcw, freducers,                    \
                  (__local float *)red, 2)
#else
#define LN_FUSED_REDUCE() NG_FUSED_UNUSED()
#endif
#if NEED_PART
  __global float *prow = part + part_off + (ulong)get_group_id(0) * n;
#else
  (void)part;
  (void)part_off;
#endif
#if COMPUTE_DW
  __global float *pw = prow;
#endif
#if COMPUTE_DB
  __global float *pb = prow + (COMPUTE_DW ? (ulong)get_num_groups(0) * n : 0);
#endif

#if WG == 1
  /* CPU shape: as the RMSNorm backward (cl/rmsnorm.cl). A contiguous block of rows; the loop
   * that writes row r's dx also forms row r+1's two sums, in ln_row_sums's order (dx keeps its
   * bits), while memory streams that row. */
  (void)lid;
  (void)red;
  NG_ROW_BLOCK(r0, r1, rows);
  NG_CHUNKS(nc, tail, nv);
#if COMPUTE_DW
  NG_ZERO_ROW(pw, nc, tail, nv);
#endif
#if COMPUTE_DB
  NG_ZERO_ROW(pb, nc, tail, nv);
#endif
  /* bf16 rounds without the NaN test unless an f32 input (w, the row's mean or rstd) is NaN: a
   * NaN made from 16-bit inputs has a zero low half, on which both roundings agree. */
  bool w_ok = true;
#if HAS_W
  for (uint j = 0; j < nc; j++) w_ok = w_ok && !any(isnan(NG_LDC(W_DTYPE, w, j)));
  if (tail) w_ok = w_ok && !any(isnan(LDW(w, nv - 1)));
#endif
  floatV a1 = (floatV)(0.0f), a2 = (floatV)(0.0f);
  if (r0 < r1) {
    __global const XT *dyn = dy + (ulong)r0 * n, *xn = x + (ulong)r0 * n;
    const float mun = mean[r0], rsn = rstd[r0];
    for (uint j = 0; j < nc; j++) LN_SUMSC(j);
    if (tail) LN_SUMS_TAIL();
  }
  for (uint r = r0; r < r1; r++) {
    const ulong o = (ulong)r * n;
    __global const XT *dyr = dy + o, *xr = x + o, *dyn = dy + o + n, *xn = x + o + n;
    __global XT *dxr = dx + o;
    const float mu = mean[r], rs = rstd[r];
    const float c1 = ng_div(ng_hsum(a1), (float)n), c2 = ng_div(ng_hsum(a2), (float)n);
    a1 = a2 = (floatV)(0.0f);
    const bool next = r + 1 < r1, fast = w_ok && !isnan(mu) && !isnan(rs);
    const float mun = next ? mean[r + 1] : 0.0f, rsn = next ? rstd[r + 1] : 0.0f;
    /* rows r0, r0 + 2, … add their partials with the next row's */
    const bool added = ((r - r0) & 1) != 0;
    if (fast && next && !added) LN_BWD_CPU_LOOP(1, NG_STCF_NT, 2);
    else if (fast && next) LN_BWD_CPU_LOOP(1, NG_STCF_NT, 0);
    else if (fast && !added) LN_BWD_CPU_LOOP(0, NG_STCF_NT, 1);
    else if (fast) LN_BWD_CPU_LOOP(0, NG_STCF_NT, 0);
    else if (next && !added) LN_BWD_CPU_LOOP(1, NG_STC_NT, 2);
    else if (next) LN_BWD_CPU_LOOP(1, NG_STC_NT, 0);
    else if (!added) LN_BWD_CPU_LOOP(0, NG_STC_NT, 1);
    else LN_BWD_CPU_LOOP(0, NG_STC_NT, 0);
    if (tail) {
      const uint i = nv - 1;
      if (next) LN_SUMS_TAIL();
      LN_BWD_VEC(i);
    }
  }
  NG_NT_FENCE();
  NG_FUSED_UNUSED();
#else
  if (nv <= (uint)(WG * REG)) { /* the row (and its partials) fit in registers */
#if REG == 1 && HAS_W
    /* w read once (one slot per work-item leaves registers to spare for it) */
    const floatV wc0 = lid < nv ? LDW(w, lid) : (floatV)(0.0f);
#define GRAD_REG(d, i) ((d) * wc0)
#else
#define GRAD_REG(d, i) GRAD(d, i)
#endif
#define DX_REG(d, xh, i) DX_OF(GRAD_REG(d, i), xh)
#if COMPUTE_DW
    floatV dwr[REG];
#pragma unroll
    for (int k = 0; k < REG; k++) dwr[k] = (floatV)(0.0f);
#endif
#if COMPUTE_DB
    floatV dbr[REG];
#pragma unroll
    for (int k = 0; k < REG; k++) dbr[k] = (floatV)(0.0f);
#endif
    for (uint r = get_group_id(0); r < rows; r += get_num_groups(0)) {
      __global const XT *dyr = dy + (ulong)r * n;
      __global const XT *xr = x + (ulong)r * n;
      __global XT *dxr = dx + (ulong)r * n;
      const float mu = mean[r], rs = rstd[r];
      /* dy and x held in their storage bits (half the registers of floats for 16-bit rows);
       * xhat is formed from them at each use by the same expression, so with the same bits */
      NG_RAWV(DTYPE) dys[REG], xs[REG];
#pragma unroll
      for (int k = 0; k < REG; k++) {
        const uint i = lid + (uint)k * WG;
        dys[k] = i < nv ? NG_LDRV(DTYPE, dyr, i) : (NG_RAWV(DTYPE))(0);
        xs[k] = i < nv ? NG_LDRV(DTYPE, xr, i) : (NG_RAWV(DTYPE))(0);
      }
#define LN_DY(k) NG_WIDENV(DTYPE, dys[k])
#define LN_XH(k) ((NG_WIDENV(DTYPE, xs[k]) - mu) * rs)
#if PREFETCH && !(COMPUTE_DW && COMPUTE_DB && REG >= 4)
      /* (not with four vectors each of dy, xhat, dW and dB sums per work-item: measured slower
       * on the H100 at N = 16384, where registers are already short, whole op 97.6–98.0 →
       * 101.2–102.7 µs; with one of the two sums frozen it gains) */
      if (r + get_num_groups(0) < rows) {
        const ulong nx = (ulong)(r + get_num_groups(0)) * n;
#pragma unroll
        for (int k = 0; k < REG; k++) {
          const uint i = lid + (uint)k * WG;
          if (i < nv) {
            NG_PREFETCH(dy + nx + (ulong)i * VEC);
            NG_PREFETCH(x + nx + (ulong)i * VEC);
          }
        }
      }
#endif
      accT a1 = 0.0f, a2 = 0.0f;
#pragma unroll
      for (int k = 0; k < REG; k++) {
        const uint i = lid + (uint)k * WG;
        if (i < nv) {
          const floatV g = GRAD_REG(LN_DY(k), i);
          a1 = ACC_FMA(LN_XH(k), g, a1);
          a2 = ACC_ADD(a2, g);
        }
      }
      const float2 sums = ng_wg_sum2((float2)(ACC_SUM(a1), ACC_SUM(a2)), red);
      const float c1 = ng_div(sums.x, (float)n), c2 = ng_div(sums.y, (float)n);
      NG_UNROLL_STORES
      for (int k = 0; k < REG; k++) {
        const uint i = lid + (uint)k * WG;
        if (i < nv) {
          const floatV d = LN_DY(k), xh = LN_XH(k);
          STX(dxr, i, DX_REG(d, xh, i));
#if COMPUTE_DW
          dwr[k] = fma(d, xh, dwr[k]);
#endif
#if COMPUTE_DB
          dbr[k] += d;
#endif
        }
      }
    }
#if NEED_PART
    NG_UNROLL_STORES
    for (int k = 0; k < REG; k++) {
      const uint i = lid + (uint)k * WG;
      if (i < nv) {
#if COMPUTE_DW
        NG_STV(NG_F32, pw, i, dwr[k]);
#endif
#if COMPUTE_DB
        NG_STV(NG_F32, pb, i, dbr[k]);
#endif
      }
    }
#endif
    LN_FUSED_REDUCE();
    return;
  }

#if COMPUTE_DW
  for (uint i = lid; i < nv; i += WG) NG_STV(NG_F32, pw, i, (floatV)(0.0f));
#endif
#if COMPUTE_DB
  for (uint i = lid; i < nv; i += WG) NG_STV(NG_F32, pb, i, (floatV)(0.0f));
#endif
  for (uint r = get_group_id(0); r < rows; r += get_num_groups(0)) {
    __global const XT *dyr = dy + (ulong)r * n;
    __global const XT *xr = x + (ulong)r * n;
    __global XT *dxr = dx + (ulong)r * n;
    const float mu = mean[r], rs = rstd[r];
    const float2 sums = ln_row_sums(dyr, xr, w, mu, rs, nv, red);
    const float c1 = ng_div(sums.x, (float)n), c2 = ng_div(sums.y, (float)n);
    for (uint i = lid; i < nv; i += WG) LN_BWD_VEC(i);
  }
  LN_FUSED_REDUCE();
#endif
}

/* ---- backward with partials for rows too long for registers (GPU shape) ---------------------
 * As in cl/rmsnorm.cl: ng_layernorm_bwd_dot stores each row's (Σ xhat·g, Σ g) in `sums` with
 * ln_row_sums, as the streaming path above (so the same bits as the frozen backward), then
 * ng_layernorm_bwd_cols gives each work-group a block of columns and a share of the rows, with
 * its dW / dB sums in registers, written once to its rows of `part` (rgroups rows of dW, then
 * rgroups rows of dB). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_layernorm_bwd_dot(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
                     __global const WT *w, ulong w_off, __global const float *mean,
                     ulong mean_off, __global const float *rstd, ulong rstd_off,
                     __global float *sums, ulong sums_off, uint rows, uint n) {
  __local float2 red[WG];
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  dy += dy_off;
  x += x_off;
  w += w_off;
  mean += mean_off;
  rstd += rstd_off;
  sums += sums_off;
  for (uint r = get_group_id(0); r < rows; r += get_num_groups(0)) {
    __global const XT *dyr = dy + (ulong)r * n;
    __global const XT *xr = x + (ulong)r * n;
    const float2 s = ln_row_sums(dyr, xr, w, mean[r], rstd[r], nv, red);
    if (lid == 0) {
      sums[2 * (ulong)r] = s.x;
      sums[2 * (ulong)r + 1] = s.y;
    }
  }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_layernorm_bwd_cols(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
                      __global const WT *w, ulong w_off, __global const float *mean,
                      ulong mean_off, __global const float *rstd, ulong rstd_off,
                      __global XT *dx, ulong dx_off, __global const float *sums, ulong sums_off,
                      __global float *part, ulong part_off, uint rows, uint n, uint nblocks) {
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  const uint blk = get_group_id(0) % nblocks, rg = get_group_id(0) / nblocks;
  const uint rgroups = get_num_groups(0) / nblocks;
  dy += dy_off;
  x += x_off;
  w += w_off;
  mean += mean_off;
  rstd += rstd_off;
  dx += dx_off;
  sums += sums_off;
#if COMPUTE_DW
  floatV dwr[REG];
#endif
#if COMPUTE_DB
  floatV dbr[REG];
#endif
#pragma unroll
  for (int k = 0; k < REG; k++) {
#if COMPUTE_DW
    dwr[k] = (floatV)(0.0f);
#endif
#if COMPUTE_DB
    dbr[k] = (floatV)(0.0f);
#endif
  }
  for (uint r = rg; r < rows; r += rgroups) {
    __global const XT *dyr = dy + (ulong)r * n;
    __global const XT *xr = x + (ulong)r * n;
    __global XT *dxr = dx + (ulong)r * n;
    const float mu = mean[r], rs = rstd[r];
    const float c1 = ng_div(sums[2 * (ulong)r], (float)n),
                c2 = ng_div(sums[2 * (ulong)r + 1], (float)n);
#pragma unroll
    for (int k = 0; k < REG; k++) {
      const uint i = blk * (WG * REG) + (uint)k * WG + lid;
      if (i < nv) {
        const floatV d = LDX(dyr, i), xh = (LDX(xr, i) - mu) * rs;
        STX(dxr, i, DX(d, xh, i));
#if COMPUTE_DW
        dwr[k] = fma(d, xh, dwr[k]);
#endif
#if COMPUTE_DB
        dbr[k] += d;
#endif
      }
    }
  }
#if NEED_PART
  __global float *prow = part + part_off + (ulong)rg * n;
#pragma unroll
  for (int k = 0; k < REG; k++) {
    const uint i = blk * (WG * REG) + (uint)k * WG + lid;
    if (i < nv) {
#if COMPUTE_DW
      NG_STV(NG_F32, prow, i, dwr[k]);
#endif
#if COMPUTE_DB
      NG_STV(NG_F32, prow + (COMPUTE_DW ? (ulong)rgroups * n : 0), i, dbr[k]);
#endif
    }
  }
#else
  (void)part;
  (void)part_off;
#endif
}

/* ---- backward of bf16 rows too long for a group's registers, split across groups (GPU) -----
 * As ng_rmsnorm_bwd_coop (cl/rmsnorm.cl): S work-groups share each row, a slice each held in
 * registers as storage bits, and exchange their shares of (Σ xhat·g, Σ g) (ng_common.clh, "rows
 * split across work-groups"), so dy and x are read once. Every frozen variant takes it alike, so
 * dx has the same bits. The dW / dB sums of a group stay in registers for all the rows of its
 * set: `part` holds `sets` rows of dW partials (when COMPUTE_DW), then `sets` rows of dB. */
/* With both gradients the dB sums live in local memory (the group's own 16 KB at 256 × 2, 32 KB
 * at 256 × 4): in registers beside the dW sums and the row they left one group per compute unit,
 * and the kernel at 65536 took 197 us against 160 us for the column split (H100, bf16). The host
 * puts them there with dB alone too where its plan wants the registers (LN_DB_LOCAL = 1:
 * src/ops/layernorm.c, ln_coop_plan). */
/* LN_WLOCAL (set by the host where it fits beside the dB sums): the slice's weight in local
 * memory, read once for all the rows of the set instead of twice a row from L2 (the sums and
 * dx each take g = w·dy): in f32 that is 8 bytes a value against the 6 the row moves to and
 * from memory (H100, bf16, 65536: this kernel without those reads, a measurement, 98.8 -> 89.2
 * us with the weight frozen). The same values, so the same bits. The row-held kernel above
 * gained nothing from it at 4096 and 8192 (bf16 frozen 79.4-80.3 -> 80.7-82.7 us at 4096). */
#ifndef LN_WLOCAL
#define LN_WLOCAL 0
#endif
#ifndef LN_DB_LOCAL
#define LN_DB_LOCAL (COMPUTE_DW && COMPUTE_DB)
#endif
/* LN_BWD_COOP (set by the host for split launches only): the body and its local arrays go only
 * into the programs that launch it, as RMS_BWD_COOP in rmsnorm.cl. */
#ifndef LN_BWD_COOP
#define LN_BWD_COOP 0
#endif
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_layernorm_bwd_coop(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
                      __global const WT *w, ulong w_off, __global const float *mean,
                      ulong mean_off, __global const float *rstd, ulong rstd_off,
                      __global XT *dx, ulong dx_off, __global float *part, ulong part_off,
                      uint rows, uint n, __global volatile uint *sync, ulong sync_off, uint S,
                      NG_COOP_RED_ARGS) {
#if WG > 1 && LN_BWD_COOP
  __local float2 red[WG];
  __local float4 total[2]; /* in turn, as ng_rmsnorm_fwd_coop */
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  dy += dy_off;
  x += x_off;
  w += w_off;
  mean += mean_off;
  rstd += rstd_off;
  dx += dx_off;
  NG_COOP_PLACE(tk, sync, sync_off, S, sets, k, s, nv, sw, c0, ce);
#if COMPUTE_DW
  floatV dwr[REG];
#pragma unroll
  for (int q = 0; q < REG; q++) dwr[q] = (floatV)(0.0f);
#endif
#if LN_DB_LOCAL
  /* each work-item's own slots (q·WG + lid): no barrier needed */
  __local floatV dbl[WG * REG];
#define LN_DBR(q) dbl[(q) * WG + lid]
#elif COMPUTE_DB
  floatV dbr[REG];
#define LN_DBR(q) dbr[q]
#endif
#if COMPUTE_DB
#pragma unroll
  for (int q = 0; q < REG; q++) LN_DBR(q) = (floatV)(0.0f);
#endif
#if LN_WLOCAL && HAS_W
  __local floatV wl[WG * REG]; /* each work-item's own slots (q·WG + lid): no barrier needed */
#pragma unroll
  for (int q = 0; q < REG; q++) {
    const uint i = c0 + (uint)q * WG;
    wl[q * WG + lid] = i < ce ? LDW(w, i) : (floatV)(0.0f);
  }
#define LN_G(d, q, i) ((d) * wl[(q) * WG + lid])
#else
#define LN_G(d, q, i) GRAD(d, i)
#endif
  /* Under NG_COOP_AHEAD (ln_coop_plan, src/ops/layernorm.c) each group publishes its shares of
   * the set's next row before it collects this row's, so the wait for the slowest of up to 16
   * groups overlaps that row's loads (as ng_rmsnorm_fwd_coop): dys, xs, mu and rs are this
   * row's, dyn, xn, mun and rsn the next's. */
  NG_RAWV(DTYPE) dys[REG], xs[REG], dyn[REG], xn[REG];
  float mu = 0.0f, rs = 0.0f, mun = 0.0f, rsn = 0.0f;
#define LN_COOP_NEXT(dyv, xv, muv, rsv, r_, it_)                                                   \
  do {                                                                                             \
    muv = mean[r_], rsv = rstd[r_];                                                                \
    NG_SLICE_LOAD2(dyv, xv, dy + (ulong)(r_) * n, x + (ulong)(r_) * n, c0, ce);                    \
    NG_SLICE_PREFETCH2(dy, x, r_, sets, rows, n, c0, ce);                                          \
    accT a1 = 0.0f, a2 = 0.0f;                                                                     \
    _Pragma("unroll") for (int q = 0; q < REG; q++) {                                              \
      const uint i = c0 + (uint)q * WG;                                                            \
      if (i < ce) {                                                                                \
        const floatV g = LN_G(NG_WIDENV(DTYPE, (dyv)[q]), q, i);                                   \
        a1 = ACC_FMA((NG_WIDENV(DTYPE, (xv)[q]) - (muv)) * (rsv), g, a1);                          \
        a2 = ACC_ADD(a2, g);                                                                       \
      }                                                                                            \
    }                                                                                              \
    const float2 mine = ng_wg_sum2((float2)(ACC_SUM(a1), ACC_SUM(a2)), red);                       \
    ng_coop_publish((float4)(mine, 0.0f, 0.0f), 2, it_, k, s, S, sync, sets);                      \
  } while (0)
  if (NG_COOP_AHEAD && k < rows) LN_COOP_NEXT(dys, xs, mu, rs, k, 0);
  uint it = 0;
  for (uint r = k; r < rows; r += sets, it++) {
    __global XT *dxr = dx + (ulong)r * n;
    if (!NG_COOP_AHEAD) LN_COOP_NEXT(dys, xs, mu, rs, r, it);
    else if (r + sets < rows) LN_COOP_NEXT(dyn, xn, mun, rsn, r + sets, it + 1);
    const float2 sums = ng_coop_collect(2, 0, 0, it, k, S, sync, sets, &total[it & 1]).xy;
    const float c1 = ng_div(sums.x, (float)n), c2 = ng_div(sums.y, (float)n);
    NG_UNROLL_STORES
    for (int q = 0; q < REG; q++) {
      const uint i = c0 + (uint)q * WG;
      if (i < ce) {
        const floatV d = NG_WIDENV(DTYPE, dys[q]), xh = (NG_WIDENV(DTYPE, xs[q]) - mu) * rs;
        STX(dxr, i, DX_OF(LN_G(d, q, i), xh)); /* DX's expression */
#if COMPUTE_DW
        dwr[q] = fma(d, xh, dwr[q]);
#endif
#if COMPUTE_DB
        LN_DBR(q) += d;
#endif
      }
    }
    if (NG_COOP_AHEAD && r + sets < rows) {
#pragma unroll
      for (int q = 0; q < REG; q++) dys[q] = dyn[q], xs[q] = xn[q];
      mu = mun, rs = rsn;
    }
  }
#undef LN_COOP_NEXT
#if NEED_PART
  __global float *prow = part + part_off + (ulong)k * n;
  NG_UNROLL_STORES
  for (int q = 0; q < REG; q++) {
    const uint i = c0 + (uint)q * WG;
    if (i < ce) {
#if COMPUTE_DW
      NG_STV(NG_F32, prow, i, dwr[q]);
#endif
#if COMPUTE_DB
      NG_STV(NG_F32, prow + (COMPUTE_DW ? (ulong)sets * n : 0), i, LN_DBR(q));
#endif
    }
  }
#else
  (void)part;
  (void)part_off;
#endif
#if FUSED_RED && NEED_PART
  /* the sets' partial rows summed here rather than by a separate launch */
  __global const float *pw = part + part_off;
  ng_coop_reduce(sync, sets, &tk, pw, n, pw + (COMPUTE_DW ? (ulong)sets * n : 0), n, COMPUTE_DW,
                 COMPUTE_DB, fdw + fdw_off, fdb + fdb_off, facc, fcw, freducers,
                 (__local float *)red, 2);
#else
  NG_COOP_RED_UNUSED();
  (void)ng_coop_leave(sync, sets, &tk);
#endif
#else
  /* the CPU shape never takes this kernel: a row held by one work-item streams (above) */
  (void)dy, (void)dy_off, (void)x, (void)x_off, (void)w, (void)w_off, (void)mean, (void)mean_off;
  (void)rstd, (void)rstd_off, (void)dx, (void)dx_off, (void)part, (void)part_off, (void)rows;
  (void)n, (void)sync, (void)sync_off, (void)S;
  NG_COOP_RED_UNUSED();
#endif
}
#undef LN_G
