/* Final pass of every parameter-gradient reduction: out[j] = Σ_g part[g·n + j] (+ out[j] when
 * accumulating into the caller's gradient). Built per W_DTYPE (the gradient's dtype).
 *
 * A work-group is RS row-slices × CW consecutive columns: slice s sums groups s, s+RS, … for its
 * column (coalesced across the CW lanes), then the RS slice sums are added in slice order. The
 * order is fixed, so the bits never change from run to run. RS = 1 on CPUs (one work-item per
 * column, vectorised across work-items); RS > 1 on GPUs, where n work-items alone would leave
 * the device idle while each walks all G rows. */

#define WT NG_STORE(W_DTYPE)
#ifndef RS
#define RS 1
#endif
#ifndef CW
#define CW 64
#endif

__kernel __attribute__((reqd_work_group_size(RS * CW, 1, 1))) void
ng_reduce_partials(__global const float *part, ulong part_off, uint groups, uint n,
                   __global WT *out, ulong out_off, int accumulate) {
  const uint lid = get_local_id(0), col = lid % CW, slice = lid / CW;
  const uint j = get_group_id(0) * CW + col;
  float s = 0.0f;
  if (j < n)
    for (uint g = slice; g < groups; g += RS) s += part[part_off + (ulong)g * n + j];
#if RS > 1
  __local float sums[RS * CW];
  sums[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (slice != 0 || j >= n) return;
  s = 0.0f;
  for (uint k = 0; k < RS; k++) s += sums[k * CW + col];
#else
  if (j >= n) return;
#endif
  out += out_off;
  if (accumulate) s = NG_LD1(W_DTYPE, out, j) + s;
  NG_ST1(W_DTYPE, out, j, s);
}
