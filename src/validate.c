/* Argument checks shared by every op. Each runs before anything is enqueued, and each failure
 * names the argument in the detail message. */
#include "ng_internal.h"

#include <math.h>

bool ng_mul_overflows(size_t a, size_t b, size_t *out) {
  if (a != 0 && b > SIZE_MAX / a) return true;
  *out = a * b;
  return false;
}

bool ng_is_float_dtype(ng_dtype d) { return d == NG_F32 || d == NG_F16 || d == NG_BF16; }

ng_status ng_check_tensor(ng_context *ctx, ng_tensor t, const char *what, size_t count,
                          bool float_only) {
  if (!t.mem) return ng_fail(NG_ERR_NULL_BUFFER, "%s: buffer is NULL", what);
  size_t es = ng_dtype_size(t.dtype);
  if (es == 0 || (float_only && !ng_is_float_dtype(t.dtype)) ||
      (!float_only && ng_is_float_dtype(t.dtype)))
    return ng_fail(NG_ERR_UNSUPPORTED_DTYPE, "%s: dtype %d is not supported here", what,
                   (int)t.dtype);
  size_t size = 0;
  cl_context mc = NULL;
  cl_int e = clGetMemObjectInfo(t.mem, CL_MEM_SIZE, sizeof size, &size, NULL);
  if (e == CL_SUCCESS) e = clGetMemObjectInfo(t.mem, CL_MEM_CONTEXT, sizeof mc, &mc, NULL);
  if (e != CL_SUCCESS) return ng_fail(e, "%s: not a valid cl_mem", what);
  if (mc != ctx->cl_ctx)
    return ng_fail(CL_INVALID_CONTEXT, "%s: buffer belongs to another OpenCL context", what);
  size_t off_bytes, cnt_bytes;
  if (ng_mul_overflows(t.offset, es, &off_bytes) || ng_mul_overflows(count, es, &cnt_bytes) ||
      off_bytes > SIZE_MAX - cnt_bytes)
    return ng_fail(NG_ERR_INDEX_OVERFLOW, "%s: offset %zu + %zu elements overflow", what,
                   t.offset, count);
  if (off_bytes >= size && count > 0)
    return ng_fail(NG_ERR_OFFSET_OUT_OF_RANGE,
                   "%s: offset %zu elements (%zu bytes) is past the end of a %zu-byte buffer",
                   what, t.offset, off_bytes, size);
  if (off_bytes + cnt_bytes > size)
    return ng_fail(NG_ERR_BUFFER_TOO_SMALL,
                   "%s: needs %zu elements of %s from offset %zu (%zu bytes), buffer has %zu",
                   what, count, ng_dtype_name(t.dtype), t.offset, off_bytes + cnt_bytes, size);
  return NG_SUCCESS;
}

ng_status ng_check_queue(ng_context *ctx, cl_command_queue queue) {
  if (!queue) return ng_fail(NG_ERR_NULL_HANDLE, "queue is NULL");
  cl_device_id dev = NULL;
  cl_command_queue_properties props = 0;
  cl_int e = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
  if (e == CL_SUCCESS)
    e = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
  cl_context qc = NULL;
  if (e == CL_SUCCESS) e = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qc, &qc, NULL);
  if (e != CL_SUCCESS) return ng_fail(e, "queue: not a valid command queue");
  /* PoCL only notices at enqueue time; the check belongs before anything is built or written */
  if (qc != ctx->cl_ctx)
    return ng_fail(CL_INVALID_CONTEXT, "queue belongs to another OpenCL context than ctx");
  if (dev != ctx->device)
    return ng_fail(NG_ERR_UNSUPPORTED_QUEUE, "queue belongs to another device than the context");
  if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
    return ng_fail(NG_ERR_UNSUPPORTED_QUEUE, "queue is out-of-order; normgrad needs in-order");
  return NG_SUCCESS;
}

bool ng_vec_aligned(const ng_context *ctx, ng_tensor t, size_t row_len, unsigned vec) {
  if (!t.mem) return true;
  size_t es = ng_dtype_size(t.dtype);
  return t.offset % vec == 0 && row_len % vec == 0 && ctx->info.base_align_bytes >= vec * es;
}

ng_status ng_check_rows(size_t rows, size_t n, size_t *count) {
  if (rows == 0 || n == 0)
    return ng_fail(NG_ERR_INVALID_SHAPE, "rows (%zu) and n (%zu) must both be at least 1", rows, n);
  /* 2^31, not 2^32 − 1: the kernels step 32-bit counters by up to `rows` (persistent groups) or
   * a work-group, and a counter that wrapped past 2^32 would loop for ever. */
  const size_t lim = (size_t)1 << 31;
  if (rows > lim || n > lim || ng_mul_overflows(rows, n, count))
    return ng_fail(NG_ERR_INDEX_OVERFLOW,
                   "rows %zu x n %zu exceeds the supported index range (each at most 2^31)", rows,
                   n);
  return NG_SUCCESS;
}

ng_status ng_check_wait_list(cl_uint nwait, const cl_event *wait) {
  if ((nwait == 0) != (wait == NULL))
    return ng_fail(CL_INVALID_EVENT_WAIT_LIST, "num_events_in_wait_list is %u but event_wait_list "
                   "is %s", nwait, wait ? "not NULL" : "NULL");
  for (cl_uint i = 0; i < nwait; i++)
    if (!wait[i]) return ng_fail(CL_INVALID_EVENT_WAIT_LIST, "event_wait_list[%u] is NULL", i);
  return NG_SUCCESS;
}

ng_status ng_check_scalar(float v, const char *what, bool nonneg) {
  if (!(v == v) || v == (float)INFINITY || v == -(float)INFINITY || (nonneg && v < 0.0f))
    return ng_fail(NG_ERR_INVALID_VALUE, "%s = %g must be finite%s", what, (double)v,
                   nonneg ? " and non-negative" : "");
  return NG_SUCCESS;
}

ng_status ng_check_same_dtype(ng_tensor a, const char *an, ng_tensor b, const char *bn) {
  if (a.dtype != b.dtype)
    return ng_fail(NG_ERR_DTYPE_MISMATCH, "%s has dtype %s but %s has %s", bn,
                   ng_dtype_name(b.dtype) ? ng_dtype_name(b.dtype) : "?", an,
                   ng_dtype_name(a.dtype) ? ng_dtype_name(a.dtype) : "?");
  return NG_SUCCESS;
}
