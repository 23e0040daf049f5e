/* Final pass of every parameter-gradient reduction: out[j] = Σ_g part[g·n + j] (+ out[j] when
 * accumulating into the caller's gradient), summed in group order so the bits never change from
 * run to run. Built per W_DTYPE (the gradient's storage dtype). One work-item per column keeps
 * the loads coalesced across the work-group. */

#define WT NG_STORE(W_DTYPE)

__kernel void ng_reduce_partials(__global const float *part, ulong part_off, uint groups, uint n,
                                 __global WT *out, ulong out_off, int accumulate) {
  const uint j = get_global_id(0);
  if (j >= n) return;
  part += part_off + j;
  float s = 0.0f;
  for (uint g = 0; g < groups; g++) s += part[(ulong)g * n];
  out += out_off;
  if (accumulate) s = NG_LD1(W_DTYPE, out, j) + s;
  NG_ST1(W_DTYPE, out, j, s);
}
