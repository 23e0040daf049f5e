/* LayerNorm forward and backward (SPEC.md "LayerNorm").
 *
 * Options beyond ng_common.clh: HAS_B (forward: a bias is present; it has W_DTYPE, as the
 * weight), COMPUTE_DW / COMPUTE_DB (backward: 0 = frozen weight / bias, every line of that
 * gradient compiled out), REG (vector slots per work-item whose dW/dB sums stay in registers).
 *
 * Same persistent grid as cl/rmsnorm.cl: work-group g handles rows g, g+G, … ; WG = 1 is a row
 * per work-item (CPUs), WG > 1 a row per work-group with local-memory reductions (GPUs). */

#define XT NG_STORE(DTYPE)
#define WT NG_STORE(W_DTYPE)
#define LDX(p, i) NG_LDV(DTYPE, p, i)
#define STX(p, i, v) NG_STV(DTYPE, p, i, v)
#define LDW(p, i) NG_LDV(W_DTYPE, p, i)

#ifndef HAS_B
#define HAS_B 1
#endif
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

/* Mean first, then the centred sum of squares in a second pass over the row (which is read
 * again from cache): E[x²] − mean² would cancel catastrophically when |mean| ≫ std. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_layernorm_fwd(__global const XT *x, ulong x_off, __global const WT *w, ulong w_off,
                 __global const WT *b, ulong b_off, __global XT *y, ulong y_off,
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
  for (uint r = get_group_id(0); r < rows; r += get_num_groups(0)) {
    __global const XT *xr = x + (ulong)r * n;
    __global XT *yr = y + (ulong)r * n;
    floatV acc = (floatV)(0.0f);
    for (uint i = lid; i < nv; i += WG) acc += LDX(xr, i);
    const float mu = ng_wg_sum(ng_hsum(acc), red) / (float)n;
    acc = (floatV)(0.0f);
    for (uint i = lid; i < nv; i += WG) {
      const floatV d = LDX(xr, i) - mu;
      acc = fma(d, d, acc);
    }
    const float var = ng_wg_sum(ng_hsum(acc), red) / (float)n;
    const float rs = rsqrt(var + eps);
    if (lid == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    for (uint i = lid; i < nv; i += WG) {
      floatV v = (LDX(xr, i) - mu) * rs;
#if HAS_W
      v = v * LDW(w, i);
#endif
#if HAS_B
      v = v + LDW(b, i);
#endif
      STX(yr, i, v);
    }
  }
}

/* Both row sums of the backward in one fixed-order tree (one set of barriers instead of two). */
inline float2 ln_wg_sum2(float2 v, __local float2 *buf) {
#if WG == 1
  (void)buf;
  return v;
#else
  const uint lid = get_local_id(0);
  buf[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (lid < s) buf[lid] += buf[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float2 r = buf[0];
  barrier(CLK_LOCAL_MEM_FENCE); /* buf is reused by the next row */
  return r;
#endif
}

/* g = w·dy (dy without a weight) */
#if HAS_W
#define GRAD(d, i) ((d) * LDW(w, i))
#else
#define GRAD(d, i) (d)
#endif

/* dx = (g − xhat·c1 − c2)·rstd with c1 = Σ xhat·g / n, c2 = Σ g / n; this group's partials
 * dW += dy·xhat and dB += dy. Partials live in registers (REG slots of VEC columns per
 * work-item) when the row fits, else in the group's own rows of `part` (read-modify-write; on
 * CPUs they stay in cache). `part` holds G rows of dW partials (when COMPUTE_DW) followed by G
 * rows of dB partials (when COMPUTE_DB); ng_reduce_partials sums each section in a fixed order. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_layernorm_bwd(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
                 __global const WT *w, ulong w_off, __global const float *mean, ulong mean_off,
                 __global const float *rstd, ulong rstd_off, __global XT *dx, ulong dx_off,
                 __global float *part, ulong part_off, uint rows, uint n) {
  __local float2 red[WG];
  const uint lid = get_local_id(0);
  const uint nv = n / VEC;
  dy += dy_off;
  x += x_off;
  w += w_off;
  mean += mean_off;
  rstd += rstd_off;
  dx += dx_off;
#if NEED_PART
  const bool in_regs = nv <= (uint)(WG * REG);
  __global float *prow = part + part_off + (ulong)get_group_id(0) * n;
#else
  (void)part;
  (void)part_off;
#endif
#if COMPUTE_DW
  floatV dwr[REG];
#pragma unroll
  for (int k = 0; k < REG; k++) dwr[k] = (floatV)(0.0f);
  __global float *pw = prow;
  if (!in_regs)
    for (uint i = lid; i < nv; i += WG) NG_STV(NG_F32, pw, i, (floatV)(0.0f));
#endif
#if COMPUTE_DB
  floatV dbr[REG];
#pragma unroll
  for (int k = 0; k < REG; k++) dbr[k] = (floatV)(0.0f);
  __global float *pb = prow + (COMPUTE_DW ? (ulong)get_num_groups(0) * n : 0);
  if (!in_regs)
    for (uint i = lid; i < nv; i += WG) NG_STV(NG_F32, pb, i, (floatV)(0.0f));
#endif
  for (uint r = get_group_id(0); r < rows; r += get_num_groups(0)) {
    __global const XT *dyr = dy + (ulong)r * n;
    __global const XT *xr = x + (ulong)r * n;
    __global XT *dxr = dx + (ulong)r * n;
    const float mu = mean[r], rs = rstd[r];
    floatV a1 = (floatV)(0.0f), a2 = (floatV)(0.0f);
    for (uint i = lid; i < nv; i += WG) {
      const floatV xh = (LDX(xr, i) - mu) * rs, g = GRAD(LDX(dyr, i), i);
      a1 = fma(xh, g, a1);
      a2 += g;
    }
    const float2 sums = ln_wg_sum2((float2)(ng_hsum(a1), ng_hsum(a2)), red);
    const float c1 = sums.x / (float)n, c2 = sums.y / (float)n;
#if NEED_PART
    if (in_regs) {
#pragma unroll
      for (int k = 0; k < REG; k++) {
        const uint i = lid + (uint)k * WG;
        if (i < nv) {
          const floatV d = LDX(dyr, i), xh = (LDX(xr, i) - mu) * rs;
          STX(dxr, i, (GRAD(d, i) - xh * c1 - c2) * rs);
#if COMPUTE_DW
          dwr[k] = fma(d, xh, dwr[k]);
#endif
#if COMPUTE_DB
          dbr[k] += d;
#endif
        }
      }
      continue;
    }
#endif
    for (uint i = lid; i < nv; i += WG) {
      const floatV d = LDX(dyr, i), xh = (LDX(xr, i) - mu) * rs;
      STX(dxr, i, (GRAD(d, i) - xh * c1 - c2) * rs);
#if COMPUTE_DW
      NG_STV(NG_F32, pw, i, fma(d, xh, NG_LDV(NG_F32, pw, i)));
#endif
#if COMPUTE_DB
      NG_STV(NG_F32, pb, i, NG_LDV(NG_F32, pb, i) + d);
#endif
    }
  }
#if NEED_PART
  if (in_regs) {
#pragma unroll
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
  }
#endif
}
