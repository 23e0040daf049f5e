/* The shared last pass of parameter-gradient reductions (cl/reduce.cl). */
#include "ng_internal.h"

/* Row slices per work-group: 1 on CPUs; on GPUs the largest work-group up to 1024 work-items,
 * as RS slices of 64 columns (the kernel narrows the columns per call, see reduce.cl). */
static unsigned reduce_slices(const ng_context *ctx) {
  if (ctx->info.type & CL_DEVICE_TYPE_CPU) return 1;
  unsigned rs = 1;
  while (rs * 2 * 64 <= ctx->info.max_wg && rs * 2 <= 16) rs *= 2;
  return rs;
}

void ng_reduce_opts(ng_opts *o, const ng_context *ctx, ng_dtype out_dtype) {
  ng_opts_init(o);
  ng_opts_add(o, "W_DTYPE", out_dtype);
  ng_opts_add(o, "RS", reduce_slices(ctx));
  ng_opts_add(o, "CW", 64);
}

ng_status ng_reduce_program(ng_context *ctx, ng_dtype out_dtype, cl_program *prog) {
  ng_opts o;
  ng_reduce_opts(&o, ctx, out_dtype);
  return ng_get_program(ctx, "reduce", &o, prog);
}

ng_status ng_enqueue_reduce_partials(ng_context *ctx, cl_command_queue q, cl_program prog,
                                     cl_mem part, size_t part_off, unsigned groups, size_t n,
                                     ng_tensor out, bool accumulate, cl_uint nwait,
                                     const cl_event *wait, cl_event *event) {
  const unsigned rs = reduce_slices(ctx);
  const size_t local = 64 * (size_t)rs;
  /* GPU: columns per work-group halved (down to 8, one 32-byte sector of a row) until there is
   * about one work-group per two compute units, and no more than the columns need (measured on
   * the H100 over 1…16384 columns of 64…1056 partial rows). */
  size_t cw = 64;
  if (rs > 1) {
    const size_t want = (size_t)(ctx->info.compute_units > 1 ? ctx->info.compute_units / 2 : 1);
    while (cw > 8 && ((n + cw - 1) / cw < want || cw / 2 >= n)) cw /= 2;
  }
  const size_t global = (n + cw - 1) / cw * local;
  cl_ulong poff = part_off, ooff = out.offset;
  cl_uint g = groups, nn = (cl_uint)n, cwa = (cl_uint)cw;
  cl_int acc = accumulate ? 1 : 0;
  const ng_arg args[] = {NG_ARG(part),    NG_ARG(poff), NG_ARG(g),   NG_ARG(nn),
                         NG_ARG(out.mem), NG_ARG(ooff), NG_ARG(acc), NG_ARG(cwa)};
  return ng_enqueue(ctx, q, prog, "ng_reduce_partials", global, local, args, NG_ARRAY_LEN(args),
                    nwait, wait, event);
}
