/* PolyNorm forward and backward (SPEC.md "PolyNorm").
 *
 * Rows of n elements; per row, for p = 3, 2, 1: rstd_p = 1/sqrt(mean(x^2p) + eps). Every power
 * is formed in f32 from the loaded value (x⁶ of an f16 x near 100 is 1e12: far beyond f16, easy
 * for f32). Persistent grid as in rmsnorm.cl: work-group g handles rows g, g + groups, …; WG = 1
 * is a row per work-item (CPU shape), WG > 1 a row per work-group (GPU shape).
 *
 * Options beyond ng_common.clh: BWD (1 builds the backward kernel, 0 the forward one: a program
 * holds only the pass it is built for), COMPUTE_DW, COMPUTE_DB (backward; 0 compiles that
 * parameter's sums out). The parameters (w[3], b[1]) are read once per work-group, so their
 * dtype is a kernel argument rather than a build option. */

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

inline float pn_ld_param(__global const uchar *p, ulong i, int dt) {
  if (dt == NG_F32) return ((__global const float *)p)[i];
  if (dt == NG_F16) return vload_half(i, (__global const half *)p);
  return ng_bf16_to_f32(((__global const ushort *)p)[i]);
}

/* GPU: rows of at most PN_REG vectors per work-item (the launch gives two) are held in
 * registers and read once; longer rows stream twice. Same sums in the same order. */
#define PN_REG 2

/* A held vector of the GPU forward: bf16 in its storage bits (NG_RAWV), others as floats */
#if DTYPE == NG_BF16
#define PN_HELDT NG_RAWV(DTYPE)
#define PN_HELD_LD(p, i) NG_LDRV(DTYPE, p, i)
#define PN_HELD_W(r) NG_WIDENV(DTYPE, r)
#else
#define PN_HELDT floatV
#define PN_HELD_LD(p, i) LDX(p, i)
#define PN_HELD_W(r) (r)
#endif

/* GPU shape (PREFETCH, NVIDIA): ask L2 for this work-item's vectors of the group's next row
 * of tensor t before the row's reduction stalls the group. Rows of up to two vectors per
 * work-item only: with longer ones the prefetched rows evicted the current ones before their
 * second pass (measured on the H100: a gain up to N = 16384, a loss at 32768 and 65536). */
#if PREFETCH
#define PN_PREFETCH_NEXT(t)                                                                          \
  do {                                                                                               \
    if (nv <= 2 * WG && r + get_num_groups(0) < rows) {                                              \
      const ulong nx_ = (ulong)(r + get_num_groups(0)) * n;                                          \
      for (uint i = lid; i < nv; i += WG) NG_PREFETCH((t) + nx_ + (ulong)i * VEC);                   \
    }                                                                                                \
  } while (0)
#else
#define PN_PREFETCH_NEXT(t) ((void)0)
#endif

#if !BWD
/* One vector's share of the three row sums, in the forward's order: Σx², Σx⁴, Σx⁶ (on CPUs a
 * chunk feeds its low half, then its high half). Both shapes. */
#define PN_SUMS1(val)                                                                                \
  do {                                                                                               \
    const floatV v_ = (val), v2_ = v_ * v_, v3_ = v2_ * v_;                                          \
    a1 += v2_;                                                                                       \
    a2 = fma(v2_, v2_, a2);                                                                          \
    a3 = fma(v3_, v3_, a3);                                                                          \
  } while (0)
/* y of x v (a vector or a chunk; v a plain variable: it is named three times) with the row's k3,
 * k2, k1 and the bias bb, the one expression of every path: by Horner's rule, three
 * multiply-adds where the sum of the three terms took six operations (the same f32 polynomial,
 * rounded differently). The held forward runs one group of 1024 per compute unit, whose row
 * arithmetic memory does not hide: H200, bf16, rows·N = 2^25, two rounds, 4096 45.3-45.5 ->
 * 43.7-44.3 us, 8192 45.2-45.4 -> 43.4-44.0, 16384 48.5-49.1 -> 46.6-47.0, the split rows at
 * 32768 49.7-50.1 -> 47.7-48.4 and 65536 51.9-52.7 -> 50.5-51.6, f16 8192 -3.4 %. */
#define PN_Y(v) (((k3 * (v) + k2) * (v) + k1) * (v) + bb)
/* GPU shape: the row's three sums over the work-group, its rstds (stored), and k3, k2, k1 */
#define PN_GPU_ROW_STATS()                                                                           \
  const float4 s_ = ng_wg_sum4((float4)(ng_hsum(a1), ng_hsum(a2), ng_hsum(a3), 0.0f), red4);       \
  const float r1 = rsqrt(s_.x / (float)n + eps), r2 = rsqrt(s_.y / (float)n + eps);                \
  const float r3 = rsqrt(s_.z / (float)n + eps);                                                     \
  if (lid == 0) {                                                                                    \
    rstd[(ulong)r * 3] = r3;                                                                         \
    rstd[(ulong)r * 3 + 1] = r2;                                                                     \
    rstd[(ulong)r * 3 + 2] = r1;                                                                     \
  }                                                                                                  \
  const float k3 = w0 * r3, k2 = w1 * r2, k1 = w2 * r1
/* the chunk loop over row r (xr → yr) of the forward, with PIPE also the sums of row r+1 (xn) */
#define PN_CPU_LOOP(PIPE, STC_)                                                                      \
  do {                                                                                               \
    for (uint j = 0; j < nc; j++) {                                                                  \
      if (PIPE) {                                                                                    \
        NG_PF_MEM(xn, j);                                                                            \
        PN_SUMS(NG_LDC(DTYPE, xn, j));                                                               \
      }                                                                                              \
      const floatC v = NG_LDC(DTYPE, xr, j);                                                         \
      STC_(DTYPE, yr, j, PN_Y(v));                                                                   \
    }                                                                                                \
  } while (0)
#if NG_CH == 2
#define PN_SUMS(val)                                                                                 \
  do {                                                                                               \
    const floatC c_ = (val);                                                                         \
    PN_SUMS1(c_.lo);                                                                                 \
    PN_SUMS1(c_.hi);                                                                                 \
  } while (0)
#else
#define PN_SUMS(val) PN_SUMS1(val)
#endif

/* The forward kernels' first lines: the buffers at their offsets, the weights and the bias. */
#define PN_FWD_SETUP()                                                                               \
  x += x_off;                                                                                        \
  y += y_off;                                                                                        \
  rstd += rstd_off;                                                                                  \
  const float w0 = pn_ld_param(w, w_off, pdt), w1 = pn_ld_param(w, w_off + 1, pdt);                  \
  const float w2 = pn_ld_param(w, w_off + 2, pdt);                                                   \
  const float bb = has_b ? pn_ld_param(b, b_off, pdt) : 0.0f

/* rstd[r·3 …] = (rstd3, rstd2, rstd1); y = w0·x³·rstd3 + w1·x²·rstd2 + w2·x·rstd1 + b. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_polynorm_fwd(__global const XT *x, ulong x_off, __global const uchar *w, ulong w_off,
                __global const uchar *b, ulong b_off, int pdt, int has_b, __global XT *y,
                ulong y_off, __global float *rstd, ulong rstd_off, uint rows, uint n, float eps) {
  __local float4 red4[WG];
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  PN_FWD_SETUP();
#if WG == 1
  /* CPU shape (ng_common.clh): the group's block of rows, software-pipelined as in
   * rmsnorm.cl: the loop that writes row r (from cache) also reads row r+1 from memory and forms
   * its three sums, each in the order of a plain loop over the row. */
  (void)lid;
  (void)red4;
  NG_ROW_BLOCK(r0, r1, rows);
  NG_CHUNKS(nc, tail, nv);
  floatV a1 = (floatV)(0.0f), a2 = (floatV)(0.0f), a3 = (floatV)(0.0f);
  if (r0 < r1) {
    __global const XT *xn = x + (ulong)r0 * n;
    for (uint j = 0; j < nc; j++) PN_SUMS(NG_LDC(DTYPE, xn, j));
    if (tail) PN_SUMS1(LDX(xn, nv - 1));
  }
  for (uint r = r0; r < r1; r++) {
    const float nf = (float)n;
    const float q1 = rsqrt(ng_hsum(a1) / nf + eps);
    const float q2 = rsqrt(ng_hsum(a2) / nf + eps);
    const float q3 = rsqrt(ng_hsum(a3) / nf + eps);
    rstd[(ulong)r * 3] = q3;
    rstd[(ulong)r * 3 + 1] = q2;
    rstd[(ulong)r * 3 + 2] = q1;
    const float k3 = w0 * q3, k2 = w1 * q2, k1 = w2 * q1;
    a1 = a2 = a3 = (floatV)(0.0f);
    __global const XT *xr = x + (ulong)r * n, *xn = xr + n;
    __global XT *yr = y + (ulong)r * n;
    const bool next = r + 1 < r1;
    /* rstd1 finite: no NaN in x (it would make Σx² NaN); with no NaN parameter the row has no
     * NaN input and is stored with the rounding without the NaN test (same bits,
     * ng_common.clh) */
    const bool fast = isfinite(q1) && !isnan(k1) && !isnan(k2) && !isnan(k3) && !isnan(bb);
    if (next && fast) PN_CPU_LOOP(1, NG_STCF);
    else if (next) PN_CPU_LOOP(1, NG_STC);
    else if (fast) PN_CPU_LOOP(0, NG_STCF);
    else PN_CPU_LOOP(0, NG_STC);
    if (tail) {
      if (next) PN_SUMS1(LDX(xn, nv - 1));
      const floatV v = LDX(xr, nv - 1);
      STX(yr, nv - 1, PN_Y(v));
    }
  }
#else
  const bool cached = nv <= (uint)(WG * PN_REG);
  for (uint r = get_group_id(0); r < rows; r += get_num_groups(0)) {
    __global const XT *xr = x + (ulong)r * n;
    __global XT *yr = y + (ulong)r * n;
    floatV a1 = (floatV)(0.0f), a2 = (floatV)(0.0f), a3 = (floatV)(0.0f);
    if (cached) {
      /* the row in registers, read once (same sums, same order); bf16 rows in their storage
       * bits, widened at each use (the same values): as floats the kernel took 81 registers in
       * groups of 512, too many for two such groups on an H100 compute unit (65536 registers),
       * and N = 8192 ran at 0.71 of copy, in storage bits 64 registers and 0.83. f16 rows lost
       * that way (8192: 53 -> 56 us, 16384: 62 -> 68-71 us), so they stay floats. */
      PN_HELDT xs[PN_REG];
#pragma unroll
      for (int k = 0; k < PN_REG; k++) {
        const uint i = lid + (uint)k * WG;
        xs[k] = i < nv ? PN_HELD_LD(xr, i) : (PN_HELDT)(0);
      }
      PN_PREFETCH_NEXT(x);
#pragma unroll
      for (int k = 0; k < PN_REG; k++) {
        if (lid + (uint)k * WG < nv) PN_SUMS1(PN_HELD_W(xs[k]));
      }
      PN_GPU_ROW_STATS();
      NG_UNROLL_STORES
      for (int k = 0; k < PN_REG; k++) {
        const uint i = lid + (uint)k * WG;
        const floatV v = PN_HELD_W(xs[k]);
        if (i < nv) STX(yr, i, PN_Y(v));
      }
      continue;
    }
    PN_PREFETCH_NEXT(x);
    for (uint i = lid; i < nv; i += WG) PN_SUMS1(LDX(xr, i));
    PN_GPU_ROW_STATS();
    for (uint i = lid; i < nv; i += WG) {
      const floatV v = LDX(xr, i);
      STX(yr, i, PN_Y(v));
    }
  }
#endif
}

/* ---- forward of bf16 rows too long for a group's registers, split across groups (GPU) ------
 * ng_polynorm_fwd holds rows of up to PN_REG vectors a work-item and streams longer ones twice
 * (the second time from L2). Here S work-groups share each row, a slice of WG·REG vectors each,
 * held in registers as storage bits, and exchange their shares of the three sums (ng_common.clh,
 * "rows split across work-groups"), added in slice order, so x is read once and every slice
 * gets the same rstds. Built with REG, which the host adds for this launch only. */
#ifdef REG
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_polynorm_fwd_coop(__global const XT *x, ulong x_off, __global const uchar *w, ulong w_off,
                     __global const uchar *b, ulong b_off, int pdt, int has_b, __global XT *y,
                     ulong y_off, __global float *rstd, ulong rstd_off, uint rows, uint n,
                     float eps, __global volatile uint *sync, ulong sync_off, uint S) {
#if WG > 1
  __local float4 red4[WG];
  /* the collected sums, two buffers in turn: the last row is collected without a work-group sum
   * (and its barriers) between it and the row before */
  __local float4 total[2];
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  PN_FWD_SETUP();
  NG_COOP_PLACE(tk, sync, sync_off, S, sets, k, sl, nv, sw, c0, ce);
  /* Under NG_COOP_AHEAD (bf16 and f32 rows) each group publishes its shares of the set's next
   * row before it collects this row's, as ng_rmsnorm_fwd_coop: xs holds this row's slice, xn
   * the next row's; under NG_COOP_LATE (bf16) after this row's collect, as there. */
  NG_RAWV(DTYPE) xs[REG], xn[REG];
#define PN_COOP_LOAD(xv, r_)                                                                       \
  do {                                                                                             \
    NG_SLICE_LOAD1(xv, x + (ulong)(r_) * n, c0, ce);                                               \
    NG_SLICE_PREFETCH1(x, r_, sets, rows, n, c0, ce);                                              \
  } while (0)
#define PN_COOP_SUMS(xv, it_)                                                                      \
  do {                                                                                             \
    floatV a1 = (floatV)(0.0f), a2 = (floatV)(0.0f), a3 = (floatV)(0.0f);                          \
    _Pragma("unroll") for (int q = 0; q < REG; q++) if (c0 + (uint)q * WG < ce)                    \
        PN_SUMS1(NG_WIDENV(DTYPE, (xv)[q]));                                                       \
    const float4 mine =                                                                            \
        ng_wg_sum4((float4)(ng_hsum(a1), ng_hsum(a2), ng_hsum(a3), 0.0f), red4);                   \
    ng_coop_publish(mine, 3, it_, k, sl, S, sync, sets);                                           \
  } while (0)
  if (NG_COOP_AHEAD && k < rows) {
    PN_COOP_LOAD(xs, k);
    PN_COOP_SUMS(xs, 0);
  }
  uint it = 0;
  for (uint r = k; r < rows; r += sets, it++) {
    __global XT *yr = y + (ulong)r * n;
    const bool more = r + sets < rows;
    if (!NG_COOP_AHEAD) {
      PN_COOP_LOAD(xs, r);
      PN_COOP_SUMS(xs, it);
    } else if (more) {
      PN_COOP_LOAD(xn, r + sets);
      if (!NG_COOP_LATE) PN_COOP_SUMS(xn, it + 1);
    }
    const float4 s_ = ng_coop_collect(3, 0, 0, it, k, S, sync, sets, &total[it & 1]);
    if (NG_COOP_LATE && more) PN_COOP_SUMS(xn, it + 1);
    const float r1 = rsqrt(s_.x / (float)n + eps), r2 = rsqrt(s_.y / (float)n + eps);
    const float r3 = rsqrt(s_.z / (float)n + eps);
    if (sl == 0 && lid == 0) {
      rstd[(ulong)r * 3] = r3;
      rstd[(ulong)r * 3 + 1] = r2;
      rstd[(ulong)r * 3 + 2] = r1;
    }
    const float k3 = w0 * r3, k2 = w1 * r2, k1 = w2 * r1;
    NG_UNROLL_STORES
    for (int q = 0; q < REG; q++) {
      const uint i = c0 + (uint)q * WG;
      const floatV v = NG_WIDENV(DTYPE, xs[q]);
      if (i < ce) STX(yr, i, PN_Y(v));
    }
    if (NG_COOP_AHEAD && more) {
#pragma unroll
      for (int q = 0; q < REG; q++) xs[q] = xn[q];
    }
  }
#undef PN_COOP_LOAD
#undef PN_COOP_SUMS
  (void)ng_coop_leave(sync, sets, &tk);
#else
  /* the CPU shape never takes this kernel */
  (void)x, (void)x_off, (void)w, (void)w_off, (void)b, (void)b_off, (void)pdt, (void)has_b;
  (void)y, (void)y_off, (void)rstd, (void)rstd_off, (void)rows, (void)n, (void)eps;
  (void)sync, (void)sync_off, (void)S;
#endif
}
#endif

#else
/* Row r's rstd, its dW terms and the dx coefficients, from the row sums s1, s2, s3. */
#if COMPUTE_DW
#define PN_DW_ADD()                                                                                  \
  do {                                                                                               \
    dw3 = fma(r3, s3, dw3);                                                                          \
    dw2 = fma(r2, s2, dw2);                                                                          \
    dw1 = fma(r1, s1, dw1);                                                                          \
  } while (0)
#else
#define PN_DW_ADD() ((void)0)
#endif
#define PN_BWD_COEFFS()                                                                              \
  PN_BWD_COEFFS_OF(rstd[(ulong)r * 3], rstd[(ulong)r * 3 + 1], rstd[(ulong)r * 3 + 2])
/* the same from the row's rstds r3_, r2_, r1_ */
#define PN_BWD_COEFFS_OF(r3_, r2_, r1_)                                                              \
  const float r3 = (r3_), r2 = (r2_), r1 = (r1_);                                                    \
  PN_DW_ADD();                                                                                       \
  const float c2 = 3.0f * w0 * r3, c1 = 2.0f * w1 * r2, c0 = w2 * r1;                                \
  const float K3 = c2 * (r3 * r3) * ng_div(s3, nf), K2 = c1 * (r2 * r2) * ng_div(s2, nf);          \
  const float K1 = c0 * (r1 * r1) * ng_div(s1, nf)
/* GPU shape: the row's four sums across the group, then PN_BWD_COEFFS */
#if COMPUTE_DB
#define PN_GPU_BWD_STATS()                                                                           \
  const float4 sums =                                                                                \
      ng_wg_sum4((float4)(ng_hsum(a1), ng_hsum(a2), ng_hsum(a3), ng_hsum(ad)), red4);              \
  dbs += sums.w;                                                                                     \
  const float s1 = sums.x, s2 = sums.y, s3 = sums.z;                                                 \
  PN_BWD_COEFFS()
#else
#define PN_GPU_BWD_STATS()                                                                           \
  const float4 sums = ng_wg_sum4((float4)(ng_hsum(a1), ng_hsum(a2), ng_hsum(a3), 0.0f), red4);     \
  const float s1 = sums.x, s2 = sums.y, s3 = sums.z;                                                 \
  PN_BWD_COEFFS()
#endif
/* dx of dy d and x v (vectors or chunks) */
#define PN_DX(d, v)                                                                                  \
  ((d) * ((c2 * (v) + c1) * (v) + c0) - ((K3 * ((v) * (v)) + K2) * ((v) * (v)) + K1) * (v))

/* CPU shape: the four row sums of dy d and x v (one vector), in the GPU loop's order; a chunk
 * feeds its low half, then its high half. The chunk loop over row r that writes dx, with PIPE
 * also the sums of row r+1. */
#if COMPUTE_DB
#define PN_DB_ADD(d) (ad += (d))
#else
#define PN_DB_ADD(d) ((void)0)
#endif
#define PN_BSUMS1(dval, vval)                                                                        \
  do {                                                                                               \
    const floatV d_ = (dval), v_ = (vval), dv_ = d_ * v_, dv2_ = dv_ * v_;                           \
    a1 += dv_;                                                                                       \
    a2 += dv2_;                                                                                      \
    a3 = fma(dv2_, v_, a3);                                                                          \
    PN_DB_ADD(d_);                                                                                   \
  } while (0)
#if NG_CH == 2
#define PN_BSUMS(dval, vval)                                                                         \
  do {                                                                                               \
    const floatC dc_ = (dval), vc_ = (vval);                                                         \
    PN_BSUMS1(dc_.lo, vc_.lo);                                                                       \
    PN_BSUMS1(dc_.hi, vc_.hi);                                                                       \
  } while (0)
#else
#define PN_BSUMS(dval, vval) PN_BSUMS1(dval, vval)
#endif
#define PN_BWD_CPU_LOOP(PIPE, STC_)                                                                  \
  do {                                                                                               \
    for (uint j = 0; j < nc; j++) {                                                                  \
      const floatC d = NG_LDC(DTYPE, dyr, j), v = NG_LDC(DTYPE, xr, j);                              \
      if (PIPE) {                                                                                    \
        NG_PF_MEM(dyn, j);                                                                           \
        NG_PF_MEM(xn, j);                                                                            \
        PN_BSUMS(NG_LDC(DTYPE, dyn, j), NG_LDC(DTYPE, xn, j));                                       \
      }                                                                                              \
      STC_(DTYPE, dxr, j, PN_DX(d, v));                                                              \
    }                                                                                                \
  } while (0)

/* The backward kernels' first lines: the work-item, the row's vectors, the buffers at their
 * offsets, the weights and n as a float. */
#define PN_BWD_SETUP()                                                                               \
  const uint lid = get_local_id(0);                                                                  \
  const uint nv = n / VEC;                                                                           \
  dy += dy_off;                                                                                      \
  x += x_off;                                                                                        \
  dx += dx_off;                                                                                      \
  rstd += rstd_off;                                                                                  \
  const float w0 = pn_ld_param(w, w_off, pdt), w1 = pn_ld_param(w, w_off + 1, pdt);                 \
  const float w2 = pn_ld_param(w, w_off + 2, pdt);                                                   \
  const float nf = (float)n

#ifndef PN_CHUNK
#define PN_CHUNK 0
#endif
#if PN_CHUNK && WG > 1
/* The in-kernel sum of the held backward's partials (PN_CHUNK; host: chunk_wanted in
 * src/ops/polynorm.c). A group's partial row is four floats (dW's three, dB's one) and the
 * grids are large (up to 32 groups a compute unit, more than are resident), so instead of
 * reducers that wait for the whole grid and then walk every row (ng_fused_reduce), the rows are
 * summed in chunks of PN_CHUNK_ROWS as they arrive, and nobody waits:
 *  - work-item 0 of each group, after its row, fences it device-wide and counts the group in
 *    its chunk's counter (area[1 + c], chunk c = groups c·PN_CHUNK_ROWS …); the chunk's last
 *    arriver, whichever it is, adds the chunk's rows in a fixed order and, where there are
 *    several chunks, stores the sum as chunk row c (area[1 + C + 4c …], the bits as uints) and
 *    counts itself in area[0];
 *  - the last of those adds the C chunk rows the same way and writes dW and dB (or adds to them).
 * The same bits on every run, whichever groups finish last. Every counter goes back to zero, and
 * the chunk rows too, for the area's next user on this queue (split kernels expect zeros).
 * On NVIDIA warp 0 alone does this, by shuffles, and the other warps leave after their stores.
 * A first version in which the whole group waited at a barrier for the count (a global-memory
 * one, which also waits for the group's own stores), with chunks of WG rows, gained 0.8-2.9 µs
 * at N = 1024 (H100, bf16) where this one gains 4.1-4.3: the wait keeps the group's slot through
 * the round trips, and these grids run in several waves. */
#define PN_CHUNK_ROWS PN_CHUNK /* the option's value: groups a chunk (src/ops/polynorm.c) */
inline float4 pn_part_row(__global const float *pdw, __global const float *pdb, ulong r) {
  __global volatile const float *pw = pdw, *pb = pdb;
  return (float4)(COMPUTE_DW ? pw[3 * r] : 0.0f, COMPUTE_DW ? pw[3 * r + 1] : 0.0f,
                  COMPUTE_DW ? pw[3 * r + 2] : 0.0f, COMPUTE_DB ? pb[r] : 0.0f);
}
inline void pn_crow_put(__global volatile uint *crow, uint k, float4 v) {
  crow[4 * k] = as_uint(v.x);
  crow[4 * k + 1] = as_uint(v.y);
  crow[4 * k + 2] = as_uint(v.z);
  crow[4 * k + 3] = as_uint(v.w);
}
inline float4 pn_crow(__global volatile const uint *crow, uint k) {
  return (float4)(as_float(crow[4 * k]), as_float(crow[4 * k + 1]), as_float(crow[4 * k + 2]),
                  as_float(crow[4 * k + 3]));
}
/* Work-item 0's count in `cnt` of `of`: whether it was the last (then the counter is back to
 * zero and this work-item sees what the others stored before their counts). */
inline uint pn_count_last(__global volatile uint *cnt, uint of) {
  NG_FENCE_DEVICE();
  const uint last = atomic_inc(cnt) == of - 1;
  if (last) {
    atomic_xchg(cnt, 0u);
    NG_FENCE_DEVICE();
  }
  return last;
}
inline void pn_chunk_write(float4 v, __global NG_STORE(G_DTYPE) *dw,
                           __global NG_STORE(G_DTYPE) *db, int acc) {
#if COMPUTE_DW
  const float r[3] = {v.x, v.y, v.z};
  for (uint j = 0; j < 3; j++) NG_ST1(G_DTYPE, dw, j, acc ? NG_LD1(G_DTYPE, dw, j) + r[j] : r[j]);
#endif
#if COMPUTE_DB
  NG_ST1(G_DTYPE, db, 0, acc ? NG_LD1(G_DTYPE, db, 0) + v.w : v.w);
#endif
}
#if NG_NV_SHFL && WG % 32 == 0
inline float4 pn_warp_sum4(float4 v) {
  for (int m = 16; m > 0; m >>= 1)
    v += (float4)(ng_shfl_xor(v.x, m), ng_shfl_xor(v.y, m), ng_shfl_xor(v.z, m),
                  ng_shfl_xor(v.w, m));
  return v;
}
#endif
inline void pn_chunk_reduce(__global volatile uint *a, __global const float *pdw,
                            __global const float *pdb, __global NG_STORE(G_DTYPE) *dw,
                            __global NG_STORE(G_DTYPE) *db, int acc, __local float4 *buf,
                            __local uint *flag) {
#if NG_NV_SHFL && WG % 32 == 0
  /* read here, not taken from the row loop's: with get_num_groups and get_group_id the
   * compiler kept this function's values live through the loop (98 registers instead of 80 at
   * WG = 256 with PREFETCH, three groups a compute unit instead of four; H100 4096 with dW
   * 83.6-84.1 -> 88.8-89.0 us) */
  uint G, g;
  asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(G));
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(g));
#else
  const uint G = get_num_groups(0), g = get_group_id(0);
#endif
  const uint lid = get_local_id(0);
  const uint C = (G + PN_CHUNK_ROWS - 1) / PN_CHUNK_ROWS, c = g / PN_CHUNK_ROWS;
  const uint c0 = c * PN_CHUNK_ROWS, cn = min((uint)PN_CHUNK_ROWS, G - c0);
  __global volatile uint *crow = a + 1 + C;
#if NG_NV_SHFL && WG % 32 == 0
  (void)buf, (void)flag;
  if (lid >= 32) return; /* work-item 0 wrote the group's row */
  uint last = lid == 0 ? pn_count_last(&a[1 + c], cn) : 0u;
  if (ng_shfl_idx((float)last, 0) == 0.0f) return;
  float4 v = (float4)(0.0f);
  for (uint k = lid; k < cn; k += 32) v += pn_part_row(pdw, pdb, c0 + k);
  v = pn_warp_sum4(v);
  if (C > 1) {
    if (lid == 0) {
      pn_crow_put(crow, c, v);
      last = pn_count_last(&a[0], C);
    }
    if (ng_shfl_idx((float)last, 0) == 0.0f) return;
    v = (float4)(0.0f);
    for (uint k = lid; k < C; k += 32) v += pn_crow(crow, k);
    v = pn_warp_sum4(v);
    for (uint k = lid; k < 4 * C; k += 32) crow[k] = 0u;
  }
#else
  barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
  if (lid == 0) *flag = pn_count_last(&a[1 + c], cn);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (*flag == 0u) return;
  float4 v = (float4)(0.0f);
  for (uint k = lid; k < cn; k += WG) v += pn_part_row(pdw, pdb, c0 + k);
  v = ng_wg_sum4(v, buf);
  if (C > 1) {
    if (lid == 0) {
      pn_crow_put(crow, c, v);
      *flag = pn_count_last(&a[0], C);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (*flag == 0u) return;
    v = (float4)(0.0f);
    for (uint k = lid; k < C; k += WG) v += pn_crow(crow, k);
    v = ng_wg_sum4(v, buf);
    for (uint k = lid; k < 4 * C; k += WG) crow[k] = 0u;
  }
#endif
  if (lid == 0) pn_chunk_write(v, dw, db, acc);
}
#endif

/* With S_p = Σ dy·x^p:
 *   dx = dy·(3·w0·r3·x² + 2·w1·r2·x + w2·r1) − x·(K3·x⁴ + K2·x² + K1),
 *   K3 = 3·w0·r3³·S3/n, K2 = 2·w1·r2³·S2/n, K1 = w2·r1³·S1/n;
 * dw = (Σ r3·S3, Σ r2·S2, Σ r1·S1) and db = Σ dy over this group's rows go to the group's row
 * of the partials: part_dw[g·3 …], part_db[g], summed in the kernel (PN_CHUNK) or by
 * ng_reduce_partials. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_polynorm_bwd(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
                __global const uchar *w, ulong w_off, int pdt, __global const float *rstd,
                ulong rstd_off, __global XT *dx, ulong dx_off, __global float *part_dw,
                ulong pdw_off, __global float *part_db, ulong pdb_off, uint rows, uint n,
                NG_FUSED_ARGS) {
  __local float4 red4[WG];
#if PN_CHUNK && (COMPUTE_DW || COMPUTE_DB) && WG > 1
  __local uint flag; /* pn_chunk_reduce's word for the group */
#endif
  PN_BWD_SETUP();
#if COMPUTE_DW
  float dw3 = 0.0f, dw2 = 0.0f, dw1 = 0.0f;
#else
  (void)part_dw, (void)pdw_off;
#endif
#if COMPUTE_DB
  float dbs = 0.0f;
#else
  (void)part_db, (void)pdb_off;
#endif
#if WG == 1
  /* CPU shape: as the RMSNorm backward (cl/rmsnorm.cl). A contiguous block of rows; the loop
   * that writes row r's dx also forms row r+1's four sums, in the GPU loop's order, while memory
   * streams that row. bf16 rounds without the NaN test unless an f32 input (w or the row's rstd)
   * is NaN: a NaN made from 16-bit inputs has a zero low half, on which both roundings agree. */
  (void)red4;
  NG_ROW_BLOCK(rb0, rb1, rows); /* r1..r3 name the rstds */
  NG_CHUNKS(nc, tail, nv);
  const bool w_ok = !isnan(w0) && !isnan(w1) && !isnan(w2);
  floatV a1 = (floatV)(0.0f), a2 = (floatV)(0.0f), a3 = (floatV)(0.0f), ad = (floatV)(0.0f);
  if (rb0 < rb1) {
    __global const XT *dyn = dy + (ulong)rb0 * n, *xn = x + (ulong)rb0 * n;
    for (uint j = 0; j < nc; j++) PN_BSUMS(NG_LDC(DTYPE, dyn, j), NG_LDC(DTYPE, xn, j));
    if (tail) PN_BSUMS1(LDX(dyn, nv - 1), LDX(xn, nv - 1));
  }
  for (uint r = rb0; r < rb1; r++) {
    const ulong o = (ulong)r * n;
    __global const XT *dyr = dy + o, *xr = x + o, *dyn = dy + o + n, *xn = x + o + n;
    __global XT *dxr = dx + o;
    const float s1 = ng_hsum(a1), s2 = ng_hsum(a2), s3 = ng_hsum(a3);
#if COMPUTE_DB
    dbs += ng_hsum(ad);
#endif
    a1 = a2 = a3 = ad = (floatV)(0.0f);
    PN_BWD_COEFFS();
    const bool next = r + 1 < rb1, fast = w_ok && !isnan(r3) && !isnan(r2) && !isnan(r1);
    if (fast && next) PN_BWD_CPU_LOOP(1, NG_STCF);
    else if (fast) PN_BWD_CPU_LOOP(0, NG_STCF);
    else if (next) PN_BWD_CPU_LOOP(1, NG_STC);
    else PN_BWD_CPU_LOOP(0, NG_STC);
    if (tail) {
      if (next) PN_BSUMS1(LDX(dyn, nv - 1), LDX(xn, nv - 1));
      const floatV d = LDX(dyr, nv - 1), v = LDX(xr, nv - 1);
      STX(dxr, nv - 1, PN_DX(d, v));
    }
  }
#else
  /* Rows of at most PN_REG vectors per work-item: dy and x held in registers in their storage
   * bits (widened at each use) and read once; longer rows stream twice. Same sums, same order. */
  const bool cached = nv <= (uint)(WG * PN_REG);
  for (uint r = get_group_id(0); r < rows; r += get_num_groups(0)) {
    __global const XT *dyr = dy + (ulong)r * n;
    __global const XT *xr = x + (ulong)r * n;
    __global XT *dxr = dx + (ulong)r * n;
    floatV a1 = (floatV)(0.0f), a2 = (floatV)(0.0f), a3 = (floatV)(0.0f);
#if COMPUTE_DB
    floatV ad = (floatV)(0.0f);
#endif
    if (cached) {
      NG_RAWV(DTYPE) dys[PN_REG], xs[PN_REG];
#pragma unroll
      for (int k = 0; k < PN_REG; k++) {
        const uint i = lid + (uint)k * WG;
        dys[k] = i < nv ? NG_LDRV(DTYPE, dyr, i) : (NG_RAWV(DTYPE))(0);
        xs[k] = i < nv ? NG_LDRV(DTYPE, xr, i) : (NG_RAWV(DTYPE))(0);
      }
      PN_PREFETCH_NEXT(dy);
      PN_PREFETCH_NEXT(x);
#pragma unroll
      for (int k = 0; k < PN_REG; k++)
        if (lid + (uint)k * WG < nv) PN_BSUMS1(NG_WIDENV(DTYPE, dys[k]), NG_WIDENV(DTYPE, xs[k]));
      PN_GPU_BWD_STATS();
      NG_UNROLL_STORES
      for (int k = 0; k < PN_REG; k++) {
        const uint i = lid + (uint)k * WG;
        if (i < nv) STX(dxr, i, PN_DX(NG_WIDENV(DTYPE, dys[k]), NG_WIDENV(DTYPE, xs[k])));
      }
      continue;
    }
    PN_PREFETCH_NEXT(dy);
    PN_PREFETCH_NEXT(x);
    for (uint i = lid; i < nv; i += WG) PN_BSUMS1(LDX(dyr, i), LDX(xr, i));
    PN_GPU_BWD_STATS();
    for (uint i = lid; i < nv; i += WG) {
      const floatV d = LDX(dyr, i), v = LDX(xr, i);
      STX(dxr, i, PN_DX(d, v));
    }
  }
#endif
  if (lid == 0) {
    const ulong g = get_group_id(0);
#if COMPUTE_DW
    part_dw[pdw_off + g * 3] = dw3;
    part_dw[pdw_off + g * 3 + 1] = dw2;
    part_dw[pdw_off + g * 3 + 2] = dw1;
#endif
#if COMPUTE_DB
    part_db[pdb_off + g] = dbs;
#endif
  }
#if PN_CHUNK && (COMPUTE_DW || COMPUTE_DB) && WG > 1
  pn_chunk_reduce(fsync + fsync_off, part_dw + pdw_off, part_db + pdb_off, fdw + fdw_off,
                  fdb + fdb_off, facc, red4, &flag);
  (void)fcw, (void)freducers;
#else
  NG_FUSED_UNUSED();
#endif
}

/* ---- backward of bf16 rows too long for a group's registers, split across groups (GPU) -----
 * As in rmsnorm.cl: S work-groups share each row, a slice of WG·REG vectors each, held in
 * registers as storage bits, and exchange their shares of the row's four sums (ng_common.clh,
 * "rows split across work-groups"), so dy and x are read once instead of twice. dW and dB are
 * scalars: slice 0 of each set adds the full row sums' terms, in row order, into its set's four
 * partials (part[k·4 …]: dw3, dw2, dw1, db), and the last group to leave sums the sets' partials
 * in set order into dweight and dbias itself (a reduction launch costs more than these few
 * floats: 5-6 us on the H100). Every frozen combination takes this kernel: dx has the same bits.
 * Built with REG (the host adds it for this launch only) and, with a gradient, its dtype G_DTYPE:
 * PoCL 3.1 sent every work-item through the stores' work-item test when a branch on a dtype
 * argument sat inside it. */
#ifdef REG
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_polynorm_bwd_coop(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
                     __global const uchar *w, ulong w_off, int pdt, __global const float *rstd,
                     ulong rstd_off, __global XT *dx, ulong dx_off, __global float *part,
                     ulong part_off, __global uchar *gdw, ulong gdw_off, __global uchar *gdb,
                     ulong gdb_off, int acc, uint rows, uint n, __global volatile uint *sync,
                     ulong sync_off, uint S) {
#if WG >= 4
  __local float4 red4[WG];
  __local float4 total[2]; /* in turn, as ng_rmsnorm_fwd_coop */
  PN_BWD_SETUP();
  /* v0: the work-item's first vector of the row (c0 is a coefficient of PN_BWD_COEFFS) */
  NG_COOP_PLACE(tk, sync, sync_off, S, sets, k, s, nv, sw, v0, ce);
#if COMPUTE_DW
  float dw3 = 0.0f, dw2 = 0.0f, dw1 = 0.0f;
#endif
#if COMPUTE_DB
  float dbs = 0.0f;
#endif
#if COMPUTE_DB
#define PN_COOP_W 4 /* the shares: Σ dy·x, Σ dy·x², Σ dy·x³ (and Σ dy) */
#else
#define PN_COOP_W 3
#endif
  /* Under NG_COOP_AHEAD (f32 rows without dW, src/ops/polynorm.c) each group publishes its
   * shares of the set's next row before it collects this row's, as ng_rmsnorm_fwd_coop: dys, xs
   * and pr3..pr1 are this row's, dyn, xn and pn3..pn1 the next's. The row's three rstd values are loaded before the exchange, whose wait
   * then covers their latency (H100 at 65536 with the counted exchange: 108.4 -> 93.7 us; with
   * the slots ~1 us). */
  NG_RAWV(DTYPE) dys[REG], xs[REG], dyn[REG], xn[REG];
  float pr3 = 0.0f, pr2 = 0.0f, pr1 = 0.0f, pn3 = 0.0f, pn2 = 0.0f, pn1 = 0.0f;
#define PN_BWD_NEXT(dyv, xv, p3, p2, p1, r_, it_)                                                  \
  do {                                                                                             \
    NG_SLICE_LOAD2(dyv, xv, dy + (ulong)(r_) * n, x + (ulong)(r_) * n, v0, ce);                    \
    NG_SLICE_PREFETCH2(dy, x, r_, sets, rows, n, v0, ce);                                          \
    p3 = rstd[(ulong)(r_) * 3], p2 = rstd[(ulong)(r_) * 3 + 1], p1 = rstd[(ulong)(r_) * 3 + 2];    \
    floatV a1 = (floatV)(0.0f), a2 = (floatV)(0.0f), a3 = (floatV)(0.0f);                          \
    floatV ad = (floatV)(0.0f);                                                                    \
    _Pragma("unroll") for (int q = 0; q < REG; q++) if (v0 + (uint)q * WG < ce)                    \
        PN_BSUMS1(NG_WIDENV(DTYPE, (dyv)[q]), NG_WIDENV(DTYPE, (xv)[q]));                          \
    (void)ad;                                                                                      \
    const float4 mine = ng_wg_sum4(                                                                \
        (float4)(ng_hsum(a1), ng_hsum(a2), ng_hsum(a3), COMPUTE_DB ? ng_hsum(ad) : 0.0f), red4);   \
    ng_coop_publish(mine, PN_COOP_W, it_, k, s, S, sync, sets);                                    \
  } while (0)
  if (NG_COOP_AHEAD && k < rows) PN_BWD_NEXT(dys, xs, pr3, pr2, pr1, k, 0);
  uint it = 0;
  for (uint r = k; r < rows; r += sets, it++) {
    __global XT *dxr = dx + (ulong)r * n;
    if (!NG_COOP_AHEAD) PN_BWD_NEXT(dys, xs, pr3, pr2, pr1, r, it);
    else if (r + sets < rows) PN_BWD_NEXT(dyn, xn, pn3, pn2, pn1, r + sets, it + 1);
    const float4 sums = ng_coop_collect(PN_COOP_W, 0, 0, it, k, S, sync, sets, &total[it & 1]);
#if COMPUTE_DB
    dbs += sums.w;
#endif
    const float s1 = sums.x, s2 = sums.y, s3 = sums.z;
    PN_BWD_COEFFS_OF(pr3, pr2, pr1);
    NG_UNROLL_STORES
    for (int q = 0; q < REG; q++) {
      const uint i = v0 + (uint)q * WG;
      if (i < ce) STX(dxr, i, PN_DX(NG_WIDENV(DTYPE, dys[q]), NG_WIDENV(DTYPE, xs[q])));
    }
    if (NG_COOP_AHEAD && r + sets < rows) {
#pragma unroll
      for (int q = 0; q < REG; q++) dys[q] = dyn[q], xs[q] = xn[q];
      pr3 = pn3, pr2 = pn2, pr1 = pn1;
    }
  }
#undef PN_BWD_NEXT
#undef PN_COOP_W
#if COMPUTE_DW || COMPUTE_DB
  part += part_off;
  if (s == 0 && lid == 0) {
#if COMPUTE_DW
    part[(ulong)k * 4] = dw3;
    part[(ulong)k * 4 + 1] = dw2;
    part[(ulong)k * 4 + 2] = dw1;
#endif
#if COMPUTE_DB
    part[(ulong)k * 4 + 3] = dbs;
#endif
  }
  if (!ng_coop_leave(sync, sets, &tk)) return;
  /* The last group: four columns, NG_WG_P2 / 4 slices of the sets each, then a fixed tree (the
   * bits depend on (sets, WG) alone). The tree takes a power of two of slices, so a group of
   * another size (a multiple of 32 asked for) leaves its last work-items out: with WG / 4 slices
   * (24 of 96) the tree's odd levels dropped a slice each, a third of dW and dB on the H200. */
  const uint col = lid % 4, slices = NG_WG_P2 / 4;
  float v = lid / 4 < slices ? ng_slice_sum(part + col, 4, sets, lid / 4, slices, 8) : 0.0f;
  v = ng_slice_tree(v, 4, slices, (__local float *)red4);
  __global NG_STORE(G_DTYPE) *out = lid == 3 ? (__global NG_STORE(G_DTYPE) *)gdb + gdb_off
                                              : (__global NG_STORE(G_DTYPE) *)gdw + gdw_off + lid;
  if (lid < 4 && (lid < 3 ? COMPUTE_DW : COMPUTE_DB)) {
    if (acc) v = NG_LD1(G_DTYPE, out, 0) + v;
    NG_ST1(G_DTYPE, out, 0, v);
  }
#else
  (void)part, (void)part_off, (void)gdw, (void)gdw_off, (void)gdb, (void)gdb_off, (void)acc;
  (void)ng_coop_leave(sync, sets, &tk);
#endif
#else
  /* the host plans this kernel for work-groups of at least four (ng_coop_plan) */
  (void)dy, (void)dy_off, (void)x, (void)x_off, (void)w, (void)w_off, (void)pdt, (void)rstd;
  (void)rstd_off, (void)dx, (void)dx_off, (void)part, (void)part_off, (void)gdw, (void)gdw_off;
  (void)gdb, (void)gdb_off, (void)acc, (void)rows, (void)n, (void)sync, (void)sync_off, (void)S;
#endif
}
#endif
#endif
