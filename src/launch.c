/* Kernel launch and scratch handling shared by the ops. Kernels are created per call from the
 * cached program: a cl_kernel's arguments are not thread-safe to set, a cl_program is. */
#include "ng_internal.h"

#include <stdlib.h>

/* Recorded entries grow as needed (an op like FLCE makes hundreds of GEMM calls); the arrays
 * are freed by ng_profile_end. */
#define NG_PROFILE_MAX (1u << 20)
static _Thread_local struct {
  bool active, overflow;
  unsigned count, cap;
  cl_event *ev;
  cl_event *from; /* span entries: timed from this event's END; else NULL */
  const char **name; /* kernel names (static strings) */
} prof;

bool ng_profile_active(void) { return prof.active; }

static bool profile_room(void) {
  if (prof.count < prof.cap) return true;
  unsigned nc = prof.cap ? prof.cap * 2 : 64;
  if (prof.count >= NG_PROFILE_MAX) return false;
  if (nc > NG_PROFILE_MAX) nc = NG_PROFILE_MAX;
  cl_event *e = realloc(prof.ev, nc * sizeof *e);
  if (!e) return false;
  prof.ev = e;
  cl_event *f = realloc(prof.from, nc * sizeof *f);
  if (!f) return false;
  prof.from = f;
  const char **nm = realloc(prof.name, nc * sizeof *nm);
  if (!nm) return false;
  prof.name = nm;
  prof.cap = nc;
  return true;
}

/* One entry, timed to the end of `to` from its start, or from the end of `from` if given. The
 * events stay in their own array: clWaitForEvents takes them as one list. */
static void profile_push(cl_event to, cl_event from, const char *name) {
  if (!profile_room()) {
    prof.overflow = true;
    return;
  }
  clRetainEvent(to);
  if (from) clRetainEvent(from);
  prof.from[prof.count] = from;
  prof.name[prof.count] = name;
  prof.ev[prof.count++] = to;
}

void ng_profile_record(cl_event ev, const char *name) {
  if (prof.active && ev) profile_push(ev, NULL, name);
}

void ng_profile_record_span(cl_event from, cl_event to, const char *name) {
  if (prof.active && from && to) profile_push(to, from, name);
}

static void profile_release_all(void) {
  for (unsigned i = 0; i < prof.count; i++) {
    clReleaseEvent(prof.ev[i]);
    if (prof.from[i]) clReleaseEvent(prof.from[i]);
  }
  prof.count = 0;
  free(prof.ev);
  free(prof.from);
  free(prof.name);
  prof.ev = prof.from = NULL;
  prof.name = NULL;
  prof.cap = 0;
}

ng_status ng_profile_begin(void) {
  ng_clear_detail();
  profile_release_all();
  prof.overflow = false;
  prof.active = true;
  return NG_SUCCESS;
}

ng_status ng_profile_end(cl_ulong *kernel_ns, unsigned *kernels) {
  return ng_profile_end_each(kernel_ns, kernels, NULL, NULL, 0);
}

ng_status ng_profile_end_each(cl_ulong *kernel_ns, unsigned *kernels, cl_ulong *each_ns,
                              const char **names, unsigned cap) {
  ng_clear_detail();
  ng_status s = NG_SUCCESS;
  cl_ulong total = 0;
  if (!prof.active) s = ng_fail(NG_ERR_INVALID_VALUE, "ng_profile_end without ng_profile_begin");
  if (s == NG_SUCCESS && prof.count) s = clWaitForEvents(prof.count, prof.ev);
  for (unsigned i = 0; i < prof.count && s == NG_SUCCESS; i++) {
    cl_ulong a = 0, b = 0;
    if (prof.from[i])
      s = clGetEventProfilingInfo(prof.from[i], CL_PROFILING_COMMAND_END, sizeof a, &a, NULL);
    else
      s = clGetEventProfilingInfo(prof.ev[i], CL_PROFILING_COMMAND_START, sizeof a, &a, NULL);
    if (s == CL_SUCCESS)
      s = clGetEventProfilingInfo(prof.ev[i], CL_PROFILING_COMMAND_END, sizeof b, &b, NULL);
    if (s != CL_SUCCESS) ng_fail(s, "profiling info not available (queue without profiling?)");
    total += b > a ? b - a : 0;
    if (i < cap && each_ns) each_ns[i] = b > a ? b - a : 0;
    if (i < cap && names) names[i] = prof.name[i];
  }
  if (s == NG_SUCCESS && prof.overflow)
    s = ng_fail(NG_ERR_INVALID_VALUE, "more than %u kernels between begin and end (or no host "
                "memory to record them)", NG_PROFILE_MAX);
  if (kernel_ns) *kernel_ns = total;
  if (kernels) *kernels = prof.count;
  profile_release_all();
  prof.active = false;
  return s;
}

ng_status ng_enqueue(ng_context *ctx, cl_command_queue q, cl_program prog, const char *kname,
                     size_t global, size_t local, const ng_arg *args, cl_uint nargs, cl_uint nwait,
                     const cl_event *wait, cl_event *event) {
  /* The ops check the wait list before anything else; this catches an op that does not, before
   * the runtime dereferences a NULL list. */
  cl_int e = ng_check_wait_list(nwait, nwait ? wait : NULL);
  if (e != CL_SUCCESS) return e;
  ng_kernel_slot *slot = ng_kernel_get(ctx, prog, kname, &e);
  if (!slot) return ng_fail(e, "clCreateKernel(%s) failed", kname);
  cl_kernel k = slot->kernel;
  pthread_mutex_lock(&slot->lock); /* arguments are the kernel object's state until enqueued */
  for (cl_uint i = 0; i < nargs && e == CL_SUCCESS; i++) {
    e = clSetKernelArg(k, i, args[i].size, args[i].ptr);
    if (e != CL_SUCCESS) ng_fail(e, "clSetKernelArg(%s, %u) failed", kname, i);
  }
  if (e == CL_SUCCESS) {
    cl_event own = NULL;
    cl_event *evp = event ? event : (prof.active ? &own : NULL);
    e = clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, nwait, nwait ? wait : NULL, evp);
    if (e == CL_SUCCESS && evp) ng_profile_record(*evp, kname);
    if (own) clReleaseEvent(own);
    if (e != CL_SUCCESS)
      ng_fail(e, "clEnqueueNDRangeKernel(%s, global %zu, local %zu) failed", kname, global,
              local);
  }
  pthread_mutex_unlock(&slot->lock);
  return e;
}

ng_status ng_scratch_acquire(ng_context *ctx, ng_tensor caller, size_t bytes, ng_scratch *out) {
  out->mem = NULL;
  out->offset_bytes = 0;
  out->owned = false;
  if (bytes == 0) return NG_SUCCESS;
  if (caller.mem) {
    if (caller.dtype != NG_F32)
      return ng_fail(NG_ERR_UNSUPPORTED_DTYPE, "scratch: must be an f32 tensor");
    ng_status s = ng_check_tensor(ctx, caller, "scratch", bytes / 4, true);
    if (s != NG_SUCCESS) return s;
    out->mem = caller.mem;
    out->offset_bytes = caller.offset * 4;
    return NG_SUCCESS;
  }
  /* Some drivers (NVIDIA's) allocate on first use, so an oversized buffer would only fail once
   * a kernel runs, after other outputs were written: refuse it here, before anything is enqueued. */
  if (ctx->info.max_alloc && bytes > ctx->info.max_alloc)
    return ng_fail(CL_INVALID_BUFFER_SIZE,
                   "scratch: %zu bytes exceed the device's largest allocation (%llu bytes)", bytes,
                   (unsigned long long)ctx->info.max_alloc);
  cl_int e = CL_SUCCESS;
  out->mem = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &e);
  if (!out->mem) return ng_fail(e, "scratch: clCreateBuffer(%zu bytes) failed", bytes);
  out->owned = true;
  return NG_SUCCESS;
}

ng_status ng_scratch_acquire_vec(ng_context *ctx, ng_tensor caller, size_t bytes, ng_scratch *out) {
  if (caller.mem && bytes && caller.offset % NG_SCRATCH_VEC) {
    const size_t up = NG_SCRATCH_VEC - caller.offset % NG_SCRATCH_VEC;
    if (caller.offset > SIZE_MAX - up)
      return ng_fail(NG_ERR_INDEX_OVERFLOW, "scratch: offset %zu overflows", caller.offset);
    caller.offset += up;
    ng_status s = ng_scratch_acquire(ctx, caller, bytes, out);
    if (s == NG_ERR_BUFFER_TOO_SMALL) /* past the end, the offset's own message stands */
      s = ng_fail(s, "scratch: %zu bytes from element %zu (the offset rounded up to a multiple of "
                  "%u, as the partial rows are written %u floats at a time) pass the buffer's "
                  "end; size it with the op's *_scratch_size",
                  bytes, caller.offset, NG_SCRATCH_VEC, NG_SCRATCH_VEC);
    return s;
  }
  return ng_scratch_acquire(ctx, caller, bytes, out);
}

void ng_scratch_release(ng_scratch *s) {
  if (s->owned && s->mem) clReleaseMemObject(s->mem);
  s->mem = NULL;
  s->owned = false;
}
