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

/* Columns per work-group for n columns of `rows` partial rows. GPU: halved (down to 8, one
 * 32-byte sector of a row) until there is about one work-group per two compute units, and no
 * more than the columns need (measured on the H100 over 1…16384 columns of 64…1056 partial
 * rows). Then, for wide rows of few partial rows, widened while each slice still sums at most
 * 20 rows and the grid keeps that many work-groups: the 16 slices of 64 columns summed about two
 * rows each, with a tree of four levels after (H100, bf16 backward with dW: 33 rows of 65536
 * columns 11.2 -> 6.0 us, LayerNorm's two such sections 19.1 -> 7.2; 66 rows of 32768 7.7 ->
 * 6.1 and 11.6 -> 7.2; LayerNorm's 132 rows of 16384 8.7 -> 7.5). */
static size_t reduce_cw(const ng_context *ctx, unsigned rs, size_t n, size_t rows) {
  size_t cw = 64;
  if (rs > 1) {
    const size_t want = (size_t)(ctx->info.compute_units > 1 ? ctx->info.compute_units / 2 : 1);
    while (cw > 8 && ((n + cw - 1) / cw < want || cw / 2 >= n)) cw /= 2;
    const size_t wgs = (size_t)rs * 64;
    while (cw * 2 <= wgs && wgs / (cw * 2) * 20 >= rows && (n + cw * 2 - 1) / (cw * 2) >= want)
      cw *= 2;
  }
  return cw;
}

ng_status ng_reduce_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user) {
  static const ng_dtype fl[] = {NG_F32, NG_F16, NG_BF16};
  ng_status s = NG_SUCCESS;
  for (size_t i = 0; i < NG_ARRAY_LEN(fl) && s == NG_SUCCESS; i++) {
    ng_opts o;
    ng_reduce_opts(&o, ctx, fl[i]);
    s = fn(ctx, "reduce", &o, user);
  }
  return s;
}

ng_status ng_enqueue_reduce_sections(ng_context *ctx, cl_command_queue q, cl_program prog,
                                     cl_mem part, unsigned groups, const ng_reduce_section *a,
                                     const ng_reduce_section *b, bool accumulate, cl_uint nwait,
                                     const cl_event *wait, cl_event *event) {
  if (b && !b->out.mem) b = NULL;
  if (!a->out.mem) { /* the first parameter is frozen: the second alone */
    a = b;
    b = NULL;
  }
  if (!a) return ng_fail(NG_ERR_INTERNAL, "a gradient reduction with no gradient");
  const unsigned rs = reduce_slices(ctx);
  const size_t local = 64 * (size_t)rs;
  /* each section keeps the cw it would have alone, so its bits do not depend on the other */
  const size_t cw = reduce_cw(ctx, rs, a->n, groups), blocks = (a->n + cw - 1) / cw;
  const size_t cw2 = b ? reduce_cw(ctx, rs, b->n, groups) : 64;
  const size_t blocks2 = b ? (b->n + cw2 - 1) / cw2 : 0;
  const size_t global = (blocks + blocks2) * local;
  cl_ulong poff = a->part_off, ooff = a->out.offset;
  cl_ulong poff2 = b ? b->part_off : 0, ooff2 = b ? b->out.offset : 0;
  cl_mem out2 = b ? b->out.mem : a->out.mem;
  cl_uint g = groups, nn = (cl_uint)a->n, cwa = (cl_uint)cw, nb = (cl_uint)blocks;
  cl_uint nn2 = b ? (cl_uint)b->n : 0, cwa2 = (cl_uint)cw2;
  cl_int acc = accumulate ? 1 : 0;
  const ng_arg args[] = {NG_ARG(part),  NG_ARG(poff), NG_ARG(g),     NG_ARG(nn),
                         NG_ARG(a->out.mem), NG_ARG(ooff), NG_ARG(acc), NG_ARG(cwa),
                         NG_ARG(nb),    NG_ARG(poff2), NG_ARG(nn2),  NG_ARG(out2),
                         NG_ARG(ooff2), NG_ARG(cwa2)};
  return ng_enqueue(ctx, q, prog, "ng_reduce_partials", global, local, args, NG_ARRAY_LEN(args),
                    nwait, wait, event);
}
