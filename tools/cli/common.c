/* Device-side helpers shared by the subcommands and the op files: opening the device, moving
 * tensors to and from it, turning normgrad statuses into exit codes. */
#include "cli.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double cli_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void fmt(char *err, size_t errlen, const char *f, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void fmt(char *err, size_t errlen, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  if (err && errlen) vsnprintf(err, errlen, f, ap);
  va_end(ap);
}

const cli_op *cli_find_op(const char *name) {
  for (const cli_op *const *op = cli_ops; *op; op++)
    if (strcmp((*op)->name, name) == 0) return *op;
  return NULL;
}

int cli_fail_status(ng_status s, const char *what, char *err, size_t errlen) {
  return cli_fail_status_detail(s, what, ng_last_error_detail(), err, errlen);
}

int cli_fail_status_detail(ng_status s, const char *what, const char *detail, char *err,
                           size_t errlen) {
  fmt(err, errlen, "%s: %s: %s%s%s%s", what, ng_status_name(s), ng_status_message(s),
      detail && *detail ? " (" : "", detail && *detail ? detail : "",
      detail && *detail ? ")" : "");
  switch (s) {
  case NG_ERR_NULL_HANDLE:
  case NG_ERR_NULL_BUFFER:
  case NG_ERR_BUFFER_TOO_SMALL:
  case NG_ERR_OFFSET_OUT_OF_RANGE:
  case NG_ERR_INVALID_SHAPE:
  case NG_ERR_INDEX_OVERFLOW:
  case NG_ERR_UNSUPPORTED_DTYPE:
  case NG_ERR_DTYPE_MISMATCH:
  case NG_ERR_INVALID_VALUE:
  case NG_ERR_GROUPS_NOT_DIVISIBLE:
  case NG_ERR_TARGET_OUT_OF_RANGE:
    return CLI_USAGE;
  default:
    return CLI_DEVICE; /* OpenCL codes, build failures, no device, GEMM, host memory, internal */
  }
}

/* ---- device ------------------------------------------------------------------------------------ */
const char *cli_device_type_str(cl_device_type t) {
  if (t & CL_DEVICE_TYPE_GPU) return "GPU";
  if (t & CL_DEVICE_TYPE_CPU) return "CPU";
  if (t & CL_DEVICE_TYPE_ACCELERATOR) return "ACCELERATOR";
#ifdef CL_DEVICE_TYPE_CUSTOM
  if (t & CL_DEVICE_TYPE_CUSTOM) return "CUSTOM";
#endif
  return "OTHER";
}

void cli_describe_device(cl_device_id dev, cli_device_desc *d) {
  memset(d, 0, sizeof *d);
  cl_platform_id plat = NULL;
  clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof d->name - 1, d->name, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof d->vendor - 1, d->vendor, NULL);
  clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof d->driver - 1, d->driver, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_VERSION, sizeof d->version - 1, d->version, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof d->type, &d->type, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof d->compute_units, &d->compute_units,
                  NULL);
  clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof d->global_mem, &d->global_mem, NULL);
  clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof d->max_alloc, &d->max_alloc, NULL);
  if (clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL) == CL_SUCCESS && plat)
    clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof d->platform - 1, d->platform, NULL);
}

int cli_env_open(const char *selector, cli_env *env, char *err, size_t errlen) {
  memset(env, 0, sizeof *env);
  if (!selector || !*selector) selector = getenv("NORMGRAD_DEVICE");
  const bool chosen = selector && *selector;
  ng_status s = ng_context_create_selected(chosen ? selector : NULL, &env->ctx);
  if (s != NG_SUCCESS) {
    const char *detail = ng_last_error_detail();
    if (s == NG_ERR_NO_DEVICE && chosen) {
      /* The user named a device that is not there: a usage error, not a broken device. */
      fmt(err, errlen, "no device matches --device/NORMGRAD_DEVICE '%s' (%s); see "
          "`normgrad-cli devices`", selector, detail);
      return CLI_USAGE;
    }
    fmt(err, errlen, "cannot open an OpenCL device: %s (%s)", ng_status_name(s), detail);
    return CLI_DEVICE;
  }
  env->cl_ctx = ng_context_cl_context(env->ctx);
  env->device = ng_context_device(env->ctx);
  cl_int e = CL_SUCCESS;
  env->queue = clCreateCommandQueue(env->cl_ctx, env->device, CL_QUEUE_PROFILING_ENABLE, &e);
  if (!env->queue) {
    fmt(err, errlen, "clCreateCommandQueue failed: %d", e);
    ng_context_release(env->ctx);
    memset(env, 0, sizeof *env);
    return CLI_DEVICE;
  }
  return CLI_OK;
}

void cli_env_close(cli_env *env) {
  if (!env) return;
  if (env->queue) {
    clFinish(env->queue);
    clReleaseCommandQueue(env->queue);
  }
  ng_context_release(env->ctx);
  memset(env, 0, sizeof *env);
}

/* ---- buffers ----------------------------------------------------------------------------------- */
/* A buffer larger than the device's largest allocation fails in clCreateBuffer anyway; saying so
 * first keeps benchmark set-up from filling gigabytes of host memory for nothing. */
static bool exceeds_max_alloc(cli_env *env, size_t bytes, char *err, size_t errlen) {
  cl_ulong max = 0;
  if (clGetDeviceInfo(env->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max, &max, NULL) !=
          CL_SUCCESS ||
      max == 0 || (cl_ulong)bytes <= max)
    return false;
  fmt(err, errlen, "a buffer of %zu bytes exceeds the device's largest allocation (%llu bytes)",
      bytes, (unsigned long long)max);
  return true;
}

cl_mem cli_alloc(cli_env *env, size_t bytes, char *err, size_t errlen) {
  if (exceeds_max_alloc(env, bytes, err, errlen)) return NULL;
  cl_int e = CL_SUCCESS;
  /* OpenCL refuses zero-sized buffers; an empty tensor gets a tiny one. */
  cl_mem m = clCreateBuffer(env->cl_ctx, CL_MEM_READ_WRITE, bytes ? bytes : 16, NULL, &e);
  if (!m) fmt(err, errlen, "clCreateBuffer(%zu bytes) failed: %s", bytes, ng_status_name(e));
  return m;
}

cl_mem cli_upload(cli_env *env, const cli_tensor *t, char *err, size_t errlen) {
  cl_int e = CL_SUCCESS;
  cl_mem m;
  if (t->nbytes)
    m = clCreateBuffer(env->cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, t->nbytes, t->data,
                       &e);
  else
    m = clCreateBuffer(env->cl_ctx, CL_MEM_READ_WRITE, 16, NULL, &e);
  if (!m) fmt(err, errlen, "uploading tensor '%s' (%zu bytes) failed: clCreateBuffer %d", t->name,
              t->nbytes, e);
  return m;
}

int cli_download(cli_env *env, cl_mem mem, const char *name, ng_dtype dtype, int ndim,
                 const int64_t *shape, cli_tensors *out, char *err, size_t errlen) {
  if (cli_tensors_add(out, name, dtype, ndim, shape, NULL) != 0) {
    fmt(err, errlen, "out of host memory for output '%s'", name);
    return CLI_DEVICE;
  }
  cli_tensor *t = &out->items[out->count - 1];
  if (!t->nbytes) return CLI_OK;
  cl_int e = clEnqueueReadBuffer(env->queue, mem, CL_TRUE, 0, t->nbytes, t->data, 0, NULL, NULL);
  if (e != CL_SUCCESS) {
    fmt(err, errlen, "reading output '%s' back failed: clEnqueueReadBuffer %d", name, e);
    free(t->data);
    out->count--;
    return CLI_DEVICE;
  }
  return CLI_OK;
}

/* splitmix64: small, good enough for benchmark data, identical everywhere. */
static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

cl_mem cli_random_buffer(cli_env *env, ng_dtype dt, size_t count, uint64_t seed, double mean,
                         double std, char *err, size_t errlen) {
  const size_t es = ng_dtype_size(dt);
  if (!es || (count && count > SIZE_MAX / es)) {
    fmt(err, errlen, "random buffer: bad dtype or size");
    return NULL;
  }
  if (exceeds_max_alloc(env, count * es, err, errlen)) return NULL;
  void *host = calloc(count ? count : 1, es);
  if (!host) {
    fmt(err, errlen, "out of host memory (%zu bytes)", count * es);
    return NULL;
  }
  uint64_t s = seed;
  const double half = std * sqrt(3.0); /* uniform on [mean-half, mean+half) has this std */
  for (size_t i = 0; i < count; i++) {
    double u = (double)(mix(&s) >> 11) * (1.0 / 9007199254740992.0);
    unsigned char *p = (unsigned char *)host + i * es;
    if (dt == NG_I32 || dt == NG_I64) {
      int64_t v = std >= 1 ? (int64_t)(u * std) : 0;
      if (dt == NG_I32) {
        int32_t v32 = (int32_t)v;
        memcpy(p, &v32, 4);
      } else {
        memcpy(p, &v, 8);
      }
    } else {
      float f = (float)(mean + (2 * u - 1) * half);
      cli_pack_floats(dt, &f, p, 1);
    }
  }
  cl_int e = CL_SUCCESS;
  cl_mem m = clCreateBuffer(env->cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                            count ? count * es : es, host, &e);
  free(host);
  if (!m) fmt(err, errlen, "clCreateBuffer(%zu bytes) failed: %s", count * es, ng_status_name(e));
  return m;
}

ng_status cli_bench_scratch(ng_status (*need)(cli_env *, const cli_bench_spec *, size_t *),
                            cli_env *env, const cli_bench_spec *spec, size_t *bytes) {
  const ng_status s = need(env, spec, bytes);
  if (s == NG_SUCCESS && *bytes < spec->min_scratch) *bytes = spec->min_scratch;
  return s;
}

/* ---- a pass's outputs: `tune` and `bench --check-outputs` ---- */
static float host_elem(const void *p, ng_dtype dt, size_t i) {
  if (dt == NG_BF16) return cli_bf16_to_f32(((const uint16_t *)p)[i]);
  if (dt == NG_F16) return cli_f16_to_f32(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}

int cli_outputs_read(cli_env *env, const cli_bench_case *c, void *bufs[3]) {
  for (int i = 0; i < 3; i++) {
    const cli_bench_output *o = &c->out[i];
    if (!o->mem) continue;
    const size_t bytes = o->count * ng_dtype_size(o->dtype);
    if (!bufs[i] && !(bufs[i] = malloc(bytes))) return CLI_DEVICE;
    if (clEnqueueReadBuffer(env->queue, o->mem, CL_TRUE, 0, bytes, bufs[i], 0, NULL, NULL) !=
        CL_SUCCESS)
      return CLI_DEVICE;
  }
  return CLI_OK;
}

double cli_outputs_compare(const cli_bench_case *c, void *const ref[3], void *const got[3],
                           int *worst_slot) {
  double worst = 0;
  if (worst_slot) *worst_slot = -1;
  for (int i = 0; i < 3; i++) {
    const cli_bench_output *o = &c->out[i];
    if (!o->mem) continue;
    const double rtol = o->dtype == NG_F32 ? 1e-4 : 1.0 / 64; /* 16-bit: two ulps */
    double maxabs = 0;
    for (size_t k = 0; k < o->count; k++) {
      const double r = fabs(host_elem(ref[i], o->dtype, k));
      if (isfinite(r) && r > maxabs) maxabs = r;
    }
    const double atol = fmax(1e-5 * maxabs, o->atol) + 1e-30;
    for (size_t k = 0; k < o->count; k++) {
      const double a = host_elem(got[i], o->dtype, k), b = host_elem(ref[i], o->dtype, k);
      if (isnan(a) != isnan(b)) {
        if (worst_slot) *worst_slot = i;
        return INFINITY;
      }
      if (isnan(a) || a == b) continue;
      const double e = fabs(a - b) / (atol + rtol * fmax(fabs(a), fabs(b)));
      if (e > worst) {
        worst = e;
        if (worst_slot) *worst_slot = i;
      }
    }
  }
  return worst;
}
