/* GroupNorm forward and backward (SPEC.md "GroupNorm").
 *
 * x is [B, C, S]; group g of batch b is the contiguous block blk = b·G + g of n = Cg·S elements
 * (Cg = C/G channels). The work is cut into units, U per block: k whole channels of the group
 * (P = 1), or one piece of at most Ls elements of one channel (k = 1, P pieces per channel).
 * Either way a unit is one contiguous range.
 *  - U = 1 (`split` = 0): one kernel computes a block's statistics and then runs the elementwise
 *    pass over the same block while it is still in cache.
 *  - U > 1 (few large blocks): the first kernel writes one partial per unit to `part`, the second
 *    merges the block's U partials in unit order and runs the elementwise pass. Every unit of a
 *    block merges the same values in the same order, so all of them agree bit for bit.
 *  - One pass (GPU forward, SLOTS > 0, see below): units held in registers exchange their
 *    statistics through global memory, so x is read once.
 *  - Held blocks (GPU, U = 1, SLOTS > 0, see below): a work-group holds a whole block in its
 *    registers, so x (and dy) are read once and no group waits for another.
 * Persistent grid: work-group i handles units i, i + groups, … . WG = 1 is a unit per work-item
 * (the CPU shape), WG > 1 a unit per work-group with local-memory reductions (the GPU shape).
 *
 * Options beyond ng_common.clh: BWD (1 builds the backward kernels, 0 the forward ones: a
 * program holds only the pass it is built for), COMPUTE_DW, COMPUTE_DB (backward; 0 compiles
 * that parameter's per-channel sums out). The parameters' dtype and whether weight and bias exist
 * are kernel arguments: they are read once per channel, so a build per combination would buy
 * nothing. */

#define XT NG_STORE(DTYPE)
#define LDX(p, i) NG_LDV(DTYPE, p, i)
#define STX(p, i, v) NG_STV(DTYPE, p, i, v)

#ifndef BWD
#define BWD 0
#endif
#ifndef COMPUTE_DW
#define COMPUTE_DW 1
#endif
#ifndef COMPUTE_DB
#define COMPUTE_DB 1
#endif
/* SLOTS > 0 (GPU, vector rows): also build the one-pass and held kernels, WG·SLOTS vectors per
 * work-group held in registers */
#ifndef SLOTS
#define SLOTS 0
#endif
/* Vectors per work-item chunk of the statistics pass: a chunk's mean and squared deviations are
 * formed in registers (an exact two-pass over the chunk), then merged into running statistics. */
#if WG == 1
#define CHV (VEC == 8 ? 8 : 32)
#else
#define CHV (VEC == 8 ? 2 : 4)
#endif

/* One parameter element of runtime dtype `dt` (element index i). */
inline float gn_ld_param(__global const uchar *p, ulong i, int dt) {
  if (dt == NG_F32) return ((__global const float *)p)[i];
  if (dt == NG_F16) return vload_half(i, (__global const half *)p);
  return ng_bf16_to_f32(((__global const ushort *)p)[i]);
}
inline void gn_st_param(__global uchar *p, ulong i, int dt, float v) {
  if (dt == NG_F32) ((__global float *)p)[i] = v;
  else if (dt == NG_F16) vstore_half_rte(v, i, (__global half *)p);
  else ((__global ushort *)p)[i] = ng_f32_to_bf16(v);
}
/* A gradient element v, in its dtype, added to what the buffer holds with acc. */
inline void gn_grad_put(__global uchar *p, ulong i, int dt, int acc, float v) {
  gn_st_param(p, i, dt, acc ? gn_ld_param(p, i, dt) + v : v);
}

/* ---- statistics: count, compensated sum (hi + lo), sum of squared deviations from the mean ----
 * Merging two sets (Chan et al.) keeps M2 free of the E[x²] − mean² cancellation; the sum is
 * carried as an unevaluated pair (two-sum) so the mean of millions of elements with a large
 * offset stays within about an ulp. */
typedef struct gn_st {
  uint n;
  float hi, lo, m2;
} gn_st;

inline gn_st gn_merge(gn_st a, gn_st b) {
  if (b.n == 0) return a;
  if (a.n == 0) return b;
  const float na = (float)a.n, nb = (float)b.n, nn = (float)(a.n + b.n);
  const float d = (b.hi + b.lo) / nb - (a.hi + a.lo) / na;
  gn_st r;
  r.n = a.n + b.n;
  r.m2 = a.m2 + b.m2 + d * d * (na * (nb / nn));
  const float s = a.hi + b.hi, bv = s - a.hi;
  r.hi = s;
  r.lo = (a.lo + b.lo) + ((a.hi - (s - bv)) + (b.hi - bv));
  return r;
}

/* Statistics of the chunk v[0..CHV) (entries with valid[q] = 0 are ignored). */
inline gn_st gn_chunk(const floatV *v, uint cnt, float sum, const bool *valid) {
  gn_st c;
  c.n = cnt;
  c.hi = sum;
  c.lo = 0.0f;
  const float cm = sum / (float)cnt;
  floatV m2 = (floatV)(0.0f);
#pragma unroll
  for (int q = 0; q < CHV; q++) {
    const floatV d = v[q] - cm;
    if (valid[q]) m2 = fma(d, d, m2);
  }
  c.m2 = ng_hsum(m2);
  return c;
}

/* Merge the work-group's statistics in a fixed tree order; every work-item gets the result. */
inline gn_st gn_wg_merge(gn_st s, __local uint *ln, __local float *lh, __local float *ll,
                         __local float *lm) {
#if WG == 1
  (void)ln, (void)lh, (void)ll, (void)lm;
  return s;
#else
  const uint lid = get_local_id(0);
  ln[lid] = s.n, lh[lid] = s.hi, ll[lid] = s.lo, lm[lid] = s.m2;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint w = WG / 2; w > 0; w >>= 1) {
    if (lid < w) {
      gn_st a = {ln[lid], lh[lid], ll[lid], lm[lid]};
      gn_st b = {ln[lid + w], lh[lid + w], ll[lid + w], lm[lid + w]};
      a = gn_merge(a, b);
      ln[lid] = a.n, lh[lid] = a.hi, ll[lid] = a.lo, lm[lid] = a.m2;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  gn_st r = {ln[0], lh[0], ll[0], lm[0]};
  barrier(CLK_LOCAL_MEM_FENCE); /* the arrays are reused by the next unit */
  return r;
#endif
}

/* Statistics of the contiguous range x[0 .. nv·VEC), merged over the work-group. Work-item lid
 * takes vectors lid, lid + WG, … in chunks of CHV, so each load round is coalesced. */
inline gn_st gn_range_stats(__global const XT *x, uint nv, __local uint *ln, __local float *lh,
                            __local float *ll, __local float *lm) {
  const uint lid = get_local_id(0);
  gn_st run = {0u, 0.0f, 0.0f, 0.0f};
  const uint step = WG * CHV;
  const uint full = nv / step * step;
  bool all[CHV];
#pragma unroll
  for (int q = 0; q < CHV; q++) all[q] = true;
  for (uint base = 0; base < full; base += step) {
    floatV v[CHV];
    floatV acc = (floatV)(0.0f);
#pragma unroll
    for (int q = 0; q < CHV; q++) {
      v[q] = LDX(x, base + (uint)q * WG + lid);
      acc += v[q];
    }
    run = gn_merge(run, gn_chunk(v, CHV * VEC, ng_hsum(acc), all));
  }
  if (full < nv) {
    floatV v[CHV];
    bool ok[CHV];
    floatV acc = (floatV)(0.0f);
    uint cnt = 0;
#pragma unroll
    for (int q = 0; q < CHV; q++) {
      const uint i = full + (uint)q * WG + lid;
      ok[q] = i < nv;
      v[q] = ok[q] ? LDX(x, i) : (floatV)(0.0f);
      acc += v[q];
      cnt += ok[q] ? VEC : 0;
    }
    if (cnt) run = gn_merge(run, gn_chunk(v, cnt, ng_hsum(acc), ok));
  }
  return gn_wg_merge(run, ln, lh, ll, lm);
}

#if WG == 1
/* ---- CPU statistics: per lane ------------------------------------------------------------------
 * gn_range_stats merges a scalar (count, sum, M2) every chunk of CHV vectors: two horizontal sums
 * and three divisions in one dependent chain, which bounds a CPU core well below its memory
 * bandwidth. Here each lane of a floatC keeps statistics of its own: chunks of GN_K values per
 * lane (an exact two-pass over GN_K registers, whose mean is a multiplication by the exact
 * 1/GN_K) merge into the lane's running (sum hi + lo, M2) with the same formulas as gn_merge, in
 * vector instructions; all lanes hold the same count, so the merge weights are scalars. The lanes
 * meet once per range, in a fixed order, and the vectors after the last whole chunk go through
 * gn_range_stats. */
#define GN_K 8
#define GN_L (NG_CH * VEC) /* lanes per floatC */
/* CPU y of a chunk v, with the channel's wc, bc in scope; and whether it may take the bf16
 * rounding without the NaN test: no f32 operand is NaN (see ng_common.clh) */
#define GN_Y(v) (((v) - mean) * rs * wc + bc)
#define GN_Y_FAST() (!isnan(wc) && !isnan(bc) && !isnan(mean) && !isnan(rs))

/* One chunk of GN_K floatC per lane into the running lane statistics (na values per lane). */
inline void gn_lanes_add(floatC *hi, floatC *lo, floatC *m2, float *na, const floatC *v) {
  const floatC sum = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  const floatC cm = sum * (1.0f / GN_K);
  floatC cm2 = (floatC)(0.0f);
#pragma unroll
  for (int q = 0; q < GN_K; q++) {
    const floatC d = v[q] - cm;
    cm2 = fma(d, d, cm2);
  }
  if (*na == 0.0f) {
    *hi = sum, *lo = (floatC)(0.0f), *m2 = cm2;
  } else {
    const float nn = *na + GN_K;
    const floatC d = cm - (*hi + *lo) / *na;
    *m2 = *m2 + cm2 + d * d * (*na * (GN_K / nn));
    const floatC t = *hi + sum, bv = t - *hi;
    *lo = *lo + ((*hi - (t - bv)) + (sum - bv));
    *hi = t;
  }
  *na += GN_K;
}

/* The lanes merged in a fixed tree, then the vectors of x[0 .. nv·VEC) after the `full` whole
 * chunks through gn_range_stats. */
inline gn_st gn_lanes_done(floatC hi, floatC lo, floatC m2, float na, __global const XT *x,
                           uint full, uint nv) {
  const uint done = full * GN_K * NG_CH;
  const gn_st rest = done < nv ? gn_range_stats(x + (ulong)done * VEC, nv - done, 0, 0, 0, 0)
                               : (gn_st){0u, 0.0f, 0.0f, 0.0f};
  if (na == 0.0f) return rest;
  float fh[GN_L], fl[GN_L], fm[GN_L];
#if GN_L == 16
  vstore16(hi, 0, fh), vstore16(lo, 0, fl), vstore16(m2, 0, fm);
#elif GN_L == 8
  vstore8(hi, 0, fh), vstore8(lo, 0, fl), vstore8(m2, 0, fm);
#else
  fh[0] = hi, fl[0] = lo, fm[0] = m2;
#endif
  gn_st ln[GN_L];
#pragma unroll
  for (int l = 0; l < GN_L; l++) ln[l] = (gn_st){(uint)na, fh[l], fl[l], fm[l]};
#pragma unroll
  for (int w = GN_L / 2; w > 0; w >>= 1)
#pragma unroll
    for (int l = 0; l < w; l++) ln[l] = gn_merge(ln[l], ln[l + w]);
  return gn_merge(ln[0], rest);
}

/* Statistics of x[0 .. nv·VEC): whole chunks per lane, the rest through gn_range_stats. */
inline gn_st gn_range_stats_lanes(__global const XT *x, uint nv) {
  const uint full = nv / (GN_K * NG_CH);
  floatC hi = (floatC)(0.0f), lo = (floatC)(0.0f), m2 = (floatC)(0.0f);
  float na = 0.0f; /* values per lane so far: exact below 2^24 */
  for (uint k = 0; k < full; k++) {
    floatC v[GN_K];
#pragma unroll
    for (int q = 0; q < GN_K; q++) v[q] = NG_LDC(DTYPE, x, k * GN_K + q);
    gn_lanes_add(&hi, &lo, &m2, &na, v);
  }
  return gn_lanes_done(hi, lo, m2, na, x, full, nv);
}

/* Pipelined forward step: y of the block at xc (its channels' chunks cpc at a time, starting at
 * channel ch) while the statistics of the next block, at xn, are formed in the same walk: the
 * apply works from cache while the memory system streams the next block in. Needs whole chunks
 * per channel (S a multiple of NG_CH·VEC). Returns the next block's statistics, the same values
 * gn_range_stats_lanes gives. */
inline gn_st gn_apply_next(__global const XT *xc, __global XT *yc, __global const XT *xn, uint nch,
                           uint cpc, uint ch, float mean, float rs, __global const uchar *w,
                           ulong w_off, __global const uchar *b, ulong b_off, int pdt, int has_w,
                           int has_b) {
  const uint nv = nch * cpc * NG_CH, nc = nch * cpc;
  const uint full = nv / (GN_K * NG_CH);
  floatC hi = (floatC)(0.0f), lo = (floatC)(0.0f), m2 = (floatC)(0.0f);
  float na = 0.0f;
  uint rem = 0; /* chunks left in channel ch − 1 */
  float wc = 0.0f, bc = 0.0f;
  bool fast = false;
  ch--; /* the first chunk moves to the block's first channel */
#define GN_APPLY_CHUNK(j)                                                                          \
  do {                                                                                             \
    if (rem == 0) {                                                                                \
      ch++;                                                                                        \
      rem = cpc;                                                                                   \
      wc = has_w ? gn_ld_param(w, w_off + ch, pdt) : 1.0f;                                         \
      bc = has_b ? gn_ld_param(b, b_off + ch, pdt) : 0.0f;                                         \
      fast = !isnan(wc) && !isnan(bc) && !isnan(mean) && !isnan(rs);                               \
    }                                                                                              \
    rem--;                                                                                         \
    NG_PF_MEM(xc, j);                                                                              \
    const floatC y_ = (NG_LDC(DTYPE, xc, j) - mean) * rs * wc + bc;                                \
    if (fast)                                                                                      \
      NG_STCF(DTYPE, yc, j, y_);                                                                   \
    else                                                                                           \
      NG_STC(DTYPE, yc, j, y_);                                                                    \
  } while (0)
  for (uint k = 0; k < full; k++) {
    floatC v[GN_K];
#pragma unroll
    for (int q = 0; q < GN_K; q++) {
      NG_PF_MEM(xn, k * GN_K + q);
      v[q] = NG_LDC(DTYPE, xn, k * GN_K + q);
      GN_APPLY_CHUNK(k * GN_K + q);
    }
    gn_lanes_add(&hi, &lo, &m2, &na, v);
  }
  for (uint j = full * GN_K; j < nc; j++) GN_APPLY_CHUNK(j);
#undef GN_APPLY_CHUNK
  return gn_lanes_done(hi, lo, m2, na, xn, full, nv);
}
#endif

/* ---- units ----------------------------------------------------------------------------------- */
typedef struct gn_unit {
  uint blk;   /* b·G + g */
  uint c_lo;  /* first channel of the unit, within the group */
  uint nch;   /* channels in the unit */
  uint s0;    /* first spatial element of each channel */
  uint len;   /* spatial elements per channel */
  uint p;     /* piece index (0 for whole channels) */
  ulong start; /* element index of the unit's first element */
} gn_unit;

inline gn_unit gn_decode(uint ug, uint U, uint Cg, uint S, uint k, uint P, uint Ls) {
  gn_unit t;
  t.blk = ug / U;
  const uint u = ug % U;
  if (P == 1) {
    t.c_lo = u * k;
    t.nch = min(k, Cg - t.c_lo);
    t.s0 = 0;
    t.len = S;
    t.p = 0;
  } else {
    t.c_lo = u / P;
    t.nch = 1;
    t.p = u % P;
    t.s0 = t.p * Ls;
    t.len = min(Ls, S - t.s0);
  }
  t.start = (ulong)t.blk * Cg * S + (ulong)t.c_lo * S + t.s0;
  return t;
}

#if WG > 1
/* The group's next ticket (every work-item gets it), or `tickets` and beyond when none is left;
 * the holder of the last ticket resets the counter for the next launch on this queue. Tickets
 * go out in order, so a group holding ticket t knows that every ticket before it is held by a
 * running group (or done). */
inline uint gn_ticket(__global volatile uint *sync, uint tickets, __local uint *tk) {
  if (get_local_id(0) == 0) {
    const uint t = atomic_inc(&sync[0]);
    if (t == tickets + get_num_groups(0) - 1) atomic_xchg(&sync[0], 0u);
    *tk = t;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  return *tk; /* rewritten only after the unit's reductions, whose barriers come first */
}
#endif

#if SLOTS > 0 && WG > 1 && VEC == 8
/* The unit's vectors into registers (zeros past the block's end). */
#define GN_LOAD_UNIT(r, xb, v0, nvb)                                                                 \
  do {                                                                                               \
    _Pragma("unroll") for (int q = 0; q < SLOTS; q++) {                                              \
      const uint i_ = (v0) + (uint)q * WG + lid;                                                     \
      (r)[q] = i_ < (nvb) ? NG_LDRV(DTYPE, xb, i_) : (NG_RAWV(DTYPE))(0);                           \
    }                                                                                                \
  } while (0)
/* The held kernels (one block per work-group, blocks blk = group, group + groups, …) prefetch the
 * group's next block into L2 with PREFETCH, as the row ops' held rows do (ng_common.clh). */
#define REG SLOTS
#endif

#if NG_NV_SHFL
/* Tagged values (NVIDIA, the one-launch kernels' `tags`): a unit publishes two floats (the
 * forward its sum and M2, the backward its two sums) as two 64-bit words, each the value's bits
 * below a tag of 1, written and read whole (st / ld.relaxed.gpu), so a reader that sees both tags
 * sees both values. No fence and no count: the publish's membar.gl also waited for the
 * work-item's own stores of the ticket before (H100, bf16, G = 32: forward 64-66 -> 60 us,
 * backward 91-92 -> 88-90). The words live in the queue's counter area, zero between launches:
 * the block's last reader zeroes them (gn_tag_clear). */
inline void gn_tag_put(__global volatile ulong *p, float sum, float m2) {
  const ulong tag = (ulong)1 << 32, a = (ulong)as_uint(sum) | tag, b = (ulong)as_uint(m2) | tag;
  asm volatile("st.relaxed.gpu.global.v2.b64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
/* (cnt, first value, second value) of unit `lid` of a block whose words start at p, once
 * published (mine: lid is one of the block's units; the others get (1, 0, 0)): the forward's
 * (count, sum, M2), the backward's (1, its two sums). The warp polls in one loop, as
 * ng_coop_collect does. */
/* The two words at p, read whole (ld.relaxed.gpu); published once both carry the tag. */
inline ulong2 gn_tag_ld(__global volatile ulong *p) {
  ulong a, b;
  asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
  return (ulong2)(a, b);
}
inline bool gn_tagged(ulong2 v) { return (uint)(v.x >> 32) == 1u && (uint)(v.y >> 32) == 1u; }
inline float4 gn_tag_get(__global volatile ulong *p, bool mine, float cnt) {
  const uint lid = get_local_id(0);
  ulong2 v = (ulong2)(0);
  int ok;
  do {
    if (mine) v = gn_tag_ld(p + 2 * (ulong)lid);
    ok = !mine || gn_tagged(v);
  } while (!ng_warp_all(ok));
  return mine ? (float4)(cnt, as_float((uint)v.x), as_float((uint)v.y), 0.0f)
              : (float4)(1.0f, 0.0f, 0.0f, 0.0f);
}
/* One work-item spins until the unit whose words are at p has published: the backward's lag of
 * U tickets often finds its block unfinished, and a single spinner on the block's last unit then
 * keeps the other warps from polling L2 (with the warps polling: 91-94 us, even; with this:
 * 88-90). The forward, whose longer lag mostly finds the block done, lost 1 us with it. */
inline void gn_tag_wait(__global volatile ulong *p) {
  while (!gn_tagged(gn_tag_ld(p))) {
  }
}
/* The U units' words of a block at p back to zero, by one work-item: its last reader. */
inline void gn_tag_clear(__global volatile ulong *p, uint U) {
  __global ulong2 *q = (__global ulong2 *)p;
  for (uint j = 0; j < U; j++) q[j] = (ulong2)(0);
}
#endif

#if !BWD
/* ---- forward ----------------------------------------------------------------------------------
 * y = rd((x − mean)·rstd·w[c] + b[c]). */
inline void gn_apply(__global const XT *x, __global XT *y, gn_unit t, uint first_ch, uint S,
                     float mean, float rs, __global const uchar *w, ulong w_off,
                     __global const uchar *b, ulong b_off, int pdt, int has_w, int has_b) {
  const uint lid = get_local_id(0);
  const uint lv = t.len / VEC;
  for (uint c = 0; c < t.nch; c++) {
    const uint ch = first_ch + c;
    const float wc = has_w ? gn_ld_param(w, w_off + ch, pdt) : 1.0f;
    const float bc = has_b ? gn_ld_param(b, b_off + ch, pdt) : 0.0f;
    __global const XT *xc = x + t.start + (ulong)c * S;
    __global XT *yc = y + t.start + (ulong)c * S;
#if WG == 1
    /* 16-wide chunks; the fast rounding unless an f32 operand is NaN (see ng_common.clh) */
    NG_CHUNKS(nc, tail, lv);
    if (GN_Y_FAST())
      for (uint j = 0; j < nc; j++) NG_STCF(DTYPE, yc, j, GN_Y(NG_LDC(DTYPE, xc, j)));
    else
      for (uint j = 0; j < nc; j++) NG_STC(DTYPE, yc, j, GN_Y(NG_LDC(DTYPE, xc, j)));
    if (tail) STX(yc, lv - 1, GN_Y(LDX(xc, lv - 1)));
    continue;
#endif
    for (uint i = lid; i < lv; i += WG) {
      const floatV xh = (LDX(xc, i) - mean) * rs;
      STX(yc, i, xh * wc + bc);
    }
  }
}

/* split = 0: U = 1, statistics and output in one pass over each block.
 * split = 1: statistics of each unit to part[4·unit …] = (count bits, hi, lo, m2). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_groupnorm_fwd(__global const XT *x, ulong x_off, __global const uchar *w, ulong w_off,
                 __global const uchar *b, ulong b_off, int pdt, int has_w, int has_b,
                 __global XT *y, ulong y_off, __global float *mean, ulong mean_off,
                 __global float *rstd, ulong rstd_off, __global float *part, ulong part_off,
                 uint units, uint G, uint Cg, uint S, uint U, uint k, uint P, uint Ls, float eps,
                 int split) {
  __local uint ln[WG];
  __local float lh[WG], ll[WG], lm[WG];
  const uint lid = get_local_id(0);
  x += x_off;
  y += y_off;
  mean += mean_off;
  rstd += rstd_off;
  part += part_off;
#if WG == 1
  if (!split) { /* CPU, one unit per block: a contiguous run of blocks, pipelined */
    NG_ROW_BLOCK(u0, u1, units);
    const uint cw = NG_CH * VEC, n = Cg * S;
    gn_st st = u0 < u1 ? gn_range_stats_lanes(x + (ulong)u0 * n, n / VEC) : (gn_st){0u, 0.0f, 0.0f, 0.0f};
    for (uint blk = u0; blk < u1; blk++) {
      const float nf = (float)st.n;
      const float mu = (st.hi + st.lo) / nf;
      const float rs = rsqrt(st.m2 / nf + eps);
      mean[blk] = mu;
      rstd[blk] = rs;
      const ulong o = (ulong)blk * n;
      if (blk + 1 < u1 && S % cw == 0) {
        st = gn_apply_next(x + o, y + o, x + o + n, Cg, S / cw, (blk % G) * Cg, mu, rs, w, w_off,
                           b, b_off, pdt, has_w, has_b);
      } else {
        const gn_unit t = gn_decode(blk, 1, Cg, S, Cg, 1, S);
        gn_apply(x, y, t, (blk % G) * Cg, S, mu, rs, w, w_off, b, b_off, pdt, has_w, has_b);
        if (blk + 1 < u1) st = gn_range_stats_lanes(x + o + n, n / VEC);
      }
    }
    return;
  }
#endif
  for (uint ug = get_group_id(0); ug < units; ug += get_num_groups(0)) {
    const gn_unit t = gn_decode(ug, U, Cg, S, k, P, Ls);
#if WG == 1
    const gn_st st = gn_range_stats_lanes(x + t.start, t.nch * t.len / VEC);
#else
    const gn_st st = gn_range_stats(x + t.start, t.nch * t.len / VEC, ln, lh, ll, lm);
#endif
    if (split) {
      if (lid == 0) {
        __global float *pp = part + (ulong)ug * 4;
        pp[0] = as_float(st.n), pp[1] = st.hi, pp[2] = st.lo, pp[3] = st.m2;
      }
      continue;
    }
    const float nf = (float)st.n;
    const float mu = (st.hi + st.lo) / nf;
    const float rs = rsqrt(st.m2 / nf + eps);
    if (lid == 0) {
      mean[t.blk] = mu;
      rstd[t.blk] = rs;
    }
    gn_apply(x, y, t, (t.blk % G) * Cg + t.c_lo, S, mu, rs, w, w_off, b, b_off, pdt, has_w,
             has_b);
  }
}

/* Second kernel of the split forward: merge the block's unit statistics, then the output. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_groupnorm_fwd_apply(__global const XT *x, ulong x_off, __global const uchar *w, ulong w_off,
                       __global const uchar *b, ulong b_off, int pdt, int has_w, int has_b,
                       __global XT *y, ulong y_off, __global float *mean, ulong mean_off,
                       __global float *rstd, ulong rstd_off, __global const float *part,
                       ulong part_off, uint units, uint G, uint Cg, uint S, uint U, uint k,
                       uint P, uint Ls, float eps) {
  __local uint ln[WG];
  __local float lh[WG], ll[WG], lm[WG];
  const uint lid = get_local_id(0);
  x += x_off;
  y += y_off;
  mean += mean_off;
  rstd += rstd_off;
  part += part_off;
  for (uint i = get_group_id(0); i < units; i += get_num_groups(0)) {
    const uint ug = units - 1 - i; /* last-read units first: they are the likeliest in cache */
    const gn_unit t = gn_decode(ug, U, Cg, S, k, P, Ls);
    /* work-item lid merges partials lid, lid + WG, …; then the fixed tree of gn_wg_merge */
    gn_st st = {0u, 0.0f, 0.0f, 0.0f};
    __global const float *pp = part + (ulong)t.blk * U * 4;
    for (uint u = lid; u < U; u += WG) {
      const gn_st o = {as_uint(pp[4 * u]), pp[4 * u + 1], pp[4 * u + 2], pp[4 * u + 3]};
      st = gn_merge(st, o);
    }
    st = gn_wg_merge(st, ln, lh, ll, lm);
    const float nf = (float)st.n;
    const float mu = (st.hi + st.lo) / nf;
    const float rs = rsqrt(st.m2 / nf + eps);
    if (lid == 0 && ug % U == 0) {
      mean[t.blk] = mu;
      rstd[t.blk] = rs;
    }
    gn_apply(x, y, t, (t.blk % G) * Cg + t.c_lo, S, mu, rs, w, w_off, b, b_off, pdt, has_w,
             has_b);
  }
}

#if SLOTS > 0 && WG > 1 && VEC == 8
/* ---- one pass (GPU) --------------------------------------------------------------------------
 * The two-kernel forward reads x twice and its statistics kernel is a chain of merges; here a
 * unit is WG·SLOTS vectors of one block, held in registers as storage bits, so x is read once.
 *  - A work-group takes units in ticket order (sync[0]) and forms the unit's exact two-pass
 *    statistics in registers, which it publishes to part[4·unit …].
 *  - It then waits until the block's U units have published (sync[2 + 2·blk]) and merges the U
 *    partials in unit order (every unit gets the same bits), then writes its y.
 *  - Tickets are taken in order and a group publishes before it waits, so a unit that has not
 *    published is either running or not yet taken, and nothing taken later is waited for by it;
 *    the host keeps U at most half the compute units, so a block's units always fit at once.
 *  - The last group of a block to leave (sync[3 + 2·blk]) and the group with the last ticket
 *    put the counters back to zero for the next launch on this queue.
 * S is a multiple of VEC, so a vector lies in one channel. */
/* A unit's count, sum and squared deviations from its own mean (an exact two-pass over the
 * registers r); idle slots hold zeros. */
inline float4 gn_unit_stats(const NG_RAWV(DTYPE) *r, uint v0, uint nvb, __local float *red) {
  const uint lid = get_local_id(0);
  floatV acc = (floatV)(0.0f);
#pragma unroll
  for (int q = 0; q < SLOTS; q++) acc += NG_WIDENV(DTYPE, r[q]);
  const uint cnt = min((uint)(WG * SLOTS), nvb - v0) * VEC;
  const float sum = ng_wg_sum(ng_hsum(acc), red);
  const float cm = sum / (float)cnt;
  floatV m2 = (floatV)(0.0f);
#pragma unroll
  for (int q = 0; q < SLOTS; q++) {
    const floatV d = NG_WIDENV(DTYPE, r[q]) - cm;
    if (v0 + (uint)q * WG + lid < nvb) m2 = fma(d, d, m2);
  }
  return (float4)((float)cnt, sum, ng_wg_sum(ng_hsum(m2), red), 0.0f);
}

/* Publish a unit's (count, sum, M2), wait for the block's other units, and combine all U: the
 * block's mean from the sum of the unit sums, its M2 as Σ M2_u + n_u·(mean_u − mean)², each a
 * fixed-order work-group sum, so every unit gets the same bits. Returns (mean, rstd). */
inline float2 gn_exchange(float4 mine, __global volatile uint *sync, __global float *part,
                          uint blk, uint u, uint U, uint n, float eps, __local float *red) {
  const uint lid = get_local_id(0);
  __global volatile float *pb = (__global volatile float *)part + (ulong)blk * U * 4;
  if (lid == 0) {
    pb[4 * u] = mine.x, pb[4 * u + 1] = mine.y, pb[4 * u + 2] = mine.z;
    NG_FENCE_DEVICE();
    atomic_inc(&sync[2 + 2 * blk]);
    NG_WAIT_AT_LEAST(&sync[2 + 2 * blk], U);
  }
  barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
  /* volatile loads: another group on this compute unit may hold the line from before it was
   * complete */
  const float nf = (float)n;
  float mean, m = 0.0f;
  if (U <= WG) { /* one partial per work-item at most: read once */
    const float c = lid < U ? pb[4 * lid] : 1.0f, su = lid < U ? pb[4 * lid + 1] : 0.0f;
    const float mu = lid < U ? pb[4 * lid + 2] : 0.0f;
    mean = ng_wg_sum(su, red) / nf;
    const float d = su / c - mean;
    m = lid < U ? mu + c * d * d : 0.0f;
  } else {
    float s = 0.0f;
    for (uint v = lid; v < U; v += WG) s += pb[4 * v + 1];
    mean = ng_wg_sum(s, red) / nf;
    for (uint v = lid; v < U; v += WG) {
      const float c = pb[4 * v], d = pb[4 * v + 1] / c - mean;
      m += pb[4 * v + 2] + c * d * d;
    }
  }
  const float m2 = ng_wg_sum(m, red);
  if (lid == 0 && atomic_inc(&sync[3 + 2 * blk]) == U - 1) {
    atomic_xchg(&sync[2 + 2 * blk], 0u);
    atomic_xchg(&sync[3 + 2 * blk], 0u);
  }
  return (float2)(mean, rsqrt(m2 / nf + eps));
}

/* First kernel of the split forward on a GPU (replaces ng_groupnorm_fwd with split = 1): each
 * unit's statistics from chunks of WG·SLOTS vectors held in registers (an exact two-pass per
 * chunk, merged across chunks), so the loads of a chunk all go out at once instead of a chain of
 * merges every CHV vectors. Same partial format, read by ng_groupnorm_fwd_apply. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_groupnorm_fwd_stats(__global const XT *x, ulong x_off, __global float *part, ulong part_off,
                       uint units, uint Cg, uint S, uint U, uint k, uint P, uint Ls) {
  __local float red[WG];
  const uint lid = get_local_id(0);
  x += x_off;
  part += part_off;
  for (uint ug = get_group_id(0); ug < units; ug += get_num_groups(0)) {
    const gn_unit t = gn_decode(ug, U, Cg, S, k, P, Ls);
    __global const XT *xu = x + t.start;
    const uint nv = t.nch * t.len / VEC;
    gn_st run = {0u, 0.0f, 0.0f, 0.0f};
    for (uint base = 0; base < nv; base += WG * SLOTS) {
      NG_RAWV(DTYPE) r[SLOTS];
      GN_LOAD_UNIT(r, xu, base, nv);
      const float4 c = gn_unit_stats(r, base, nv, red);
      run = gn_merge(run, (gn_st){(uint)c.x, c.y, 0.0f, c.z});
    }
    if (lid == 0) {
      __global float *pp = part + (ulong)ug * 4;
      pp[0] = as_float(run.n), pp[1] = run.hi, pp[2] = run.lo, pp[3] = run.m2;
    }
  }
}

/* The one-pass and one-launch forward kernels' pointers moved to their offsets. */
#define GN_FWD_ONE_OFFSETS()                                                                         \
  do {                                                                                               \
    x += x_off, y += y_off, mean += mean_off, rstd += rstd_off, part += part_off;                   \
    sync += sync_off;                                                                                \
  } while (0)

/* y of a unit held in registers r (vectors v0 + q·WG + lid of a block's nvb at yb, whose first
 * channel is ch0): (x − mu)·rs·w[c] + b[c]; w, b, pdt, has_w, has_b, sv, lid in scope. */
#define GN_STORE_UNIT_Y(r, yb, v0, nvb, ch0, mu, rs)                                                 \
  do {                                                                                               \
    NG_UNROLL_STORES                                                                                 \
    for (int q_ = 0; q_ < SLOTS; q_++) {                                                             \
      const uint i_ = (v0) + (uint)q_ * WG + lid;                                                    \
      if (i_ < (nvb)) {                                                                              \
        const uint ch_ = (ch0) + i_ / sv;                                                            \
        const float wc_ = has_w ? gn_ld_param(w, w_off + ch_, pdt) : 1.0f;                          \
        const float bc_ = has_b ? gn_ld_param(b, b_off + ch_, pdt) : 0.0f;                          \
        const floatV xh_ = (NG_WIDENV(DTYPE, (r)[q_]) - (mu)) * (rs);                                \
        STX(yb, i_, xh_ * wc_ + bc_);                                                                \
      }                                                                                              \
    }                                                                                                \
  } while (0)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_groupnorm_fwd_one(__global const XT *x, ulong x_off, __global const uchar *w, ulong w_off,
                     __global const uchar *b, ulong b_off, int pdt, int has_w, int has_b,
                     __global XT *y, ulong y_off, __global float *mean, ulong mean_off,
                     __global float *rstd, ulong rstd_off, __global float *part, ulong part_off,
                     __global volatile uint *sync, ulong sync_off, uint units, uint G, uint Cg,
                     uint S, uint U, float eps) {
  __local uint tk;
  __local float red[WG];
  const uint lid = get_local_id(0);
  GN_FWD_ONE_OFFSETS();
  const uint sv = S / VEC, nvb = Cg * sv;
  for (uint ug = gn_ticket(sync, units, &tk); ug < units; ug = gn_ticket(sync, units, &tk)) {
    const uint blk = ug / U, u = ug % U, v0 = u * (WG * SLOTS);
    NG_RAWV(DTYPE) r[SLOTS];
    GN_LOAD_UNIT(r, x + (ulong)blk * nvb * VEC, v0, nvb);
    const float2 ms =
        gn_exchange(gn_unit_stats(r, v0, nvb, red), sync, part, blk, u, U, nvb * VEC, eps, red);
    const float mu = ms.x, rs = ms.y;
    if (lid == 0 && u == 0) {
      mean[blk] = mu;
      rstd[blk] = rs;
    }
    GN_STORE_UNIT_Y(r, y + (ulong)blk * nvb * VEC, v0, nvb, (blk % G) * Cg, mu, rs);
  }
}

/* The split forward in one launch (GPU): ng_groupnorm_bwd_lag's scheme for the statistics.
 * Tickets t = 0 … units + lag − 1 in order (sync[0]); ticket t forms the exact two-pass
 * statistics of unit t (WG·SLOTS vectors in registers) and publishes them (count, sum, M2 to
 * part[4·t …], counted in sync[2 + 2·blk]); then, for unit t − lag, it waits for its block's U
 * statistics, merges them in unit order as ng_groupnorm_fwd_one does (the same bits), and writes
 * y from x read again, lag units after the first read, while it is still in L2. lag >= U keeps
 * the wait deadlock-free (see ng_groupnorm_bwd_lag); the host passes up to a ticket per compute
 * unit more, so that the block waited for is mostly done, and U <= WG (fwd_lag_plan). Both
 * halves run on every ticket, the absent one on an empty unit, so no barrier sits under a
 * condition. tags != 0 (NVIDIA only): the statistics go through tagged words at sync + tags
 * instead (gn_tag_put), and part is not used. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_groupnorm_fwd_lag(__global const XT *x, ulong x_off, __global const uchar *w, ulong w_off,
                     __global const uchar *b, ulong b_off, int pdt, int has_w, int has_b,
                     __global XT *y, ulong y_off, __global float *mean, ulong mean_off,
                     __global float *rstd, ulong rstd_off, __global float *part, ulong part_off,
                     __global volatile uint *sync, ulong sync_off, uint units, uint G, uint Cg,
                     uint S, uint U, float eps, uint lag, uint tags) {
  __local uint tk;
  __local float red[WG];
  const uint lid = get_local_id(0);
  GN_FWD_ONE_OFFSETS();
  __global volatile float *pv = (__global volatile float *)part;
#if NG_NV_SHFL
  __global volatile ulong *tg = (__global volatile ulong *)(sync + tags);
#else
  (void)tags;
#endif
  const uint sv = S / VEC, nvb = Cg * sv, tickets = units + lag;
  const float nf = (float)(nvb * VEC);
  for (uint t = gn_ticket(sync, tickets, &tk); t < tickets; t = gn_ticket(sync, tickets, &tk)) {
    const bool st = t < units, late = t >= lag;
    {
      const uint ua = st ? t : 0, blk = ua / U, u = ua % U, v0 = u * (WG * SLOTS);
      const uint nv = st ? nvb : 0;
      NG_RAWV(DTYPE) r[SLOTS];
      GN_LOAD_UNIT(r, x + (ulong)blk * nvb * VEC, v0, nv);
      const float4 c = gn_unit_stats(r, v0, nv, red);
      if (lid == 0 && st) {
#if NG_NV_SHFL
        if (tags) {
          gn_tag_put(tg + 2 * (ulong)t, c.y, c.z);
        } else
#endif
        {
          pv[(ulong)t * 4] = c.x, pv[(ulong)t * 4 + 1] = c.y, pv[(ulong)t * 4 + 2] = c.z;
          NG_FENCE_DEVICE();
          atomic_inc(&sync[2 + 2 * blk]);
        }
      }
    }
    const uint ub = late ? t - lag : 0, blk = ub / U, u = ub % U, v0 = u * (WG * SLOTS);
    const uint nv = late ? nvb : 0, Ue = late ? U : 0;
    /* the unit's x (again, from L2) and its channels' weight and bias are asked for before the
     * wait, so that their latency overlaps it and the merge: 66.6-68.4 -> 63.5-65.0 us on the
     * H100 at G = 32 (the parameters alone: 65.0-66.7) */
    NG_RAWV(DTYPE) r[SLOTS];
    GN_LOAD_UNIT(r, x + (ulong)blk * nvb * VEC, v0, nv);
    float wq[SLOTS], bq[SLOTS];
#pragma unroll
    for (int q_ = 0; q_ < SLOTS; q_++) {
      const uint ch_ = (blk % G) * Cg + min(v0 + (uint)q_ * WG + lid, nvb - 1) / sv;
      wq[q_] = has_w ? gn_ld_param(w, w_off + ch_, pdt) : 1.0f;
      bq[q_] = has_b ? gn_ld_param(b, b_off + ch_, pdt) : 0.0f;
    }
    /* the block's mean from the sum of the unit sums, M2 = Σ M2ᵤ + nᵤ·(meanᵤ − mean)²: the
     * arithmetic of gn_exchange (volatile loads, as there), its U <= WG branch. A work-item reads
     * its unit's three values at once and keeps them for the second sum (one round trip to L2
     * where reading them for each sum took two: 1-2 us of the H100's 74 at G = 32); a caller's
     * scratch may leave them unaligned. Tagged words carry no count: it follows from the unit's
     * place, as gn_unit_stats formed it. */
    float4 q = (float4)(1.0f, 0.0f, 0.0f, 0.0f);
#if NG_NV_SHFL
    if (tags) {
      q = gn_tag_get(tg + 2 * (ulong)blk * U, lid < Ue,
                     (float)(min((uint)(WG * SLOTS), nvb - min(lid, U - 1) * (WG * SLOTS)) * VEC));
    } else
#endif
    {
      if (lid == 0 && late) {
        NG_WAIT_AT_LEAST(&sync[2 + 2 * blk], U);
      }
      barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
      __global volatile float *pu = pv + ((ulong)blk * U + lid) * 4;
      if (lid < Ue) {
        if (((ulong)pu & 15) == 0)
          q = *(__global volatile float4 *)pu;
        else
          q = (float4)(pu[0], pu[1], pu[2], 0.0f);
      }
    }
    const float mu = ng_wg_sum(q.y, red) / nf, d = q.y / q.x - mu;
    const float m = lid < Ue ? q.z + q.x * d * d : 0.0f;
    const float rs = rsqrt(ng_wg_sum(m, red) / nf + eps);
    if (lid == 0 && late && u == 0) {
      mean[blk] = mu;
      rstd[blk] = rs;
    }
    /* done with the block's counter and statistics: counted out here, so that the atomic's
     * round trip overlaps the stores below rather than delaying the next ticket (1-2 us) */
    uint left = 0u;
    if (lid == 0 && late) left = atomic_inc(&sync[3 + 2 * blk]);
    NG_UNROLL_STORES
    for (int q_ = 0; q_ < SLOTS; q_++) {
      const uint i_ = v0 + (uint)q_ * WG + lid;
      const floatV xh_ = (NG_WIDENV(DTYPE, r[q_]) - mu) * rs;
      if (i_ < nv) STX(y + (ulong)blk * nvb * VEC, i_, xh_ * wq[q_] + bq[q_]);
    }
    if (lid == 0 && late && left == U - 1) {
#if NG_NV_SHFL
      /* every reader of the block has counted out: its words back to zero for the next launch */
      if (tags) gn_tag_clear(tg + 2 * (ulong)blk * U, U);
#endif
      atomic_xchg(&sync[2 + 2 * blk], 0u);
      atomic_xchg(&sync[3 + 2 * blk], 0u);
    }
  }
}

/* ---- held blocks (GPU, U = 1) -----------------------------------------------------------------
 * Many blocks of at most WG·SLOTS vectors: a work-group holds a whole block in registers as
 * storage bits, so x is read once, the statistics are the exact two-pass over the registers (the
 * block's sum, then the squared deviations from its mean), and no group waits for another: the
 * one-pass kernel with U = 1 pays a ticket, a fence and a wait per block for nothing, and
 * ng_groupnorm_fwd reads the block twice in a chain of merges. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_groupnorm_fwd_held(__global const XT *x, ulong x_off, __global const uchar *w, ulong w_off,
                      __global const uchar *b, ulong b_off, int pdt, int has_w, int has_b,
                      __global XT *y, ulong y_off, __global float *mean, ulong mean_off,
                      __global float *rstd, ulong rstd_off, uint blocks, uint G, uint Cg, uint S,
                      float eps) {
  __local float red[WG];
  const uint lid = get_local_id(0);
  x += x_off, y += y_off, mean += mean_off, rstd += rstd_off;
  const uint sv = S / VEC, nvb = Cg * sv;
  const ulong n = (ulong)nvb * VEC;
  for (uint blk = get_group_id(0); blk < blocks; blk += get_num_groups(0)) {
    NG_RAWV(DTYPE) r[SLOTS];
    GN_LOAD_UNIT(r, x + blk * n, 0, nvb);
    NG_SLICE_PREFETCH1(x, blk, get_num_groups(0), blocks, n, lid, nvb);
    const float4 st = gn_unit_stats(r, 0, nvb, red);
    const float mu = st.y / st.x, rs = rsqrt(st.z / st.x + eps);
    if (lid == 0) {
      mean[blk] = mu;
      rstd[blk] = rs;
    }
    GN_STORE_UNIT_Y(r, y + blk * n, 0, nvb, (blk % G) * Cg, mu, rs);
  }
}
#endif

#else
/* ---- backward ---------------------------------------------------------------------------------
 * Per block: g = w[c]·dy, c1 = Σ xhat·g / n, c2 = Σ g / n, dx = (g − xhat·c1 − c2)·rstd.
 * Per channel: dw[c] = Σ dy·xhat, db[c] = Σ dy, written to the partial rows
 * dwp/dbp[(b·P + p)·C + c] (each entry by exactly one unit) and summed over rows afterwards in
 * row order. Σ xhat·g and Σ g have their own accumulators, the same in every variant, so dx does
 * not depend on COMPUTE_DW / COMPUTE_DB. */

/* One chunk or vector (type T) of dy d_, x x_ into the block sums a1 = Σ g·xhat, a2 = Σ g and
 * the channel's sw = Σ dy·xhat, sb = Σ dy (mu, rs, wc in scope): the one form of every path's
 * sums. */
#define GN_BWD_SUMS(T, d_, x_, a1, a2, sw, sb)                                                       \
  do {                                                                                               \
    const T d = (d_), xh = ((x_) - mu) * rs, g = d * wc;                                             \
    a1 = fma(g, xh, a1);                                                                             \
    a2 += g;                                                                                         \
    GN_IF_DW(sw = fma(d, xh, sw));                                                                   \
    GN_IF_DB(sb += d);                                                                               \
  } while (0)
#if COMPUTE_DW
#define GN_IF_DW(e) e
#else
#define GN_IF_DW(e) ((void)0)
#endif
#if COMPUTE_DB
#define GN_IF_DB(e) e
#else
#define GN_IF_DB(e) ((void)0)
#endif

inline void gn_dx(__global const XT *dy, __global const XT *x, __global XT *dx, gn_unit t,
                  uint first_ch, uint S, float mu, float rs, float c1, float c2,
                  __global const uchar *w, ulong w_off, int pdt, int has_w) {
  const uint lid = get_local_id(0);
  const uint lv = t.len / VEC;
  for (uint c = 0; c < t.nch; c++) {
    const float wc = has_w ? gn_ld_param(w, w_off + first_ch + c, pdt) : 1.0f;
    const ulong o = t.start + (ulong)c * S;
    for (uint i = lid; i < lv; i += WG) {
      const floatV xh = (LDX(x + o, i) - mu) * rs;
      const floatV g = LDX(dy + o, i) * wc;
      STX(dx + o, i, ((g - xh * c1) - c2) * rs);
    }
  }
}

#if WG == 1
inline float gn_hsumc(floatC v) {
#if NG_CH == 2
  return ng_hsum(v.lo + v.hi);
#else
  return ng_hsum(v);
#endif
}

/* CPU walk over the channels of one block: with SUMS, the sums of block `blk` (Σ g·xhat and Σ g
 * into *s1, *s2; each channel's dW / dB partial to dwp / dbp); with DX, dx of block `pb` (its
 * statistics pmu, prs and coefficients c1, c2) in the same walk, so that dx is formed from cache
 * while the next block streams in. The sums are the same bits with or without DX. Chunks of
 * NG_CH vectors, one floatV at the end of an odd channel. */
#define GN_DX_OF(d, x) ((((d) * pwc - (((x) - pmu) * prs) * c1) - c2) * prs)
#define GN_BWD_WALK(DO_SUMS, DO_DX, STC)                                                           \
  for (uint j = 0; j < nc; j++) {                                                                  \
    if (DO_DX) {                                                                                   \
      NG_PF_MEM(pdy, j);                                                                           \
      NG_PF_MEM(px, j);                                                                            \
      STC(DTYPE, pdx, j, GN_DX_OF(NG_LDC(DTYPE, pdy, j), NG_LDC(DTYPE, px, j)));                   \
    }                                                                                              \
    if (DO_SUMS) {                                                                                 \
      NG_PF_MEM(cdy, j);                                                                           \
      NG_PF_MEM(cx, j);                                                                            \
      GN_BWD_SUMS(floatC, NG_LDC(DTYPE, cdy, j), NG_LDC(DTYPE, cx, j), a1, a2, sw, sb);            \
    }                                                                                              \
  }
inline void gn_bwd_walk(__global const XT *dy, __global const XT *x, __global XT *dx,
                        __global const uchar *w, ulong w_off, int pdt, int has_w, uint G, uint Cg,
                        uint S, int do_sums, uint blk, float mu, float rs, float *s1, float *s2,
                        __global float *dwp, __global float *dbp, int do_dx, uint pb, float pmu,
                        float prs, float c1, float c2) {
  const uint lv = S / VEC, C = G * Cg;
  NG_CHUNKS(nc, tail, lv);
  floatC a1 = (floatC)(0.0f), a2 = (floatC)(0.0f);
  const ulong prow = (ulong)(blk / G) * C; /* partial row of this batch (P = 1) */
  for (uint c = 0; c < Cg; c++) {
    const float wc = has_w ? gn_ld_param(w, w_off + (blk % G) * Cg + c, pdt) : 1.0f;
    const float pwc = has_w ? gn_ld_param(w, w_off + (pb % G) * Cg + c, pdt) : 1.0f;
    const ulong co = (ulong)blk * Cg * S + (ulong)c * S, po = (ulong)pb * Cg * S + (ulong)c * S;
    __global const XT *cdy = dy + co, *cx = x + co, *pdy = dy + po, *px = x + po;
    __global XT *pdx = dx + po;
    floatC sw = (floatC)(0.0f), sb = (floatC)(0.0f);
    const bool fast = !isnan(pwc) && !isnan(pmu) && !isnan(prs) && !isnan(c1) && !isnan(c2);
    if (do_sums && do_dx && fast) {
      GN_BWD_WALK(1, 1, NG_STCF)
    } else if (do_sums && do_dx) {
      GN_BWD_WALK(1, 1, NG_STC)
    } else if (do_sums) {
      GN_BWD_WALK(1, 0, NG_STC)
    } else if (fast) {
      GN_BWD_WALK(0, 1, NG_STCF)
    } else {
      GN_BWD_WALK(0, 1, NG_STC)
    }
    if (tail) { /* the channel's last vector: into the low half of the chunk accumulators */
      const uint i = lv - 1;
      if (do_dx) STX(pdx, i, GN_DX_OF(LDX(pdy, i), LDX(px, i)));
      if (do_sums) {
#if NG_CH == 2
        GN_BWD_SUMS(floatV, LDX(cdy, i), LDX(cx, i), a1.lo, a2.lo, sw.lo, sb.lo);
#else
        GN_BWD_SUMS(floatV, LDX(cdy, i), LDX(cx, i), a1, a2, sw, sb);
#endif
      }
    }
    if (do_sums) {
      GN_IF_DW(dwp[prow + (blk % G) * Cg + c] = gn_hsumc(sw));
      GN_IF_DB(dbp[prow + (blk % G) * Cg + c] = gn_hsumc(sb));
    }
  }
  *s1 = gn_hsumc(a1);
  *s2 = gn_hsumc(a2);
}
#undef GN_BWD_WALK
#endif

/* GPU shape: one unit's block sums (Σ xhat·g, Σ g), merged over the work-group (every
 * work-item gets them), and its channels' dW / dB partials written by work-item 0. */
inline float2 gn_unit_sums(__global const XT *dy, __global const XT *x, __global const uchar *w,
                           ulong w_off, int pdt, int has_w, __global const float *mean,
                           __global const float *rstd, __global float *dwp, __global float *dbp,
                           gn_unit t, uint G, uint Cg, uint S, uint P, __local float2 *red2) {
  __local float *red = (__local float *)red2;
  const uint lid = get_local_id(0);
  const uint first_ch = (t.blk % G) * Cg + t.c_lo;
  const float mu = mean[t.blk], rs = rstd[t.blk];
  const uint lv = t.len / VEC;
#if COMPUTE_DW || COMPUTE_DB
  const ulong prow = ((ulong)(t.blk / G) * P + t.p) * (G * Cg);
#else
  (void)dwp, (void)dbp, (void)P;
#endif
  floatV a1 = (floatV)(0.0f), a2 = (floatV)(0.0f);
  for (uint c = 0; c < t.nch; c++) {
    const float wc = has_w ? gn_ld_param(w, w_off + first_ch + c, pdt) : 1.0f;
    const ulong o = t.start + (ulong)c * S;
#if COMPUTE_DW
    floatV sw = (floatV)(0.0f);
#endif
#if COMPUTE_DB
    floatV sb = (floatV)(0.0f);
#endif
    for (uint i = lid; i < lv; i += WG)
      GN_BWD_SUMS(floatV, LDX(dy + o, i), LDX(x + o, i), a1, a2, sw, sb);
#if COMPUTE_DW
    {
      const float s = ng_wg_sum(ng_hsum(sw), red);
      if (lid == 0) dwp[prow + first_ch + c] = s;
    }
#endif
#if COMPUTE_DB
    {
      const float s = ng_wg_sum(ng_hsum(sb), red);
      if (lid == 0) dbp[prow + first_ch + c] = s;
    }
#endif
  }
  return ng_wg_sum2((float2)(ng_hsum(a1), ng_hsum(a2)), red2);
}

/* The block sums of a split block: its U unit partials at pp summed in unit order (strided over
 * the work-group, then a fixed-order sum), so every unit of the block gets the same bits.
 * Volatile loads: in the one-launch kernel, other groups wrote them during this launch. */
inline float2 gn_block_sums(__global const volatile float *pp, uint U, __local float2 *red) {
  float2 s = (float2)(0.0f);
  for (uint u = get_local_id(0); u < U; u += WG) s += (float2)(pp[2 * u], pp[2 * u + 1]);
  return ng_wg_sum2(s, red);
}

/* The backward kernels' pointers moved to their offsets (the gradient partials only where
 * compiled in). */
#if COMPUTE_DW
#define GN_DWP_OFF() (dwp += dwp_off)
#else
#define GN_DWP_OFF() ((void)dwp, (void)dwp_off)
#endif
#if COMPUTE_DB
#define GN_DBP_OFF() (dbp += dbp_off)
#else
#define GN_DBP_OFF() ((void)dbp, (void)dbp_off)
#endif
#define GN_BWD_OFFSETS()                                                                             \
  do {                                                                                               \
    dy += dy_off, x += x_off, dx += dx_off, mean += mean_off, rstd += rstd_off, part += part_off;   \
    GN_DWP_OFF();                                                                                    \
    GN_DBP_OFF();                                                                                    \
  } while (0)

/* split = 0: U = 1, sums then dx in one pass over each block.
 * split = 1: the unit's (Σ xhat·g, Σ g) to part[2·unit …]; ng_groupnorm_bwd_dx finishes. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_groupnorm_bwd(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
                 __global const uchar *w, ulong w_off, int pdt, int has_w,
                 __global const float *mean, ulong mean_off, __global const float *rstd,
                 ulong rstd_off, __global XT *dx, ulong dx_off, __global float *part,
                 ulong part_off, __global float *dwp, ulong dwp_off, __global float *dbp,
                 ulong dbp_off, uint units, uint G, uint Cg, uint S, uint U, uint k, uint P,
                 uint Ls, int split) {
  __local float2 red[WG];
  const uint lid = get_local_id(0);
  GN_BWD_OFFSETS();
#if WG == 1
  if (!split) { /* CPU, one unit per block: a contiguous run of blocks, pipelined */
    (void)red;
    NG_ROW_BLOCK(u0, u1, units);
    const float nf = (float)(Cg * S);
    float s1 = 0.0f, s2 = 0.0f;
    if (u0 < u1)
      gn_bwd_walk(dy, x, dx, w, w_off, pdt, has_w, G, Cg, S, 1, u0, mean[u0], rstd[u0], &s1, &s2,
                  dwp, dbp, 0, u0, 0.0f, 0.0f, 0.0f, 0.0f);
    for (uint blk = u0; blk < u1; blk++) {
      const float c1 = ng_div(s1, nf), c2 = ng_div(s2, nf);
      const uint nb = blk + 1 < u1 ? blk + 1 : blk;
      gn_bwd_walk(dy, x, dx, w, w_off, pdt, has_w, G, Cg, S, blk + 1 < u1, nb, mean[nb],
                  rstd[nb], &s1, &s2, dwp, dbp, 1, blk, mean[blk], rstd[blk], c1, c2);
    }
    return;
  }
#endif
  for (uint ug = get_group_id(0); ug < units; ug += get_num_groups(0)) {
    const gn_unit t = gn_decode(ug, U, Cg, S, k, P, Ls);
    const float2 s = gn_unit_sums(dy, x, w, w_off, pdt, has_w, mean, rstd, dwp, dbp, t, G, Cg, S,
                                  P, red);
    if (split) {
      if (lid == 0) part[(ulong)ug * 2] = s.x, part[(ulong)ug * 2 + 1] = s.y;
      continue;
    }
    const float nf = (float)(Cg * S);
    gn_dx(dy, x, dx, t, (t.blk % G) * Cg + t.c_lo, S, mean[t.blk], rstd[t.blk], ng_div(s.x, nf),
          ng_div(s.y, nf), w, w_off, pdt, has_w);
  }
}

/* Second kernel of the split backward: sum the block's unit partials in unit order, then dx. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_groupnorm_bwd_dx(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
                    __global const uchar *w, ulong w_off, int pdt, int has_w,
                    __global const float *mean, ulong mean_off, __global const float *rstd,
                    ulong rstd_off, __global XT *dx, ulong dx_off, __global const float *part,
                    ulong part_off, uint units, uint G, uint Cg, uint S, uint U, uint k, uint P,
                    uint Ls) {
  __local float2 red[WG];
  const uint lid = get_local_id(0);
  dy += dy_off;
  x += x_off;
  dx += dx_off;
  mean += mean_off;
  rstd += rstd_off;
  part += part_off;
  for (uint i = get_group_id(0); i < units; i += get_num_groups(0)) {
    const uint ug = units - 1 - i; /* last-read units first: they are the likeliest in cache */
    const gn_unit t = gn_decode(ug, U, Cg, S, k, P, Ls);
    const float2 s = gn_block_sums(part + (ulong)t.blk * U * 2, U, red);
    const float nf = (float)(Cg * S);
    gn_dx(dy, x, dx, t, (t.blk % G) * Cg + t.c_lo, S, mean[t.blk], rstd[t.blk], ng_div(s.x, nf),
          ng_div(s.y, nf), w, w_off, pdt, has_w);
  }
}
#if WG > 1
/* The split backward in one launch (GPU shape): the second read of a unit comes from the cache.
 * The two kernels above read every block twice from memory, because a block's dx needs the sums
 * of all of its units and the first kernel has streamed the whole tensor by then. Here tickets
 * t = 0 … units + lag − 1 go out in order (sync[0]); ticket t
 *  - takes the sums of unit t (t < units), publishes them to part[2·t …] and counts them in
 *    sync[2 + 2·blk];
 *  - then dx of unit t − lag (t ≥ lag): it waits until that unit's block has all U sums, merges
 *    them in unit order and reads the unit again, `lag` units after its first read, so while it
 *    is still in the L2 cache.
 * lag ≥ U, so every unit of the block waited for holds an earlier ticket: a running group, which
 * publishes before it waits on anything. The last dx unit of a block (sync[3 + 2·blk]) and the
 * last ticket put the counters back to zero for the next launch on this queue. tags != 0
 * (NVIDIA only, U <= WG): the sums go through tagged words at sync + tags instead (gn_tag_put),
 * and part is not used; a fence remains only where partial rows of dweight / dbias follow.
 *
 * Both passes walk a unit in chunks of GN_LW lanes × GN_M vectors, all of a chunk's loads in
 * flight at once (the per-channel loop of ng_groupnorm_bwd has one, and two work-group sums per
 * channel). A chunk lies in one channel (the host sends only units of one channel, or of
 * channels a whole number of chunks long), so a chunk's Σ dy·xhat and Σ dy are one lane-group
 * sum each, kept in local memory; the channels' sums are the chunks' in order, and the block sums
 * follow as Σ g·xhat = Σ_c w[c]·Σ dy·xhat, Σ g = Σ_c w[c]·Σ dy. */
#if NG_NV_SHFL && WG % 32 == 0
#define GN_LW 32 /* lanes of a chunk: a warp, summed by shuffles */
#else
#define GN_LW 1
#endif
#define GN_M 4 /* vectors per lane of a chunk (host: GN_LAG_M) */
#define GN_CHUNK (GN_LW * GN_M)
#define GN_MAX_CHUNKS 1024 /* of a unit (host: GN_LAG_MAX_CHUNKS) */

/* Chunk ck of a unit of nv vectors at xu, du into this lane's xv, dv (zeros past the end), loaded
 * by LD: NG_LDRV, or NG_LDRV_LAST for the unit's second and last read. */
#define GN_LOAD_CHUNK(xv, dv, xu, du, ck, nv, LD)                                                    \
  do {                                                                                               \
    _Pragma("unroll") for (int q_ = 0; q_ < GN_M; q_++) {                                            \
      const uint i_ = (ck) * GN_CHUNK + (uint)q_ * GN_LW + lane;                                     \
      (xv)[q_] = i_ < (nv) ? LD(DTYPE, xu, i_) : (NG_RAWV(DTYPE))(0);                               \
      (dv)[q_] = i_ < (nv) ? LD(DTYPE, du, i_) : (NG_RAWV(DTYPE))(0);                               \
    }                                                                                                \
  } while (0)

inline float gn_lane_sum(float v) {
#if GN_LW == 32
  for (int m = 16; m > 0; m >>= 1) v += ng_shfl_xor(v, m);
#endif
  return v;
}

#ifndef GN_FUSED_GRAD
#define GN_FUSED_GRAD 0
#endif
#if GN_FUSED_GRAD
/* dweight / dbias in the one-launch backward (GN_FUSED_GRAD): the B·P units that share a run of
 * channels (every sample b, every piece p) each count their partials in a counter of that run,
 * cnt[g·(U/P) + u/P]; the last of them (ticket order does not matter: the sums take the partial
 * rows in row order) sums the rows for its channels and writes the gradients, so no
 * ng_reduce_partials launch follows. No group waits: the last arriver resets the counter. Called
 * by work-item 0 after its device-scope fence. */
inline void gn_grad_arrive(__global volatile uint *cnt, gn_unit a, uint ug, uint G, uint U,
                           uint P, uint rows, __local uint *last) {
  const uint key = (a.blk % G) * (U / P) + (ug % U) / P;
  const uint n = atomic_inc(&cnt[key]) + 1u;
  *last = n == rows;
  if (n == rows) {
    atomic_xchg(&cnt[key], 0u);
    NG_FENCE_DEVICE(); /* then see the other units' partials */
  }
}
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_groupnorm_bwd_lag(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
                     __global const uchar *w, ulong w_off, int pdt, int has_w,
                     __global const float *mean, ulong mean_off, __global const float *rstd,
                     ulong rstd_off, __global XT *dx, ulong dx_off, __global float *part,
                     ulong part_off, __global float *dwp, ulong dwp_off, __global float *dbp,
                     ulong dbp_off, __global volatile uint *sync, ulong sync_off, uint units,
                     uint G, uint Cg, uint S, uint U, uint k, uint P, uint Ls, uint lag,
                     uint tags
#if GN_FUSED_GRAD
                     , __global uchar *gdw, ulong gdw_off, __global uchar *gdb, ulong gdb_off,
                     int gdt, int gacc
#endif
) {
  __local float2 red[WG];
  __local uint tk;
  const uint lid = get_local_id(0);
  GN_BWD_OFFSETS();
  sync += sync_off;
  __global volatile float *pv = (__global volatile float *)part;
#if NG_NV_SHFL
  __global volatile ulong *tg = (__global volatile ulong *)(sync + tags);
#else
  (void)tags;
#endif
  const uint tickets = units + lag;
  const float nf = (float)(Cg * S);
  const uint lane = lid % GN_LW, wp = lid / GN_LW;
  __local float lcw[GN_MAX_CHUNKS], lcb[GN_MAX_CHUNKS];
#if GN_FUSED_GRAD
  /* set with glast, read back by the tail after dx: the unit's decoded fields then need not stay
   * live in registers across the dx half */
  __local uint glast, gfirst, gnch;
  /* the partial rows (B·P) and the counters of the runs of channels, after the blocks' pairs */
  const uint prows = units / U / G * P;
  __global volatile uint *gcnt = sync + 2 + 2 * (units / U);
#endif
  /* Both halves run on every ticket, the absent one on an empty unit: no barrier sits under a
   * condition (PoCL 3.1 ran `lid == 0` blocks in every work-item beside such conditions). */
  for (uint t = gn_ticket(sync, tickets, &tk); t < tickets; t = gn_ticket(sync, tickets, &tk)) {
    const bool sums = t < units, late = t >= lag;
    /* ---- sums of unit t ---- */
    const gn_unit a = gn_decode(sums ? t : 0, U, Cg, S, k, P, Ls);
    {
      const uint lv = a.len / VEC, nch = sums ? a.nch : 0, nv = nch * lv;
      const uint nck = (nv + GN_CHUNK - 1) / GN_CHUNK;
      const float mu = mean[a.blk], rs = rstd[a.blk];
      __global const XT *xu = x + a.start, *du = dy + a.start;
      for (uint c0 = 0; c0 < nck; c0 += WG / GN_LW) {
        const uint ck = c0 + wp;
        if (ck < nck) {
          NG_RAWV(DTYPE) xv[GN_M], dv[GN_M]; /* storage bits: half the registers of floats */
          GN_LOAD_CHUNK(xv, dv, xu, du, ck, nv, NG_LDRV);
          floatV sw = (floatV)(0.0f), sb = (floatV)(0.0f);
#pragma unroll
          for (int q = 0; q < GN_M; q++) {
            const floatV d = NG_WIDENV(DTYPE, dv[q]);
            sw = fma(d, (NG_WIDENV(DTYPE, xv[q]) - mu) * rs, sw);
            sb += d;
          }
          const float cw = gn_lane_sum(ng_hsum(sw)), cb = gn_lane_sum(ng_hsum(sb));
          if (lane == 0) lcw[ck] = cw, lcb[ck] = cb;
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      const uint first_ch = (a.blk % G) * Cg + a.c_lo, cpc = nch > 1 ? lv / GN_CHUNK : nck;
#if COMPUTE_DW || COMPUTE_DB
      const ulong prow = ((ulong)(a.blk / G) * P + a.p) * (G * Cg);
#endif
      float p1 = 0.0f, p2 = 0.0f;
      for (uint c = lid; c < nch; c += WG) {
        float sw = 0.0f, sb = 0.0f;
        for (uint j = c * cpc; j < (c + 1) * cpc; j++) sw += lcw[j], sb += lcb[j];
#if GN_FUSED_GRAD
        if (prows == 1) { /* the channel's one partial row is its gradient (0 + s: the tail's bits) */
          GN_IF_DW(gn_grad_put(gdw, gdw_off + first_ch + c, gdt, gacc, 0.0f + sw));
          GN_IF_DB(gn_grad_put(gdb, gdb_off + first_ch + c, gdt, gacc, 0.0f + sb));
        } else
#endif
        {
          GN_IF_DW(dwp[prow + first_ch + c] = sw);
          GN_IF_DB(dbp[prow + first_ch + c] = sb);
        }
        const float wc = has_w ? gn_ld_param(w, w_off + first_ch + c, pdt) : 1.0f;
        p1 = fma(wc, sw, p1);
        p2 = fma(wc, sb, p2);
      }
      const float2 s = ng_wg_sum2((float2)(p1, p2), red);
      if (lid == 0 && sums) {
#if NG_NV_SHFL
        if (tags) {
          gn_tag_put(tg + 2 * (ulong)t, s.x, s.y);
#if GN_FUSED_GRAD
          if (prows > 1) NG_FENCE_DEVICE();
#endif
        } else
#endif
        {
          pv[(ulong)t * 2] = s.x, pv[(ulong)t * 2 + 1] = s.y;
          NG_FENCE_DEVICE();
          atomic_inc(&sync[2 + 2 * a.blk]);
        }
#if GN_FUSED_GRAD
        /* the fence above also covers this group's per-channel partials (stored before the
         * barriers of ng_wg_sum2): count them for the channels' B·P units */
        if (prows > 1) {
          gn_grad_arrive(gcnt, a, t, G, U, P, prows, &glast);
          gfirst = (a.blk % G) * Cg + a.c_lo, gnch = a.nch;
        } else {
          glast = 0u;
        }
#endif
      }
    }
    /* ---- dx of unit t − lag ---- */
    const gn_unit b = gn_decode(late ? t - lag : 0, U, Cg, S, k, P, Ls);
    /* the weight of this warp's first dx chunk is asked for before the wait, so that its
     * latency overlaps it (bf16 at G = 32 about 1 us, the same registers). The unit's fields are
     * formed again below: formed once, here, they changed the register allocation (f16 with
     * both parameters frozen 64 -> 77) and slowed bf16 with dW by up to 1.8 us. */
    float wpre;
    {
      const uint lv = b.len / VEC, nch = late ? b.nch : 0, nv = nch * lv;
      const uint nck = (nv + GN_CHUNK - 1) / GN_CHUNK, first_ch = (b.blk % G) * Cg + b.c_lo;
      const uint c = nch > 1 ? wp * GN_CHUNK / lv : 0;
      wpre = has_w && wp < nck ? gn_ld_param(w, w_off + first_ch + c, pdt) : 1.0f;
    }
    float2 bs;
#if NG_NV_SHFL
    if (tags) {
      if (lid == 0 && late) gn_tag_wait(tg + 2 * ((ulong)b.blk * U + U - 1));
      barrier(CLK_LOCAL_MEM_FENCE);
      const float4 q = gn_tag_get(tg + 2 * (ulong)b.blk * U, late && lid < U, 1.0f);
      bs = ng_wg_sum2((float2)(0.0f) + (float2)(q.y, q.z), red); /* gn_block_sums' additions */
    } else
#endif
    {
      if (lid == 0 && late) {
        NG_WAIT_AT_LEAST(&sync[2 + 2 * b.blk], U);
      }
      barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
      /* volatile loads: this compute unit may hold lines of part from before they were written */
      bs = gn_block_sums(pv + (ulong)b.blk * U * 2, late ? U : 0, red);
    }
    {
      const uint lv = b.len / VEC, nch = late ? b.nch : 0, nv = nch * lv;
      const uint nck = (nv + GN_CHUNK - 1) / GN_CHUNK, first_ch = (b.blk % G) * Cg + b.c_lo;
      const float mu = mean[b.blk], rs = rstd[b.blk], c1 = ng_div(bs.x, nf),
                  c2 = ng_div(bs.y, nf);
      __global const XT *xu = x + b.start, *du = dy + b.start;
      __global XT *dxu = dx + b.start;
      for (uint c0 = 0; c0 < nck; c0 += WG / GN_LW) {
        const uint ck = c0 + wp;
        if (ck < nck) {
          const uint c = nch > 1 ? ck * GN_CHUNK / lv : 0;
          const float wc = c0 == 0 ? wpre
                           : has_w  ? gn_ld_param(w, w_off + first_ch + c, pdt)
                                    : 1.0f;
          NG_RAWV(DTYPE) xv[GN_M], dv[GN_M]; /* storage bits: half the registers of floats */
          GN_LOAD_CHUNK(xv, dv, xu, du, ck, nv, NG_LDRV_LAST);
          NG_UNROLL_STORES
          for (int q = 0; q < GN_M; q++) {
            const uint i = ck * GN_CHUNK + (uint)q * GN_LW + lane;
            const floatV xh = (NG_WIDENV(DTYPE, xv[q]) - mu) * rs;
            const floatV g = NG_WIDENV(DTYPE, dv[q]) * wc;
            if (i < nv) NG_STV_LAST(DTYPE, dxu, i, ((g - xh * c1) - c2) * rs);
          }
        }
      }
      if (lid == 0 && late && atomic_inc(&sync[3 + 2 * b.blk]) == U - 1) {
#if NG_NV_SHFL
        if (tags) gn_tag_clear(tg + 2 * (ulong)b.blk * U, U);
#endif
        atomic_xchg(&sync[2 + 2 * b.blk], 0u);
        atomic_xchg(&sync[3 + 2 * b.blk], 0u);
      }
    }
#if GN_FUSED_GRAD
    /* glast was set before the barrier ahead of dx, and is set again only after the next
     * ticket's barriers */
    if (sums && glast) {
      const uint first_ch = gfirst, nch = gnch, C = G * Cg;
      __global volatile const float *vw = (__global volatile const float *)dwp;
      __global volatile const float *vb = (__global volatile const float *)dbp;
      (void)vw, (void)vb;
      for (uint c = lid; c < nch; c += WG) {
        const uint ch = first_ch + c;
        float sw = 0.0f, sb = 0.0f;
        /* the partial rows in order: the same bits every run. Four at a time: fully unrolled,
         * its loads in flight took the bf16 kernel from 64 registers to 76 (a group fewer a
         * compute unit), and one at a time a U-Net's [16, 320, 64·64] 63-64 -> 69-70 us; f16
         * (80 registers either way) took [8, 320, 64·64] 43.6-43.7 us one at a time, 46.2-46.8
         * four at a time */
#if DTYPE == NG_F16
#pragma unroll 1
#else
#pragma unroll 4
#endif
        for (uint r = 0; r < prows; r++) {
          GN_IF_DW(sw += vw[(ulong)r * C + ch]);
          GN_IF_DB(sb += vb[(ulong)r * C + ch]);
        }
        /* element offsets in the gradient's dtype (gn_ld_param's convention) */
        GN_IF_DW(gn_grad_put(gdw, gdw_off + ch, gdt, gacc, sw));
        GN_IF_DB(gn_grad_put(gdb, gdb_off + ch, gdt, gacc, sb));
      }
    }
#endif
  }
}
#endif

#if SLOTS > 0 && WG > 1 && VEC == 8
/* ---- held blocks (GPU, U = 1) -----------------------------------------------------------------
 * Many blocks of at most WG·SLOTS vectors: a work-group holds a block's x and dy in registers
 * (storage bits), so each is read once, and dx follows the block sums Σ g·xhat, Σ g (one paired
 * work-group sum, the same code whatever is frozen, so dx has the same bits). With dW or dB each
 * vector's Σ dy·xhat and Σ dy go to local memory (double-buffered by block, so that the next
 * block's writes need no barrier of their own, where two buffers fit), and each channel (sv
 * consecutive vectors) is
 * summed by T work-items, a power of two with T·Cg ≤ WG: each adds every T-th vector of the
 * channel in order, then the T meet in a tree (local memory and barriers; on NVIDIA warp
 * shuffles, and past 32 work-items a channel, which it takes only where a lane would add more
 * than 16 vectors, the warps' sums in order through local memory after one barrier). A
 * warp-shuffle sum per vector instead cost the shuffles' throughput (H100, bf16, [1, 8192,
 * 4096], G = 4096: 94.9 us with dW against 78.3 frozen).
 * The order is fixed by the shape alone: every run gives the same bits. With one sample
 * (direct) a channel's sum is its gradient, written in the gradient's dtype (added to it with
 * gacc), so no reduction launch follows; else row b of the partials dwp / dbp, which the grid's
 * last groups sum (FUSED_RED, gn_held_reduce) or ng_reduce_partials does. */
/* dx widens x and dy again from their storage bits. For f16 on NVIDIA the compiler would rather
 * keep the first widening's floats live through the channel sums: 95 registers with dW where
 * bf16 takes 64 (H100, [1, 8192, 4096], G = 4096, on 512 work-items: 118.7 us against bf16's
 * 77.6). A volatile conversion cannot be merged with the first, so it widens again, as bf16's
 * shifts do: 84 registers, 109.1 us; the host then gives f16 256 work-items (78.2 us). */
#if DTYPE == NG_F16 && NG_NV_SHFL
inline float2 gn_f16x2_again(uint w) {
  float a, b;
  asm volatile("{.reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h;}"
               : "=f"(a), "=f"(b)
               : "r"(w));
  return (float2)(a, b);
}
inline float8 gn_f16x8_again(uint4 u) {
  return (float8)(gn_f16x2_again(u.x), gn_f16x2_again(u.y), gn_f16x2_again(u.z),
                  gn_f16x2_again(u.w));
}
#define GN_WIDEN_AGAIN(r) gn_f16x8_again(r)
#else
#define GN_WIDEN_AGAIN(r) NG_WIDENV(DTYPE, r)
#endif
/* HELD_BUFS: 2 (the default) or 1 buffer of per-vector pairs in local memory; one where two
 * would not fit (wide blocks, held_bufs in src/ops/groupnorm.c) */
#ifndef HELD_BUFS
#define HELD_BUFS 2
#endif
/* FUSED_RED (several samples, built only for them): the partial rows, one per sample, are summed
 * by the grid's last groups to finish (ng_fused_arrive: at most half the compute units wait for
 * the rest) and written in the gradients' dtype (a kernel argument here), so no
 * ng_reduce_partials launch follows. Every group arrives once, after its last block (one fence
 * and one atomic a group; the host takes it only on a resident grid, held_fused_wanted).
 * Reducer k's work-items each take columns (k + i·reducers)·WG + lid of the dW then dB sections
 * and add the B rows in order (the same bits every run, whatever the grid), without barriers.
 * Register counts on the H100 (bf16, with dW and dB), which set how many groups a compute unit
 * holds: 64 at 512 × 2 and 80 at 256 × 3, as without the sum. The row ops' blocks of columns
 * met in a tree (ng_fused_sum_block) took 96-99 at 512 × 2, and so did arriving before the last
 * block's dx stores (so that the fence would not wait for them), which keeps x and dy live
 * across the wait: 96, and 120 at 256 × 3 (docs/groupnorm.md has the times). */
#if FUSED_RED && (COMPUTE_DW || COMPUTE_DB)
inline void gn_held_reduce(__global volatile uint *sync, uint k, uint B, __global const float *pw,
                           __global const float *pb, uint C, __global uchar *gdw, ulong gdw_off,
                           __global uchar *gdb, ulong gdb_off, int gdt, int gacc, uint reducers) {
  const uint nw = COMPUTE_DW ? C : 0, tot = nw + (COMPUTE_DB ? C : 0);
  for (uint q = k * WG + get_local_id(0); q < tot; q += reducers * WG) {
    const bool is_w = q < nw;
    const uint c = is_w ? q : q - nw;
    __global volatile const float *p = (__global volatile const float *)(is_w ? pw : pb) + c;
    float v = 0.0f;
    for (uint r = 0; r < B; r++) v += p[(ulong)r * C];
    if (is_w) gn_grad_put(gdw, gdw_off + c, gdt, gacc, v);
    else gn_grad_put(gdb, gdb_off + c, gdt, gacc, v);
  }
  ng_fused_depart(sync, reducers);
}
#endif
#if GN_LW == 32
#define GN_HELD_TFREE 32 /* work-items a channel beyond which each must add more than 16 vectors */
#else
#define GN_HELD_TFREE WG
#endif
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_groupnorm_bwd_held(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
                      __global const uchar *w, ulong w_off, int pdt, int has_w,
                      __global const float *mean, ulong mean_off, __global const float *rstd,
                      ulong rstd_off, __global XT *dx, ulong dx_off, __global float *dwp,
                      ulong dwp_off, __global float *dbp, ulong dbp_off, uint blocks, uint G,
                      uint Cg, uint S, __global uchar *gdw, ulong gdw_off, __global uchar *gdb,
                      ulong gdb_off, int gdt, int gacc, int direct, __global volatile uint *fsync,
                      ulong fsync_off, uint freducers) {
  __local float2 red[WG];
#if FUSED_RED && (COMPUTE_DW || COMPUTE_DB)
  fsync += fsync_off;
#else
  (void)fsync, (void)fsync_off, (void)freducers;
#endif
#if COMPUTE_DW || COMPUTE_DB
  __local float2 lc[HELD_BUFS * WG * SLOTS];
  __local float2 lt[WG / GN_LW];
#else
  (void)gdw, (void)gdw_off, (void)gdb, (void)gdb_off, (void)gdt, (void)gacc, (void)direct;
#endif
  const uint lid = get_local_id(0);
  dy += dy_off, x += x_off, dx += dx_off, mean += mean_off, rstd += rstd_off;
  GN_DWP_OFF();
  GN_DBP_OFF();
  const uint sv = S / VEC, nvb = Cg * sv;
  const ulong n = (ulong)nvb * VEC;
  const float nf = (float)n;
#if COMPUTE_DW || COMPUTE_DB
  uint T = 1; /* work-items per channel */
  while (T * 2 * Cg <= WG && T < sv && (T < GN_HELD_TFREE || sv / T > 16)) T *= 2;
  const uint sub = lid % T;
  uint buf = 0;
#endif
  for (uint blk = get_group_id(0); blk < blocks; blk += get_num_groups(0)) {
    const ulong o = blk * n;
    NG_RAWV(DTYPE) xr[SLOTS], dr[SLOTS];
    GN_LOAD_UNIT(xr, x + o, 0, nvb);
    GN_LOAD_UNIT(dr, dy + o, 0, nvb);
    NG_SLICE_PREFETCH1(x, blk, get_num_groups(0), blocks, n, lid, nvb);
    NG_SLICE_PREFETCH1(dy, blk, get_num_groups(0), blocks, n, lid, nvb);
    const float mu = mean[blk], rs = rstd[blk];
    const uint ch0 = (blk % G) * Cg;
#if COMPUTE_DW || COMPUTE_DB
    __local float2 *lb = lc + (HELD_BUFS == 2 ? buf : 0u) * (WG * SLOTS);
#endif
    float wc[SLOTS];
    floatV a1 = (floatV)(0.0f), a2 = (floatV)(0.0f);
#pragma unroll
    for (int q = 0; q < SLOTS; q++) {
      const uint i = (uint)q * WG + lid;
      wc[q] = has_w && i < nvb ? gn_ld_param(w, w_off + ch0 + i / sv, pdt) : 1.0f;
      const floatV d = NG_WIDENV(DTYPE, dr[q]), xh = (NG_WIDENV(DTYPE, xr[q]) - mu) * rs;
      const floatV g = d * wc[q];
      a1 = fma(g, xh, a1); /* zeros past the block's end add nothing */
      a2 += g;
#if COMPUTE_DW || COMPUTE_DB
      if (i < nvb) lb[i] = (float2)(ng_hsum(d * xh), ng_hsum(d));
#endif
    }
    /* its barriers also make lb visible to the whole group */
    const float2 s = ng_wg_sum2((float2)(ng_hsum(a1), ng_hsum(a2)), red);
#if COMPUTE_DW || COMPUTE_DB
    for (uint c0 = 0; c0 < Cg; c0 += WG / T) { /* the same trip count in every work-item */
      const uint c = c0 + lid / T;
      float2 v = (float2)(0.0f);
      if (c < Cg)
        for (uint j = c * sv + sub; j < (c + 1) * sv; j += T) v += lb[j];
#if GN_LW == 32
      for (uint h = min(T, 32u) / 2; h > 0; h >>= 1)
        v += (float2)(ng_shfl_xor(v.x, (int)h), ng_shfl_xor(v.y, (int)h));
      if (T > 32) { /* Cg·T ≤ WG: the only pass of c0; lt is next written after the next block's
                     * work-group sum */
        if (lid % 32 == 0) lt[lid / 32] = v;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (sub == 0)
          for (uint k = 1; k < T / 32; k++) v += lt[lid / 32 + k];
      }
#else
      if (T > 1) {
        lt[lid] = v;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint h = T / 2; h > 0; h >>= 1) {
          if (sub < h) lt[lid] += lt[lid + h];
          barrier(CLK_LOCAL_MEM_FENCE);
        }
        v = lt[lid];
        barrier(CLK_LOCAL_MEM_FENCE); /* lt is rewritten by the next channels */
      }
#endif
      if (sub == 0 && c < Cg) {
        const uint ch = ch0 + c;
        if (direct) { /* element offsets in the gradient's dtype (gn_ld_param's convention) */
          GN_IF_DW(gn_grad_put(gdw, gdw_off + ch, gdt, gacc, v.x));
          GN_IF_DB(gn_grad_put(gdb, gdb_off + ch, gdt, gacc, v.y));
        } else {
          const ulong prow = (ulong)(blk / G) * (G * Cg);
          GN_IF_DW(dwp[prow + ch] = v.x);
          GN_IF_DB(dbp[prow + ch] = v.y);
        }
      }
    }
    /* the next block writes the other buffer; the one after it this one, after the next block's
     * work-group sum, which every work-item reaches only once done reading here. One buffer:
     * the next block's writes wait for these reads. */
    buf ^= 1u;
    if (HELD_BUFS == 1) barrier(CLK_LOCAL_MEM_FENCE);
#endif
    const float c1 = ng_div(s.x, nf), c2 = ng_div(s.y, nf);
    NG_UNROLL_STORES
    for (int q = 0; q < SLOTS; q++) {
      const uint i = (uint)q * WG + lid;
      const floatV xh = (GN_WIDEN_AGAIN(xr[q]) - mu) * rs;
      const floatV g = GN_WIDEN_AGAIN(dr[q]) * wc[q];
      if (i < nvb) STX(dx + o, i, ((g - xh * c1) - c2) * rs);
    }
  }
#if FUSED_RED && (COMPUTE_DW || COMPUTE_DB)
  /* red is free: its last reads precede the arrival's first barrier */
  const int k = ng_fused_arrive(fsync, freducers, (__local float *)red);
  if (k >= 0)
    gn_held_reduce(fsync, (uint)k, blocks / G, dwp, dbp, G * Cg, gdw, gdw_off, gdb, gdb_off, gdt,
                   gacc, freducers);
#endif
}
#undef GN_HELD_TFREE
#endif
#endif
