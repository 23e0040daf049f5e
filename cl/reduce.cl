/* Final pass of every parameter-gradient reduction: out[j] = Σ_g part[g·n + j] (+ out[j] when
 * accumulating into the caller's gradient). Built per W_DTYPE (the gradient's dtype).
 *
 * CPU shape (RS = 1): one work-item per column, CW columns per group, each summing its column
 * over the groups in order (PoCL vectorises across the work-items).
 *
 * GPU shape (RS > 1): a work-group of WGS = RS·CW work-items covers `cw` consecutive columns
 * (a kernel argument, a power of two ≤ WGS) with WGS / cw row slices. Slice s sums rows
 * s, s + slices, … of its column, four loads in flight at a time (the sum itself stays in row
 * order); then the slices' sums meet in a fixed tree (ng_slice_sum, ng_slice_tree). Narrow
 * column blocks give a small n (dW of a 1024-wide row, PolyNorm's 3 weights) enough work-groups
 * and short enough loops that the pass is not one long chain of dependent loads; wide ones give
 * a wide row of few partial rows slices of several rows and a shallow tree (src/reduce.c). The order depends only on (groups, n, cw),
 * which the host derives from the shape and the device: the same bits on every run.
 *
 * One launch can sum two gradients of one dtype (the first `blocks` work-groups the first, the
 * rest the second, each with its own columns and cw): a second launch would cost its start and
 * drain again (5 us on the H100). */

#define WT NG_STORE(W_DTYPE)
#ifndef RS
#define RS 1
#endif
#ifndef CW
#define CW 64
#endif
#define WGS (RS * CW)

__kernel __attribute__((reqd_work_group_size(WGS, 1, 1))) void
ng_reduce_partials(__global const float *part, ulong part_off, uint groups, uint n,
                   __global WT *out, ulong out_off, int accumulate, uint cw, uint blocks,
                   ulong part_off2, uint n2, __global WT *out2, ulong out_off2, uint cw2) {
  const uint lid = get_local_id(0);
  uint gid = get_group_id(0);
  if (gid >= blocks) { /* a second gradient (LayerNorm's dB beside dW) in the same launch */
    gid -= blocks;
    part_off = part_off2;
    n = n2;
    out = out2;
    out_off = out_off2;
    cw = cw2;
  }
  part += part_off;
  out += out_off;
#if RS == 1
  (void)cw;
  const uint j = gid * CW + lid;
  if (j >= n) return;
  float s = 0.0f;
  for (uint g = 0; g < groups; g++) s += part[(ulong)g * n + j];
#else
  __local float sums[WGS];
  const uint slices = WGS / cw, slice = lid / cw;
  const uint j = gid * cw + lid % cw;
  float s = j < n ? ng_slice_sum(part + j, n, groups, slice, slices, 4) : 0.0f;
  s = ng_slice_tree(s, cw, slices, sums);
  if (slice != 0 || j >= n) return;
#endif
  if (accumulate) s = NG_LD1(W_DTYPE, out, j) + s;
  NG_ST1(W_DTYPE, out, j, s);
}
