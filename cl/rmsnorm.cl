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

/* w' = offset + w, or 1 without a weight. */
#if HAS_W
#define WPRIME(w, i, offset) ((floatV)(offset) + LDW(w, i))
#else
#define WPRIME(w, i, offset) ((floatV)(1.0f))
#endif

#if FUSED_ADD
#define RMS_FWD ng_fused_add_rmsnorm_fwd
#else
#define RMS_FWD ng_rmsnorm_fwd
#endif
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
  for (uint r = get_group_id(0); r < rows; r += get_num_groups(0)) {
    __global const XT *xr = x + (ulong)r * n;
    __global XT *yr = y + (ulong)r * n;
    floatV acc = (floatV)(0.0f);
#if FUSED_ADD
    /* s is rounded before it is squared: the norm is of the stored s. The second pass reads s
     * back (each work-item its own elements, so no barrier is needed), one read instead of two. */
    __global const XT *resr = res + (ulong)r * n;
    __global XT *sr = s + (ulong)r * n;
    for (uint i = lid; i < nv; i += WG) {
      const floatV v = RDX(LDX(xr, i) + LDX(resr, i));
      STX(sr, i, v);
      acc = fma(v, v, acc);
    }
    xr = sr;
#else
    for (uint i = lid; i < nv; i += WG) {
      floatV v = LDX(xr, i);
      acc = fma(v, v, acc);
    }
#endif
    const float ss = ng_wg_sum(ng_hsum(acc), red);
    float rs = rsqrt(ss / (float)n + eps);
    if (mode == NG_CAST_NONE) rs = NG_RD1(DTYPE, rs);
    if (lid == 0) rstd[r] = rs;
    for (uint i = lid; i < nv; i += WG) {
      const floatV v = LDX(xr, i);
      floatV wp = WPRIME(w, i, offset);
      floatV out;
      if (mode == NG_CAST_GEMMA) {
        out = v * rs * wp;
      } else {
        if (mode == NG_CAST_NONE && HAS_W) wp = RDX(wp);
        out = RDX(v * rs) * wp;
      }
      STX(yr, i, out);
    }
  }
}

/* dx = rstd·m − (rstd³/n)·(Σ m·x)·x (+ ds_out) with m = dy·w'; dW partial of this group
 * += dy·xhat. With FUSED_ADD's s in place of x this is also the fused op's backward.
 * dW partials: in registers (REG slots of VEC columns per work-item) when the row fits, else in
 * the group's own row of `part` (read-modify-write; on CPUs it stays in cache). Either way the
 * group writes its row of `part` and ng_reduce_partials sums the rows in a fixed order. */
#if HAS_DS
#define RMS_BWD ng_fused_add_rmsnorm_bwd
#define DX_OUT(i, v) ((v) + LDX(dsr, i))
#else
#define RMS_BWD ng_rmsnorm_bwd
#define DX_OUT(i, v) (v)
#endif
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
RMS_BWD(__global const XT *dy, ulong dy_off, __global const XT *x, ulong x_off,
        __global const WT *w, ulong w_off, __global const float *rstd, ulong rstd_off,
        __global XT *dx, ulong dx_off, __global float *part, ulong part_off, uint rows, uint n,
        float offset, int mode
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
#if COMPUTE_DW
  const bool in_regs = nv <= (uint)(WG * REG);
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
    for (uint i = lid; i < nv; i += WG) {
      const floatV m = LDX(dyr, i) * WPRIME(w, i, offset);
      acc = fma(m, LDX(xr, i), acc);
    }
    const float dot = ng_wg_sum(ng_hsum(acc), red);
    const float c = (rs * rs * rs) * (dot / (float)n);
#if COMPUTE_DW
    if (in_regs) {
#pragma unroll
      for (int k = 0; k < REG; k++) {
        const uint i = lid + (uint)k * WG;
        if (i < nv) {
          const floatV d = LDX(dyr, i), xv = LDX(xr, i);
          STX(dxr, i, DX_OUT(i, rs * (d * WPRIME(w, i, offset)) - c * xv));
          floatV xh = xv * rs;
          if (mode == NG_CAST_LLAMA) xh = RDX(xh);
          dwr[k] = fma(d, xh, dwr[k]);
        }
      }
      continue;
    }
#endif
    for (uint i = lid; i < nv; i += WG) {
      const floatV d = LDX(dyr, i), xv = LDX(xr, i);
      STX(dxr, i, DX_OUT(i, rs * (d * WPRIME(w, i, offset)) - c * xv));
#if COMPUTE_DW
      floatV xh = xv * rs;
      if (mode == NG_CAST_LLAMA) xh = RDX(xh);
      NG_STV(NG_F32, prow, i, fma(d, xh, NG_LDV(NG_F32, prow, i)));
#endif
    }
  }
#if COMPUTE_DW
  if (in_regs) {
#pragma unroll
    for (int k = 0; k < REG; k++) {
      const uint i = lid + (uint)k * WG;
      if (i < nv) NG_STV(NG_F32, prow, i, dwr[k]);
    }
  }
#endif
}
