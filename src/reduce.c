/* The shared last pass of parameter-gradient reductions (cl/reduce.cl). */
#include "ng_internal.h"

void ng_reduce_opts(ng_opts *o, ng_dtype out_dtype) {
  ng_opts_init(o);
  ng_opts_add(o, "W_DTYPE", out_dtype);
}

ng_status ng_reduce_program(ng_context *ctx, ng_dtype out_dtype, cl_program *prog) {
  ng_opts o;
  ng_reduce_opts(&o, out_dtype);
  return ng_get_program(ctx, "reduce", &o, prog);
}

ng_status ng_enqueue_reduce_partials(ng_context *ctx, cl_command_queue q, cl_program prog,
                                     cl_mem part, size_t part_off, unsigned groups, size_t n,
                                     ng_tensor out, bool accumulate, cl_uint nwait,
                                     const cl_event *wait, cl_event *event) {  const size_t local = ctx->info.max_wg >= 64 ? 64 : ctx->info.max_wg;
  const size_t global = (n + local - 1) / local * local;
  cl_ulong poff = part_off, ooff = out.offset;
  cl_uint g = groups, nn = (cl_uint)n;
  cl_int acc = accumulate ? 1 : 0;
  const ng_arg args[] = {NG_ARG(part), NG_ARG(poff), NG_ARG(g),   NG_ARG(nn),
                         NG_ARG(out.mem), NG_ARG(ooff), NG_ARG(acc)};
  return ng_enqueue(q, prog, "ng_reduce_partials", global, local, args, NG_ARRAY_LEN(args), nwait,
                    wait, event);
}
