/* The benchmark driver behind `normgrad-cli bench`: times one pass of an op by the profiling
 * times of its kernels, and measures the device's copy bandwidth in the same run so the result
 * can be read as a fraction of what the memory system delivers. */
#include "cli.h"
#include "progress.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)
#define WARMUP 3
#define MIN_REPS 20
#define MAX_REPS 2000
#define BUDGET_S 1.5        /* wall time per timed pass, roughly */
#define FLUSH_BELOW (64 * MIB) /* working sets smaller than this may sit in a GPU's L2 */
#define FLUSH_BYTES ((size_t)128 << 20)
#define COPY_BYTES ((size_t)256 << 20)
#define COPY_REPS 20
#define COPY_WARMUP 5 /* a GPU idle since start-up may still be raising its clocks */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median of v[0..n) (v is sorted in place). */
static double median(double *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* 16-byte elements so that every device moves full vectors; one element per work-item keeps it
 * the simplest possible kernel (the figure is a ceiling to compare against, not a tuning
 * exercise). */
static const char copy_src[] =
    "__kernel void ng_bench_copy16(__global const uint4 *src, __global uint4 *dst) {\n"
    "  size_t i = get_global_id(0);\n"
    "  dst[i] = src[i];\n"
    "}\n";

/* Host time of back-to-back calls: HOST_CALLS in a row after the queue drained, no profiling
 * events, no waiting in between (how a training step issues them). */
#define HOST_CALLS 64

/* Median profiled time in ns of COPY_REPS copies of `elems` 16-byte elements (after
 * COPY_WARMUP untimed runs). Each run starts `elems` further into the buffers, wrapping before
 * the end: a copy smaller than the buffers then reads what the runs before it evicted from the
 * cache, as an op of the same size does after the bench's flush. */
static cl_int time_copy(cli_env *env, cl_kernel k, size_t buf_elems, size_t elems, double *ns,
                        cli_progress *pr) {
  double t[COPY_REPS];
  const size_t slices = buf_elems / elems;
  for (int r = -COPY_WARMUP; r < COPY_REPS; r++) {
    cl_event ev = NULL;
    cl_ulong a = 0, b = 0;
    const size_t off = (size_t)(r + COPY_WARMUP) % slices * elems;
    cl_int e = clEnqueueNDRangeKernel(env->queue, k, 1, &off, &elems, NULL, 0, NULL, &ev);
    if (e == CL_SUCCESS) e = clWaitForEvents(1, &ev);
    if (e == CL_SUCCESS)
      e = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof a, &a, NULL);
    if (e == CL_SUCCESS)
      e = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof b, &b, NULL);
    if (ev) clReleaseEvent(ev);
    if (e != CL_SUCCESS) return e;
    if (r >= 0) t[r] = (double)(b - a);
    cli_progress_step(pr, 1);
  }
  *ns = median(t, COPY_REPS);
  return CL_SUCCESS;
}

/* The copy bandwidth twice: over COPY_BYTES each way (the device's ceiling), and over the op's
 * own byte count (half read, half written), which pays the same fixed cost per kernel (its
 * start and drain, about 5 us on the H100) as the op does, so it is the most a single kernel
 * moving those bytes can reach. Also the driver's floor for one launch: the host time of
 * setting two arguments and enqueueing a small copy, back-to-back without events (what every
 * kernel of an op pays before normgrad adds anything). */
static int measure_copy(cli_env *env, cl_ulong max_alloc, double op_bytes, double *gbps,
                        double *same_gbps, double *enqueue_us, char *err, size_t errlen) {
  size_t bytes = COPY_BYTES;
  if (max_alloc && bytes > max_alloc) bytes = (size_t)max_alloc;
  bytes = bytes / 4096 * 4096;
  cl_int e = CL_SUCCESS;
  cl_program prog = NULL;
  cl_kernel k = NULL;
  cl_mem src = NULL, dst = NULL;
  int rc = CLI_DEVICE;
  src = clCreateBuffer(env->cl_ctx, CL_MEM_READ_ONLY, bytes, NULL, &e);
  if (src) dst = clCreateBuffer(env->cl_ctx, CL_MEM_WRITE_ONLY, bytes, NULL, &e);
  if (!src || !dst) {
    snprintf(err, errlen, "copy benchmark: clCreateBuffer(%zu bytes) failed: %d", bytes, e);
    goto done;
  }
  const cl_uint pattern = 0x3f803f80u;
  e = clEnqueueFillBuffer(env->queue, src, &pattern, sizeof pattern, 0, bytes, 0, NULL, NULL);
  const char *srcs[] = {copy_src};
  if (e == CL_SUCCESS) prog = clCreateProgramWithSource(env->cl_ctx, 1, srcs, NULL, &e);
  if (prog) e = clBuildProgram(prog, 1, &env->device, "", NULL, NULL);
  if (e == CL_SUCCESS) k = clCreateKernel(prog, "ng_bench_copy16", &e);
  if (k) e = clSetKernelArg(k, 0, sizeof src, &src);
  if (e == CL_SUCCESS) e = clSetKernelArg(k, 1, sizeof dst, &dst);
  if (e != CL_SUCCESS) {
    snprintf(err, errlen, "copy benchmark: building or setting up the copy kernel failed: %d", e);
    goto done;
  }
  const size_t global = bytes / 16;
  /* 16-byte elements each way, a multiple of 1024 so that the driver's choice of work-group
   * size is the one it makes for the large copy (an odd count got work-groups of one) */
  size_t same = (size_t)(op_bytes / 32) / 1024 * 1024;
  if (same < 1024) same = 1024;
  const bool own = same < global; /* larger ops: the ceiling is their copy already */
  cli_progress pr;
  cli_progress_begin(&pr, (COPY_REPS + COPY_WARMUP) * (own ? 2 : 1), "bench: copy bandwidth");
  double ns = 0, same_ns = 0;
  e = time_copy(env, k, global, global, &ns, &pr);
  if (e == CL_SUCCESS && own) e = time_copy(env, k, global, same, &same_ns, &pr);
  cli_progress_end(&pr);
  if (e != CL_SUCCESS) {
    snprintf(err, errlen, "copy benchmark: kernel run or profiling failed: %d", e);
    goto done;
  }
  *gbps = ns > 0 ? 2.0 * (double)bytes / ns : 0.0; /* read + written, bytes per ns = GB/s */
  *same_gbps = !own ? *gbps : same_ns > 0 ? 32.0 * (double)same / same_ns : 0.0;
  double th[HOST_CALLS];
  const size_t small = 4096;
  for (int r = 0; r < HOST_CALLS && e == CL_SUCCESS; r++) {
    const double h0 = cli_now_s();
    e = clSetKernelArg(k, 0, sizeof src, &src);
    if (e == CL_SUCCESS) e = clSetKernelArg(k, 1, sizeof dst, &dst);
    if (e == CL_SUCCESS) e = clEnqueueNDRangeKernel(env->queue, k, 1, NULL, &small, NULL, 0, NULL,
                                                    NULL);
    th[r] = (cli_now_s() - h0) * 1e6;
  }
  if (e == CL_SUCCESS) e = clFinish(env->queue);
  if (e != CL_SUCCESS) {
    snprintf(err, errlen, "copy benchmark: enqueue timing failed: %d", e);
    goto done;
  }
  *enqueue_us = median(th, HOST_CALLS);
  rc = CLI_OK;
done:
  if (k) clReleaseKernel(k);
  if (prog) clReleaseProgram(prog);
  if (src) clReleaseMemObject(src);
  if (dst) clReleaseMemObject(dst);
  return rc;
}

/* cli_bench_attach's table, reset by each cli_bench (one benchmark per process at a time). */
#define MAX_ATTACH 8
static const cli_bench_case *attached_case[MAX_ATTACH];
static const cli_bench_more *attached_more[MAX_ATTACH];
static int n_attached;

void cli_bench_attach(const cli_bench_case *c, const cli_bench_more *more) {
  if (n_attached < MAX_ATTACH) {
    attached_case[n_attached] = c;
    attached_more[n_attached++] = more;
  }
}

static const cli_bench_more *more_of(const cli_bench_case *c) {
  for (int i = 0; i < n_attached; i++)
    if (attached_case[i] == c) return attached_more[i];
  return NULL;
}

/* One repetition of a case: flush (untimed), then its kernels between profile begin/end. */
/* Host time of the last timed_run's op call (enqueueing only: the call does not wait), and
 * the time and name of each of its first EACH_MAX kernels. */
#define EACH_MAX 8
static double last_host_ns;
static cl_ulong last_each_ns[EACH_MAX];
static const char *last_names[EACH_MAX];
/* The detail message of the op call that failed, if one did (timed_run) */
static char run_detail[1024];

static ng_status timed_run(cli_env *env, const cli_bench_case *c, void *state, cl_mem flush,
                           size_t flush_bytes, unsigned rep, double *ns, unsigned *kernels) {
  if (flush) {
    const cl_uint pattern = rep * 2654435761u;
    cl_int e = clEnqueueFillBuffer(env->queue, flush, &pattern, sizeof pattern, 0, flush_bytes,
                                   0, NULL, NULL);
    if (e == CL_SUCCESS) e = clFinish(env->queue);
    if (e != CL_SUCCESS) return e;
  }
  ng_status s = ng_profile_begin();
  if (s != NG_SUCCESS) return s;
  const double h0 = cli_now_s();
  s = c->run(env, state);
  last_host_ns = (cli_now_s() - h0) * 1e9;
  /* ng_profile_end_each starts by clearing the library's detail message: keep the op's */
  if (s != NG_SUCCESS) snprintf(run_detail, sizeof run_detail, "%s", ng_last_error_detail());
  cl_ulong t = 0;
  ng_status s2 = ng_profile_end_each(&t, kernels, last_each_ns, last_names, EACH_MAX);
  if (s == NG_SUCCESS) s = s2;
  if (s == NG_SUCCESS && *kernels == 0) s = NG_ERR_INTERNAL; /* the op enqueued nothing */
  *ns = (double)t;
  return s;
}

/* --save-outputs and --check-outputs: the pass's outputs are tensors "out0".."out2" (the case's
 * output slots in order, 1-D), so a file fits a case exactly when every slot the case fills has
 * its tensor, of the same dtype and length, and the file has no other. */
static void out_name(int i, char name[16]) { snprintf(name, 16, "out%d", i); }

static int outputs_fit(const cli_bench_case *c, const cli_tensors *ref, char *err, size_t errlen) {
  size_t used = 0;
  for (int i = 0; i < 3; i++) {
    const cli_bench_output *o = &c->out[i];
    if (!o->mem) continue;
    used++;
    char name[16];
    out_name(i, name);
    const cli_tensor *t = cli_tensors_find(ref, name);
    if (!t || t->dtype != o->dtype || cli_tensor_numel(t) != o->count) {
      snprintf(err, errlen, "--check-outputs: the file's '%s' is %s; this pass writes %zu %s values "
               "there (was the file saved by the same op, pass, shape, dtype and frozen flags?)",
               name, t ? "another dtype or length" : "missing", o->count, ng_dtype_name(o->dtype));
      return CLI_USAGE;
    }
  }
  if (ref->count != used) {
    snprintf(err, errlen, "--check-outputs: the file has %zu tensors; this pass writes %zu",
             ref->count, used);
    return CLI_USAGE;
  }
  return CLI_OK;
}

/* After the timed runs: save the outputs to io->save, or their worst difference against
 * io->check's as a multiple of the allowed one (*worst) and the output it is in (*worst_slot, -1
 * when every value is equal). */
static int outputs_io(cli_env *env, const cli_op *op, const cli_bench_spec *spec,
                      const cli_bench_case *c, const cli_bench_io *io, double *worst,
                      int *worst_slot, char *err, size_t errlen) {
  void *got[3] = {0};
  int rc = cli_outputs_read(env, c, got);
  if (rc) snprintf(err, errlen, "reading the pass's outputs back failed");
  if (!rc && io->save) {
    cli_tensors ts = {0};
    char desc[256];
    snprintf(desc, sizeof desc, "%s %s, rows %zu, hidden %zu, %s%s%s", op->name, c->pass,
             spec->rows, spec->hidden, ng_dtype_name(spec->dtype),
             spec->freeze_weight ? ", weight frozen" : "", spec->freeze_bias ? ", bias frozen" : "");
    const char *meta[] = {"normgrad-cli bench", desc, NULL};
    for (int i = 0; i < 3 && !rc; i++) {
      const cli_bench_output *o = &c->out[i];
      if (!o->mem) continue;
      char name[16];
      out_name(i, name);
      const int64_t shape[1] = {(int64_t)o->count};
      if (cli_tensors_add(&ts, name, o->dtype, 1, shape, got[i])) {
        snprintf(err, errlen, "out of host memory");
        rc = CLI_DEVICE;
      }
    }
    if (!rc) rc = cli_st_write(io->save, &ts, meta, err, errlen);
    cli_tensors_free(&ts);
  }
  if (!rc && io->check) {
    void *ref[3] = {0};
    for (int i = 0; i < 3; i++) {
      char name[16];
      out_name(i, name);
      const cli_tensor *t = c->out[i].mem ? cli_tensors_find(io->check, name) : NULL;
      ref[i] = t ? t->data : NULL;
    }
    *worst = cli_outputs_compare(c, ref, got, worst_slot);
  }
  for (int i = 0; i < 3; i++) free(got[i]);
  return rc;
}

/* A backward needs the forward's stats: the passes before `which` run once, untimed, on a
 * context of the same device with the rules' launches (every override off, the tuned and
 * built-in tables too), so a backward's inputs are the same bits whatever NORMGRAD_TUNE,
 * tuning.txt or a build's table set. Otherwise --check-outputs would compare two forwards as
 * well: in `llama` mode dW sums the rounded xhat, which an ulp of rstd moves, and a forward on
 * another launch moved dW by 2-65 times the f32 bound (docs/cli.md). */
static ng_status inputs_of_rules(cli_env *env, const cli_bench_case *cases, int which,
                                 void *state) {
  ng_context *rules = NULL, *own = env->ctx;
  ng_status s = ng_context_create(env->cl_ctx, env->device, &rules);
  for (int w = NG_TUNE_WORKGROUP; s == NG_SUCCESS && w <= NG_TUNE_FUSED_REDUCE; w++)
    s = ng_context_override(rules, (ng_tune)w, w == NG_TUNE_TABLE ? 1u : NG_TUNE_AUTO);
  env->ctx = rules;
  for (int i = 0; i < which && s == NG_SUCCESS; i++) {
    s = cases[i].run(env, state);
    if (s == NG_SUCCESS) s = clFinish(env->queue);
  }
  env->ctx = own;
  ng_context_release(rules);
  return s;
}

int cli_bench(cli_env *env, const cli_op *op, const cli_bench_spec *spec, const cli_options *o,
              const char *pass, bool json, const cli_bench_io *io) {
  char err[1024] = "";
  run_detail[0] = '\0';
  cli_device_desc dev;
  cli_describe_device(env->device, &dev);
  cli_progress_enable(!json); /* --json output is for programs: no decoration anywhere */

  cli_bench_case cases[4];
  memset(cases, 0, sizeof cases);
  int ncases = 0;
  void *state = NULL;
  n_attached = 0;
  int rc = op->bench_setup(env, spec, o, cases, &ncases, &state, err, sizeof err);
  if (rc) return cli_error(rc, "bench %s: %s", op->name, *err ? err : "setup failed");
  int which = -1;
  for (int i = 0; i < ncases; i++)
    if (!strcmp(cases[i].pass, pass)) which = i;
  if (which < 0) {
    char list[128] = "";
    size_t used = 0;
    for (int i = 0; i < ncases && used < sizeof list; i++)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                               cases[i].pass);
    op->bench_cleanup(state);
    return cli_error(CLI_USAGE, "bench %s: unknown --pass '%s' (this op has: %s)", op->name,
                     pass, list);
  }
  const cli_bench_case *c = &cases[which];
  /* the outputs to save or check: known once the op has set the case up, before any run */
  const bool has_out = c->out[0].mem || c->out[1].mem || c->out[2].mem;
  if (io && (io->save || io->check)) {
    if (!has_out) {
      snprintf(err, sizeof err, "--pass %s reports no outputs to save or check", c->pass);
      rc = CLI_USAGE;
    } else if (io->check) {
      rc = outputs_fit(c, io->check, err, sizeof err);
    }
    if (rc) {
      op->bench_cleanup(state);
      return cli_error(rc, "bench %s: %s", op->name, err);
    }
  }
  double outputs_worst = -1; /* --check-outputs' result (< 0: not checked) */
  int worst_slot = -1;       /* ... and the output slot it is in */

  double copy_gbps = 0, copy_same_gbps = 0, enqueue_us = 0;
  rc = measure_copy(env, dev.max_alloc, c->bytes, &copy_gbps, &copy_same_gbps, &enqueue_us, err,
                    sizeof err);
  if (rc) {
    op->bench_cleanup(state);
    return cli_error(rc, "bench: %s", err);
  }

  cl_mem flush = NULL;
  size_t flush_bytes = 0;
  double *t = NULL, *ts = NULL, *th = NULL, *te = NULL;
  unsigned kernels = 0, sub_kernels = 0, reps = 0;
  static const cli_bench_more none_more;
  const cli_bench_more *more = more_of(c) ? more_of(c) : &none_more;
  const bool sub = more->sub_run != NULL;
  cli_bench_case subc = *c;
  subc.run = more->sub_run;
  ng_status s = NG_SUCCESS;
  if (which > 0) s = inputs_of_rules(env, cases, which, state);
  if (s != NG_SUCCESS) goto failed;
  if (c->bytes < FLUSH_BELOW) {
    flush_bytes = FLUSH_BYTES;
    if (dev.max_alloc && flush_bytes > dev.max_alloc) flush_bytes = (size_t)dev.max_alloc / 4 * 4;
    flush = cli_alloc(env, flush_bytes, err, sizeof err);
    if (!flush) {
      rc = CLI_DEVICE;
      goto out;
    }
  }
  char label[160];
  cli_progress pr;
  snprintf(label, sizeof label, "bench %s %s: warm-up", op->name, c->pass);
  cli_progress_begin(&pr, WARMUP, label);
  double ns = 0, t0 = cli_now_s();
  for (unsigned r = 0; r < WARMUP && s == NG_SUCCESS; r++) {
    s = timed_run(env, c, state, flush, flush_bytes, r, &ns, &kernels);
    if (s == NG_SUCCESS && sub)
      s = timed_run(env, &subc, state, flush, flush_bytes, r, &ns, &sub_kernels);
    cli_progress_step(&pr, 1);
  }
  cli_progress_end(&pr);
  if (s != NG_SUCCESS) goto failed;
  const double per_rep = (cli_now_s() - t0) / WARMUP;
  reps = per_rep > 0 ? (unsigned)fmin(MAX_REPS, BUDGET_S / per_rep) : MAX_REPS;
  if (reps < MIN_REPS) reps = MIN_REPS;
  t = malloc(reps * sizeof *t);
  ts = malloc(reps * sizeof *ts);
  th = malloc(reps * sizeof *th);
  te = malloc((size_t)reps * EACH_MAX * sizeof *te);
  if (!t || !ts || !th || !te) {
    rc = cli_error(CLI_DEVICE, "out of host memory");
    goto out;
  }
  /* The second measurement alternates with the first, so both see the same device state. */
  snprintf(label, sizeof label, "bench %s %s: timing", op->name, c->pass);
  cli_progress_begin(&pr, reps, label);
  for (unsigned r = 0; r < reps && s == NG_SUCCESS; r++) {
    s = timed_run(env, c, state, flush, flush_bytes, WARMUP + r, &t[r], &kernels);
    th[r] = last_host_ns;
    for (unsigned x = 0; x < EACH_MAX; x++) te[(size_t)x * reps + r] = (double)last_each_ns[x];
    if (s == NG_SUCCESS && sub)
      s = timed_run(env, &subc, state, flush, flush_bytes, WARMUP + r, &ts[r], &sub_kernels);
    cli_progress_step(&pr, 1);
  }
  cli_progress_end(&pr);
  if (s != NG_SUCCESS) goto failed;
  /* back-to-back calls (no events, no flush): the host cost a training loop sees */
  double hs[HOST_CALLS];
  s = clFinish(env->queue);
  for (unsigned r = 0; r < HOST_CALLS && s == NG_SUCCESS; r++) {
    const double h0 = cli_now_s();
    s = c->run(env, state);
    hs[r] = (cli_now_s() - h0) * 1e6;
  }
  if (s == NG_SUCCESS) s = clFinish(env->queue);
  if (s != NG_SUCCESS) goto failed;
  if (io && (io->save || io->check)) {
    rc = outputs_io(env, op, spec, c, io, &outputs_worst, &worst_slot, err, sizeof err);
    if (rc) {
      cli_error(rc, "bench %s %s: %s", op->name, c->pass, err);
      goto out;
    }
  }

  {
    const char *worst_name = worst_slot >= 0 ? c->out[worst_slot].name : NULL;
    const double med_ns = median(t, reps), gbps = med_ns > 0 ? c->bytes / med_ns : 0;
    const double host_us = median(th, reps) * 1e-3;
    const double stream_us = median(hs, HOST_CALLS);
    const double lib_us = stream_us - kernels * enqueue_us;
    const unsigned each = kernels < EACH_MAX ? kernels : EACH_MAX;
    double each_ms[EACH_MAX];
    for (unsigned x = 0; x < each; x++) each_ms[x] = median(te + (size_t)x * reps, reps) * 1e-6;
    const double ratio = copy_gbps > 0 ? gbps / copy_gbps : 0;
    const double ratio_same = copy_same_gbps > 0 ? gbps / copy_same_gbps : 0;
    const double sub_ns = sub ? median(ts, reps) : 0;
    const double tflops = more->flops > 0 && med_ns > 0 ? more->flops / med_ns * 1e-3 : 0;
    const double sub_tflops = more->flops > 0 && sub_ns > 0 ? more->flops / sub_ns * 1e-3 : 0;
    const char *dt = ng_dtype_name(spec->dtype);
    if (json) {
      cJSON *j = cJSON_CreateObject();
      bool ok = j != NULL;
      ok = ok && cJSON_AddStringToObject(j, "op", op->name);
      ok = ok && cJSON_AddStringToObject(j, "pass", c->pass);
      ok = ok && cJSON_AddNumberToObject(j, "rows", (double)spec->rows);
      ok = ok && cJSON_AddNumberToObject(j, "hidden", (double)spec->hidden);
      ok = ok && cJSON_AddStringToObject(j, "dtype", dt);
      ok = ok && cJSON_AddBoolToObject(j, "frozen", spec->freeze_weight);
      ok = ok && cJSON_AddBoolToObject(j, "frozen_bias", spec->freeze_bias);
      ok = ok && cJSON_AddNumberToObject(j, "bytes", c->bytes);
      ok = ok && cJSON_AddNumberToObject(j, "median_ms", med_ns * 1e-6);
      ok = ok && cJSON_AddNumberToObject(j, "min_ms", t[0] * 1e-6);
      ok = ok && cJSON_AddNumberToObject(j, "max_ms", t[reps - 1] * 1e-6);
      ok = ok && cJSON_AddNumberToObject(j, "reps", reps);
      ok = ok && cJSON_AddNumberToObject(j, "kernels", kernels);
      ok = ok && cJSON_AddNumberToObject(j, "host_us", host_us);
      ok = ok && cJSON_AddNumberToObject(j, "host_stream_us", stream_us);
      ok = ok && cJSON_AddNumberToObject(j, "enqueue_us", enqueue_us);
      ok = ok && cJSON_AddNumberToObject(j, "host_lib_us", lib_us);
      cJSON *ka = ok ? cJSON_AddArrayToObject(j, "each_kernel") : NULL;
      ok = ok && ka;
      for (unsigned x = 0; x < each && ok; x++) {
        cJSON *e = cJSON_CreateObject();
        ok = e && cJSON_AddItemToArray(ka, e);
        ok = ok && cJSON_AddStringToObject(e, "name", last_names[x] ? last_names[x] : "?");
        ok = ok && cJSON_AddNumberToObject(e, "median_ms", each_ms[x]);
      }
      ok = ok && cJSON_AddNumberToObject(j, "gbps", gbps);
      ok = ok && cJSON_AddNumberToObject(j, "copy_gbps", copy_gbps);
      ok = ok && cJSON_AddNumberToObject(j, "ratio", ratio);
      ok = ok && cJSON_AddNumberToObject(j, "copy_same_gbps", copy_same_gbps);
      ok = ok && cJSON_AddNumberToObject(j, "ratio_same", ratio_same);
      ok = ok && cJSON_AddBoolToObject(j, "cache_flush", flush != NULL);
      ok = ok && cJSON_AddStringToObject(j, "device", dev.name);
      ok = ok && cJSON_AddStringToObject(j, "platform", dev.platform);
      ok = ok && cJSON_AddStringToObject(j, "driver", dev.driver);
      if (more->flops > 0) {
        ok = ok && cJSON_AddNumberToObject(j, "flops", more->flops);
        ok = ok && cJSON_AddNumberToObject(j, "tflops", tflops);
      }
      if (sub) {
        ok = ok &&
             cJSON_AddStringToObject(j, "sub_pass", more->sub_pass ? more->sub_pass : "sub");
        ok = ok && cJSON_AddNumberToObject(j, "sub_median_ms", sub_ns * 1e-6);
        ok = ok && cJSON_AddNumberToObject(j, "sub_min_ms", ts[0] * 1e-6);
        ok = ok && cJSON_AddNumberToObject(j, "sub_max_ms", ts[reps - 1] * 1e-6);
        ok = ok && cJSON_AddNumberToObject(j, "sub_kernels", sub_kernels);
        if (more->flops > 0) ok = ok && cJSON_AddNumberToObject(j, "sub_tflops", sub_tflops);
      }
      for (size_t x = 0; x < sizeof more->extra / sizeof more->extra[0]; x++)
        if (more->extra[x].key)
          ok = ok && cJSON_AddNumberToObject(j, more->extra[x].key, more->extra[x].value);
      /* cJSON writes infinity as null: a NaN where the file has none */
      if (outputs_worst >= 0) {
        ok = ok && cJSON_AddNumberToObject(j, "outputs_check", outputs_worst);
        ok = ok && (worst_name ? cJSON_AddStringToObject(j, "outputs_check_worst", worst_name)
                               : cJSON_AddNullToObject(j, "outputs_check_worst"));
      }
      char *txt = ok ? cJSON_PrintUnformatted(j) : NULL;
      cJSON_Delete(j);
      if (!txt) {
        rc = cli_error(CLI_DEVICE, "out of host memory");
        goto out;
      }
      printf("%s\n", txt);
      cJSON_free(txt);
    } else {
      printf("%s %s: rows %zu, hidden %zu, %s, weight %s%s\n", op->name, c->pass, spec->rows,
             spec->hidden, dt, spec->freeze_weight ? "frozen" : "trained",
             spec->freeze_bias ? ", bias frozen" : "");
      printf("  device     %s (%s, driver %s)\n", dev.name, dev.platform, dev.driver);
      printf("  median     %.4f ms  (min %.4f, max %.4f; %u repetitions of %u kernel%s%s)\n",
             med_ns * 1e-6, t[0] * 1e-6, t[reps - 1] * 1e-6, reps, kernels,
             kernels == 1 ? "" : "s", flush ? ", caches flushed between" : "");
      printf("  host       %.1f us per call back-to-back, %.1f us after an idle queue with profiling\n"
             "             events (medians; the call only enqueues); the driver's bare launch takes\n"
             "             %.1f us, so normgrad's own share is %.1f us over %u launch%s\n",
             stream_us, host_us, enqueue_us, lib_us, kernels, kernels == 1 ? "" : "es");
      for (unsigned x = 0; x < each && kernels > 1; x++)
        printf("  kernel %u   %.4f ms  %s (median)\n", x + 1, each_ms[x],
               last_names[x] ? last_names[x] : "?");
      printf("  moved      %.2f MB (every input read once, every output written once)\n",
             c->bytes / 1e6);
      printf("  bandwidth  %.2f GB/s = %.2f of copy (%.2f GB/s); %.2f of a copy of the same\n"
             "             bytes (%.2f GB/s, one kernel's start and drain included)\n",
             gbps, ratio, copy_gbps, ratio_same, copy_same_gbps);
      if (more->flops > 0)
        printf("  compute    %.4g TFLOP/s (%.4g GFLOP per pass)\n", tflops, more->flops * 1e-9);
      if (sub) {
        printf("  %-10s %.4f ms  (min %.4f, max %.4f; %u kernels; timed alternately in this run)\n",
               more->sub_pass ? more->sub_pass : "sub", sub_ns * 1e-6, ts[0] * 1e-6,
               ts[reps - 1] * 1e-6, sub_kernels);
        printf("  %-10s the whole pass takes %.3fx that time", "", sub_ns > 0 ? med_ns / sub_ns : 0);
        if (more->flops > 0) printf(" (%.4g TFLOP/s)", sub_tflops);
        printf("\n");
      }
      for (size_t x = 0; x < sizeof more->extra / sizeof more->extra[0]; x++)
        if (more->extra[x].key) {
          const double xv = more->extra[x].value;
          printf(xv == floor(xv) && fabs(xv) < 1e15 ? "  %-20s %.0f\n" : "  %-20s %.4g\n",
                 more->extra[x].key, xv);
        }
      if (outputs_worst >= 0)
        printf("  outputs    %s the --check-outputs file's: worst difference %.3g x the allowed "
               "one%s%s\n", outputs_worst <= 1 ? "agree with" : "DIFFER from", outputs_worst,
               worst_name ? ", in " : "", worst_name ? worst_name : "");
    }
  }
  rc = CLI_OK;
  goto out;
failed:
  rc = cli_fail_status_detail(s, "bench", run_detail[0] ? run_detail : ng_last_error_detail(),
                              err, sizeof err);
  cli_error(rc, "bench %s %s: %s", op->name, c->pass, err);
out:
  free(t);
  free(ts);
  free(th);
  free(te);
  if (flush) clReleaseMemObject(flush);
  op->bench_cleanup(state);
  return rc;
}
