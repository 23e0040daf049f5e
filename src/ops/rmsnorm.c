/* RMSNorm: validation, variant choice and enqueue (kernels in cl/rmsnorm.cl). */
#include "../ng_internal.h"

static ng_status check_params(ng_context *ctx, cl_command_queue queue, const ng_rmsnorm_params *p,
                              cl_uint nwait, const cl_event *wait, size_t *count) {
  if (!ctx) return ng_fail(NG_ERR_NULL_HANDLE, "ctx is NULL");
  if (!p) return ng_fail(NG_ERR_NULL_HANDLE, "params is NULL");
  ng_status s = ng_check_queue(ctx, queue);
  if (s == NG_SUCCESS) s = ng_check_wait_list(nwait, wait);
  if (s == NG_SUCCESS) s = ng_check_rows(p->rows, p->n, count);
  if (s == NG_SUCCESS) s = ng_check_scalar(p->eps, "eps", true);
  if (s == NG_SUCCESS) s = ng_check_scalar(p->offset, "offset", false);
  if (s == NG_SUCCESS && (p->casting_mode < NG_CAST_LLAMA || p->casting_mode > NG_CAST_NONE))
    s = ng_fail(NG_ERR_INVALID_VALUE, "casting_mode %d is not llama, gemma or none",
                (int)p->casting_mode);
  return s;
}

static ng_status check_weight(ng_context *ctx, ng_tensor w, size_t n) {
  return w.mem ? ng_check_tensor(ctx, w, "weight", n, true) : NG_SUCCESS;
}

ng_status ng_rmsnorm_forward(ng_context *ctx, cl_command_queue queue, const ng_rmsnorm_params *p,
                             ng_tensor x, ng_tensor weight, ng_tensor y, ng_tensor rstd,
                             cl_uint nwait, const cl_event *wait, cl_event *event) {
  ng_clear_detail();
  size_t count = 0;
  ng_status s = check_params(ctx, queue, p, nwait, wait, &count);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, x, "x", count, true);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, y, "y", count, true);
  if (s == NG_SUCCESS) s = ng_check_same_dtype(x, "x", y, "y");
  if (s == NG_SUCCESS) s = check_weight(ctx, weight, p->n);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, rstd, "rstd", p->rows, true);
  if (s == NG_SUCCESS && rstd.dtype != NG_F32)
    s = ng_fail(NG_ERR_UNSUPPORTED_DTYPE, "rstd must be f32");
  if (s != NG_SUCCESS) return s;

  const bool vec_ok = ng_vec_aligned(ctx, x, p->n, 8) && ng_vec_aligned(ctx, y, p->n, 8) &&
                      ng_vec_aligned(ctx, weight, p->n, 8);
  const ng_row_launch l = ng_choose_row_launch(ctx, p->rows, p->n, vec_ok, false);
  ng_opts o;
  ng_opts_init(&o);
  ng_row_opts(&o, &l, x.dtype, weight);
  cl_program prog;
  s = ng_get_program(ctx, "rmsnorm", &o, &prog);
  if (s != NG_SUCCESS) return s;

  cl_ulong xo = x.offset, wo = weight.offset, yo = y.offset, ro = rstd.offset;
  cl_uint rows = (cl_uint)p->rows, n = (cl_uint)p->n;
  float eps = p->eps, off = p->offset;
  cl_int mode = p->casting_mode;
  const ng_arg args[] = {NG_ARG(x.mem), NG_ARG(xo),   NG_ARG(weight.mem), NG_ARG(wo),
                         NG_ARG(y.mem), NG_ARG(yo),   NG_ARG(rstd.mem),   NG_ARG(ro),
                         NG_ARG(rows),  NG_ARG(n),    NG_ARG(eps),        NG_ARG(off),
                         NG_ARG(mode)};
  return ng_enqueue(queue, prog, "ng_rmsnorm_fwd", (size_t)l.groups * l.wg, l.wg, args,
                    NG_ARRAY_LEN(args), nwait, wait, event);
}

ng_status ng_rmsnorm_backward_scratch_size(ng_context *ctx, const ng_rmsnorm_params *p,
                                           int compute_dweight, size_t *bytes) {
  ng_clear_detail();
  if (!ctx || !p || !bytes) return ng_fail(NG_ERR_NULL_HANDLE, "ctx, params or bytes is NULL");
  size_t count;
  ng_status s = ng_check_rows(p->rows, p->n, &count);
  if (s != NG_SUCCESS) return s;
  *bytes = 0;
  if (!compute_dweight) return NG_SUCCESS;
  /* The launch depends on the buffers' alignment, unknown here: size for either choice. */
  const ng_row_launch l8 = ng_choose_row_launch(ctx, p->rows, p->n, true, true);
  const ng_row_launch l1 = ng_choose_row_launch(ctx, p->rows, p->n, false, true);
  const size_t groups = l8.groups > l1.groups ? l8.groups : l1.groups;
  if (ng_mul_overflows(groups * 4, p->n, bytes))
    return ng_fail(NG_ERR_INDEX_OVERFLOW, "scratch size overflows");
  return NG_SUCCESS;
}

ng_status ng_rmsnorm_backward(ng_context *ctx, cl_command_queue queue, const ng_rmsnorm_params *p,
                              ng_tensor dy, ng_tensor x, ng_tensor weight, ng_tensor rstd,
                              ng_tensor dx, ng_tensor dweight, unsigned flags, ng_tensor scratch,
                              cl_uint nwait, const cl_event *wait, cl_event *event) {
  ng_clear_detail();
  size_t count = 0;
  ng_status s = check_params(ctx, queue, p, nwait, wait, &count);
  if (s == NG_SUCCESS && (flags & ~NG_ACCUMULATE_GRAD))
    s = ng_fail(NG_ERR_INVALID_VALUE, "unknown flags 0x%x", flags & ~NG_ACCUMULATE_GRAD);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, dy, "dy", count, true);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, x, "x", count, true);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, dx, "dx", count, true);
  if (s == NG_SUCCESS) s = ng_check_same_dtype(x, "x", dy, "dy");
  if (s == NG_SUCCESS) s = ng_check_same_dtype(x, "x", dx, "dx");
  if (s == NG_SUCCESS) s = check_weight(ctx, weight, p->n);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, rstd, "rstd", p->rows, true);
  if (s == NG_SUCCESS && rstd.dtype != NG_F32)
    s = ng_fail(NG_ERR_UNSUPPORTED_DTYPE, "rstd must be f32");
  const bool compute_dw = dweight.mem != NULL;
  if (s == NG_SUCCESS && compute_dw && !weight.mem)
    s = ng_fail(NG_ERR_INVALID_VALUE, "dweight given but the op has no weight");
  if (s == NG_SUCCESS && compute_dw) s = ng_check_tensor(ctx, dweight, "dweight", p->n, true);
  if (s == NG_SUCCESS && compute_dw) s = ng_check_same_dtype(weight, "weight", dweight, "dweight");
  if (s != NG_SUCCESS) return s;

  bool vec_ok = ng_vec_aligned(ctx, x, p->n, 8) && ng_vec_aligned(ctx, dy, p->n, 8) &&
                ng_vec_aligned(ctx, dx, p->n, 8) && ng_vec_aligned(ctx, weight, p->n, 8);
  if (compute_dw && scratch.mem) vec_ok = vec_ok && scratch.offset % 8 == 0;
  /* a frozen backward keeps no partials, so it may use the forward's larger grid */
  const ng_row_launch l = ng_choose_row_launch(ctx, p->rows, p->n, vec_ok, compute_dw);
  const size_t scratch_bytes = compute_dw ? (size_t)l.groups * 4 * p->n : 0;
  ng_opts o;
  ng_opts_init(&o);
  ng_row_opts(&o, &l, x.dtype, weight);
  ng_opts_add(&o, "COMPUTE_DW", compute_dw);
  cl_program prog, rprog = NULL;
  s = ng_get_program(ctx, "rmsnorm", &o, &prog);
  if (s == NG_SUCCESS && compute_dw) s = ng_reduce_program(ctx, dweight.dtype, &rprog);
  if (s != NG_SUCCESS) return s;
  ng_scratch sc;
  s = ng_scratch_acquire(ctx, scratch, scratch_bytes, &sc);
  if (s != NG_SUCCESS) return s;

  cl_ulong dyo = dy.offset, xo = x.offset, wo = weight.offset, ro = rstd.offset, dxo = dx.offset;
  cl_ulong po = sc.offset_bytes / 4;
  cl_uint rows = (cl_uint)p->rows, n = (cl_uint)p->n;
  float off = p->offset;
  cl_int mode = p->casting_mode;
  const ng_arg args[] = {NG_ARG(dy.mem), NG_ARG(dyo), NG_ARG(x.mem),   NG_ARG(xo),
                         NG_ARG(weight.mem), NG_ARG(wo), NG_ARG(rstd.mem), NG_ARG(ro),
                         NG_ARG(dx.mem), NG_ARG(dxo), NG_ARG(sc.mem),  NG_ARG(po),
                         NG_ARG(rows),  NG_ARG(n),   NG_ARG(off),     NG_ARG(mode)};
  s = ng_enqueue(queue, prog, "ng_rmsnorm_bwd", (size_t)l.groups * l.wg, l.wg, args,
                 NG_ARRAY_LEN(args), nwait, wait, compute_dw ? NULL : event);
  if (s == NG_SUCCESS && compute_dw)
    s = ng_enqueue_reduce_partials(ctx, queue, rprog, sc.mem, po, l.groups, p->n, dweight,
                                   (flags & NG_ACCUMULATE_GRAD) != 0, 0, NULL, event);
  ng_scratch_release(&sc);
  return s;
}
