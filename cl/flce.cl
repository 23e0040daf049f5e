/* Fused linear + cross-entropy (SPEC.md "flce"): the row-wise work between the GEMMs.
 *
 * Options beyond ng_common.clh: DTYPE is the input's (and dinput's) storage dtype, used only by
 * the two conversion kernels; WG is the work-group size of the row, prep and finish kernels
 * (1 = a row per work-item, the CPU shape; > 1 = a row per work-group, the GPU shape). Everything
 * else (bias, class weights, softcap, smoothing, z-loss, reduction, gradient or not) is a run-time
 * flag: uniform branches cost little next to a row of exp(), and they keep the number of program
 * variants small.
 *
 * All sums are fixed-order (per-lane strided partials, then ng_wg_sum's tree), so results are the
 * same bits on every run. */

#define F_BIAS 1
#define F_CEW 2
#define F_SOFTCAP 4
#define F_SMOOTH 8
#define F_ZLOSS 16
#define F_GRAD 32
#define F_GO_ROW 64    /* reduction none: per-row grad_output */
#define F_LOSS_PLUS_Z 128 /* reduction none: the loss output holds ce + z-loss */

#define RED_MEAN 0
#define RED_SUM 1
#define RED_NONE 2

/* stats[] written by ng_flce_prep, read by the row and finish kernels */
#define ST_SCALE_CE 0 /* factor of the cross-entropy part of g (grad_output / Σ w[target]) */
#define ST_SCALE_Z 1  /* factor of the z-loss part of g (grad_output / count) */
#define ST_WSUM 2     /* Σ_j ce_weight[j] (V without class weights) */
#define ST_WTOTAL 3   /* Σ over non-ignored rows of ce_weight[target] */
#define ST_COUNT 4    /* non-ignored rows */

inline long flce_target(__global const int *t, ulong off, int t64, uint i) {
  return t64 ? ((__global const long *)t)[off + i] : (long)t[off + i];
}

/* Largest value and its first index over the work-group (ties go to the smaller index, so the
 * argmax is the first maximal class whatever the work-group size). */
inline float flce_wg_max(float v, uint idx, __local float *bv, __local uint *bi, uint *out) {
#if WG == 1
  (void)bv;
  (void)bi;
  *out = idx;
  return v;
#else
  const uint lid = get_local_id(0);
  bv[lid] = v;
  bi[lid] = idx;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (lid < s) {
      const float o = bv[lid + s];
      const uint oi = bi[lid + s];
      if (o > bv[lid] || (o == bv[lid] && oi < bi[lid])) {
        bv[lid] = o;
        bi[lid] = oi;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float r = bv[0];
  *out = bi[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
#endif
}

/* Fixed-order sum of unsigned counts (exact, unlike a float sum past 2^24). */
inline uint flce_wg_sum_u(uint v, __local uint *buf) {
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
  const uint r = buf[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
#endif
}

/* One work-group: the batch-wide numbers that scale g, computed before the chunk loop so that g
 * is scaled in the same pass that forms it. Targets were range-checked on the host. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_flce_prep(__global const int *tgt, ulong t_off, int t64, uint bt, long ignore_index,
             __global const float *cew, ulong w_off, uint v, __global const float *go, ulong go_off,
             float go_scalar, int reduction, __global float *stats, ulong st_off) {
  __local float red[WG];
  __local uint redu[WG];
  const uint lid = get_local_id(0);
  uint cnt = 0;
  float wt = 0.0f, ws = 0.0f;
  for (uint i = lid; i < bt; i += WG) {
    const long t = flce_target(tgt, t_off, t64, i);
    if (t == ignore_index) continue;
    cnt++;
    wt += cew ? cew[w_off + t] : 1.0f;
  }
  if (cew)
    for (uint j = lid; j < v; j += WG) ws += cew[w_off + j];
  cnt = flce_wg_sum_u(cnt, redu);
  wt = ng_wg_sum(wt, red);
  ws = cew ? ng_wg_sum(ws, red) : (float)v;
  if (lid != 0) return;
  const float g = go ? go[go_off] : go_scalar;
  float sce = 1.0f, sz = 1.0f;
  if (reduction == RED_MEAN) {
    /* An empty denominator (every row ignored) gives zero gradients rather than NaN. */
    sce = wt != 0.0f ? g / wt : 0.0f;
    sz = cnt != 0 ? g / (float)cnt : 0.0f;
  } else if (reduction == RED_SUM) {
    sce = g;
    sz = g;
  }
  stats += st_off;
  stats[ST_SCALE_CE] = sce;
  stats[ST_SCALE_Z] = sz;
  stats[ST_WSUM] = ws;
  stats[ST_WTOTAL] = wt;
  stats[ST_COUNT] = (float)cnt;
}

/* One chunk of rows of logits z[rows, v] (row r is batch row row0 + r), in place:
 *   s = softcap(z + bias); lse = m + log1p(Σ_{j≠argmax} exp(s_j − m)) with m = max s;
 *   ce = (1−ε)·w_t·(lse − s_t) + (ε/V)·Σ_j w_j·(lse − s_j);  zl = λ·lse²;  acc = argmax == t;
 *   g_j = scale_ce·[(1−ε)·w_t·(p_j − δ_jt) + (ε/V)·(W·p_j − w_j)] + scale_z·2λ·lse·p_j,
 *         times (1 − tanh²) under softcap; the row becomes g (0 for an ignored row).
 * The true class uses p_t − 1 = expm1(log p_t) with log p_t = (s_t − m) − log1p(rest): when p_t
 * is near 1 the target is the argmax, s_t − m is exactly 0 and nothing cancels. The smoothing sum
 * is formed as Σ w_j·(m − s_j) + W·log1p(rest), all terms of one sign. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_flce_rows(__global float *z, ulong z_off, uint v, uint rows, uint row0,
             __global const int *tgt, ulong t_off, int t64, long ignore_index,
             __global const float *bias, ulong b_off, __global const float *cew, ulong w_off,
             __global const float *go, ulong go_off, __global const float *stats, ulong st_off,
             __global float *ce_out, ulong ce_off, __global float *zl_out, ulong zl_off,
             __global float *acc_out, ulong acc_off, int flags, float cap, float eps,
             float eps_v, float lambda) {
  __local float red[WG];
  __local uint redi[WG];
  const uint lid = get_local_id(0);
  const bool smooth = (flags & F_SMOOTH) != 0;
  const bool zloss = (flags & F_ZLOSS) != 0;
  const bool softcap = (flags & F_SOFTCAP) != 0;
  const float inv_cap = softcap ? 1.0f / cap : 0.0f;
  bias += b_off;
  cew += w_off;
  stats += st_off;
  /* One row per work-group, no loop over rows: PoCL has miscompiled local-memory reductions
   * inside loops (PERF-NOTES). `continue` below leaves the do-while. */
  const uint r = get_group_id(0);
  if (r < rows) do {
    __global float *zr = z + z_off + (ulong)r * v;
    const uint gi = row0 + r;
    const long tl = flce_target(tgt, t_off, t64, gi);
    if (tl == ignore_index) {
      if (flags & F_GRAD)
        for (uint j = lid; j < v; j += WG) zr[j] = 0.0f;
      if (lid == 0) {
        if (ce_out) ce_out[ce_off + gi] = 0.0f;
        if (zl_out) zl_out[zl_off + gi] = 0.0f;
        if (acc_out) acc_out[acc_off + gi] = 0.0f;
      }
      continue;
    }
    const uint t = (uint)tl;

    if (flags & (F_BIAS | F_SOFTCAP)) {
      for (uint j = lid; j < v; j += WG) {
        float s = zr[j];
        if (flags & F_BIAS) s += bias[j];
        if (softcap) s = cap * tanh(s * inv_cap);
        zr[j] = s;
      }
#if WG > 1
      barrier(CLK_GLOBAL_MEM_FENCE); /* zr[t] below may be another work-item's */
#endif
    }

    float m = -INFINITY;
    uint mi = 0xffffffffu;
    for (uint j = lid; j < v; j += WG) {
      const float s = zr[j];
      if (s > m) {
        m = s;
        mi = j;
      }
    }
    m = flce_wg_max(m, mi, red, redi, &mi);

    float rest = 0.0f, sws = 0.0f;
    if (smooth && (flags & F_CEW)) {
      for (uint j = lid; j < v; j += WG) {
        const float d = zr[j] - m;
        if (j != mi) rest += exp(d);
        sws -= cew[j] * d;
      }
    } else if (smooth) {
      for (uint j = lid; j < v; j += WG) {
        const float d = zr[j] - m;
        if (j != mi) rest += exp(d);
        sws -= d;
      }
    } else {
      for (uint j = lid; j < v; j += WG)
        if (j != mi) rest += exp(zr[j] - m);
    }
    rest = ng_wg_sum(rest, red);
    if (smooth) sws = ng_wg_sum(sws, red);
    const float l1p = log1p(rest);
    const float lse = m + l1p;
    const float wsum = stats[ST_WSUM];
    const float wt = (flags & F_CEW) ? cew[t] : 1.0f;
    const float logpt = (zr[t] - m) - l1p;
    float ce = (1.0f - eps) * wt * -logpt;
    if (smooth) ce += eps_v * (sws + wsum * l1p);
    const float zl = zloss ? lambda * lse * lse : 0.0f;
    if (lid == 0) {
      if (ce_out) ce_out[ce_off + gi] = (flags & F_LOSS_PLUS_Z) ? ce + zl : ce;
      if (zl_out) zl_out[zl_off + gi] = zl;
      if (acc_out) acc_out[acc_off + gi] = mi == t ? 1.0f : 0.0f;
    }
    if (!(flags & F_GRAD)) continue;

#if WG > 1
    barrier(CLK_GLOBAL_MEM_FENCE); /* every work-item has read zr[t] before it is overwritten */
#endif
    const float gor = (flags & F_GO_ROW) ? go[go_off + gi] : 1.0f;
    const float sce = stats[ST_SCALE_CE] * gor;
    const float zc = zloss ? stats[ST_SCALE_Z] * gor * 2.0f * lambda * lse : 0.0f;
    const float a = sce * ((1.0f - eps) * wt + eps_v * wsum) + zc;
    const float se = sce * eps_v;
    const float pt1 = expm1(logpt); /* p_t − 1, exact near p_t = 1 */
    for (uint j = lid; j < v; j += WG) {
      const float s = zr[j];
      const float p = exp((s - m) - l1p);
      const float wj = (flags & F_CEW) ? cew[j] : 1.0f;
      float g = p * a;
      if (smooth) g -= se * wj;
      if (j == t) g = sce * (1.0f - eps) * wt * pt1 + p * (se * wsum + zc) - (smooth ? se * wj : 0.0f);
      if (softcap) {
        const float th = s * inv_cap;
        g *= 1.0f - th * th;
      }
      zr[j] = g;
    }
  } while (0);
}

/* db[j] (+)= Σ_r g[r, j] over one chunk, rows in order: chunks are added in order too, so dbias
 * is the same bits on every run. One work-item per column keeps the loads coalesced. */
__kernel void ng_flce_colsum(__global const float *g, ulong g_off, uint v, uint rows,
                             __global float *db, ulong db_off, int add) {
  const uint j = get_global_id(0);
  if (j >= v) return;
  g += g_off + j;
  float s = 0.0f;
  for (uint r = 0; r < rows; r++) s += g[(ulong)r * v];
  if (add) s = db[db_off + j] + s;
  db[db_off + j] = s;
}

/* One work-group: mean/sum reductions of the per-row values (fixed order). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
ng_flce_finish(__global const float *rowv, ulong ce_off, ulong zl_off, ulong acc_off, uint bt,
               __global const float *stats, ulong st_off, int reduction, __global float *loss,
               ulong loss_off, __global float *zloss, ulong zloss_off, __global float *acc,
               ulong acc_out_off) {
  __local float red[WG];
  const uint lid = get_local_id(0);
  float sc = 0.0f, sz = 0.0f, sa = 0.0f;
  for (uint i = lid; i < bt; i += WG) {
    sc += rowv[ce_off + i];
    sz += rowv[zl_off + i];
    sa += rowv[acc_off + i];
  }
  sc = ng_wg_sum(sc, red);
  sz = ng_wg_sum(sz, red);
  sa = ng_wg_sum(sa, red);
  if (lid != 0) return;
  stats += st_off;
  const float wt = stats[ST_WTOTAL], cnt = stats[ST_COUNT];
  float ce = sc, zl = sz;
  if (reduction == RED_MEAN) {
    ce = wt != 0.0f ? sc / wt : 0.0f;
    zl = cnt != 0.0f ? sz / cnt : 0.0f;
  }
  loss[loss_off] = ce + zl;
  if (zloss) zloss[zloss_off] = zl;
  if (acc) acc[acc_out_off] = cnt != 0.0f ? sa / cnt : 0.0f;
}

/* Input rows (DTYPE) to f32 scratch, and f32 results back to DTYPE (dinput). */
#define XT NG_STORE(DTYPE)
__kernel void ng_flce_to_f32(__global const XT *src, ulong src_off, __global float *dst,
                             ulong dst_off, uint count) {
  const uint i = get_global_id(0);
  if (i < count) dst[dst_off + i] = NG_LD1(DTYPE, src + src_off, i);
}

__kernel void ng_flce_from_f32(__global const float *src, ulong src_off, __global XT *dst,
                               ulong dst_off, uint count) {
  const uint i = get_global_id(0);
  if (i < count) NG_ST1(DTYPE, dst + dst_off, i, src[src_off + i]);
}
