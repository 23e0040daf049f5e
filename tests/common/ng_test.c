#include "ng_test.h"
#include "ng_internal.h" /* ng_test_as_nvidia */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ng_test_env env;
static bool env_ready;

ng_test_env *ng_test_env_get(void) {
  if (env_ready) return &env;
  ng_status s = ng_context_create_selected(getenv("NORMGRAD_DEVICE"), &env.ctx);
  if (s != NG_SUCCESS) {
    fprintf(stderr, "no device: %s: %s\n", ng_status_name(s), ng_last_error_detail());
    exit(1);
  }
  env.cl_ctx = ng_context_cl_context(env.ctx);
  env.device = ng_context_device(env.ctx);
  cl_int e = CL_SUCCESS;
  env.queue = clCreateCommandQueue(env.cl_ctx, env.device, 0, &e);
  if (!env.queue) {
    fprintf(stderr, "clCreateCommandQueue failed: %d\n", e);
    exit(1);
  }
  cl_device_type t = 0;
  clGetDeviceInfo(env.device, CL_DEVICE_TYPE, sizeof t, &t, NULL);
  env.is_cpu = (t & CL_DEVICE_TYPE_CPU) != 0;
  env_ready = true;
  return &env;
}

void ng_test_env_release(void) {
  if (!env_ready) return;
  clReleaseCommandQueue(env.queue);
  ng_context_release(env.ctx);
  memset(&env, 0, sizeof env);
  env_ready = false;
}

void ng_test_fused_reduce_shape(ng_context *ctx, unsigned wg, unsigned reg) {
  NG_OK(ng_context_override(ctx, NG_TUNE_FUSED_REDUCE, 2));
  NG_OK(ng_context_override(ctx, NG_TUNE_WORKGROUP, wg));
  NG_OK(ng_context_override(ctx, NG_TUNE_REG_COLS, reg));
}

void ng_test_as_nvidia(ng_context *c, const char *name) {
  c->info.type = CL_DEVICE_TYPE_GPU;
  c->info.compute_units = 132;
  c->info.max_wg = 1024;
  c->info.local_mem = 48 * 1024;
  c->info.nv_shfl = c->info.nv_bf16 = true;
  snprintf(c->info.name, sizeof c->info.name, "%s", name);
}

unsigned ng_test_two_per_cu(void) {
  cl_uint cu = 0;
  CL_OK(clGetDeviceInfo(ng_test_env_get()->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu,
                        NULL));
  return 2 * (cu ? cu : 1);
}

void ng_test_reset_overrides(ng_context *ctx) {
  const ng_tune all[] = {NG_TUNE_WORKGROUP, NG_TUNE_GROUPS,   NG_TUNE_VECTOR,      NG_TUNE_REG_COLS,
                         NG_TUNE_PREFETCH,  NG_TUNE_TABLE,    NG_TUNE_FUSED_REDUCE};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    NG_OK(ng_context_override(ctx, all[i], NG_TUNE_AUTO));
}

/* ---- conversions ------------------------------------------------------------------------------ */
static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t ng_h_f32_to_bf16(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float ng_h_bf16_to_f32(uint16_t b) { return u2f((uint32_t)b << 16); }

uint16_t ng_h_f32_to_f16(float f) {
  uint32_t u = f2u(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to Inf (>= 65520) */
  if (a < 0x38800000u) {                                     /* subnormal half or zero */
    if (a < 0x33000000u) return (uint16_t)sign;              /* < 2^-25: rounds to 0 */
    /* value = m·2^(e−150); in units of the half subnormal step 2^−24 that is m >> (126 − e),
     * rounded to nearest even */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t sh = 126 - e;
    uint32_t r = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15 */
  uint32_t q = r >> 13, rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++;
  return (uint16_t)(sign | q);
}

float ng_h_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = (float)m * 5.9604644775390625e-8f; /* 2^-24 */
    return sign ? -v : v;
  }
  if (e == 31) return u2f(sign | 0x7f800000u | (m << 13));
  return u2f(sign | ((e + 112) << 23) | (m << 13));
}

float ng_h_rd(ng_dtype dt, float v) {
  switch (dt) {
  case NG_BF16: return ng_h_bf16_to_f32(ng_h_f32_to_bf16(v));
  case NG_F16: return ng_h_f16_to_f32(ng_h_f32_to_f16(v));
  default: return v;
  }
}

void ng_h_pack(ng_dtype dt, const float *src, void *dst, size_t count) {
  for (size_t i = 0; i < count; i++) {
    switch (dt) {
    case NG_F32: ((float *)dst)[i] = src[i]; break;
    case NG_F16: ((uint16_t *)dst)[i] = ng_h_f32_to_f16(src[i]); break;
    case NG_BF16: ((uint16_t *)dst)[i] = ng_h_f32_to_bf16(src[i]); break;
    case NG_I32: ((int32_t *)dst)[i] = (int32_t)src[i]; break;
    case NG_I64: ((int64_t *)dst)[i] = (int64_t)src[i]; break;
    }
  }
}

void ng_h_unpack(ng_dtype dt, const void *src, float *dst, size_t count) {
  for (size_t i = 0; i < count; i++) {
    switch (dt) {
    case NG_F32: dst[i] = ((const float *)src)[i]; break;
    case NG_F16: dst[i] = ng_h_f16_to_f32(((const uint16_t *)src)[i]); break;
    case NG_BF16: dst[i] = ng_h_bf16_to_f32(((const uint16_t *)src)[i]); break;
    case NG_I32: dst[i] = (float)((const int32_t *)src)[i]; break;
    case NG_I64: dst[i] = (float)((const int64_t *)src)[i]; break;
    }
  }
}

/* ---- buffers ---------------------------------------------------------------------------------- */
cl_mem ng_test_upload(ng_dtype dt, const float *vals, size_t count, size_t offset, size_t guard) {
  ng_test_env *e = ng_test_env_get();
  size_t es = ng_dtype_size(dt), total = offset + count + guard;
  float *tmp = malloc((total ? total : 1) * sizeof(float));
  void *raw = malloc((total ? total : 1) * es);
  assert_non_null(tmp);
  assert_non_null(raw);
  for (size_t i = 0; i < total; i++) tmp[i] = NG_TEST_POISON;
  if (vals) memcpy(tmp + offset, vals, count * sizeof(float));
  ng_h_pack(dt, tmp, raw, total);
  cl_int err = CL_SUCCESS;
  cl_mem m = clCreateBuffer(e->cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, total * es, raw,
                            &err);
  free(tmp);
  free(raw);
  if (!m) fail_msg("clCreateBuffer(%zu bytes) failed: %d", total * es, err);
  return m;
}

void ng_test_download(cl_mem mem, ng_dtype dt, size_t offset, size_t count, float *out) {
  ng_test_env *e = ng_test_env_get();
  size_t es = ng_dtype_size(dt);
  void *raw = malloc(count * es + 1);
  assert_non_null(raw);
  CL_OK(clEnqueueReadBuffer(e->queue, mem, CL_TRUE, offset * es, count * es, raw, 0, NULL, NULL));
  ng_h_unpack(dt, raw, out, count);
  free(raw);
}

bool ng_test_guard_intact(cl_mem mem, ng_dtype dt, size_t offset, size_t count, size_t total) {
  float *all = malloc(total * sizeof(float) + 1);
  assert_non_null(all);
  ng_test_download(mem, dt, 0, total, all);
  float poison = ng_h_rd(dt, NG_TEST_POISON);
  bool ok = true;
  for (size_t i = 0; i < total && ok; i++)
    if ((i < offset || i >= offset + count) && all[i] != poison) ok = false;
  free(all);
  return ok;
}

/* ---- data ------------------------------------------------------------------------------------- */
void ng_rng_seed(ng_rng *r, uint64_t seed) { r->s = seed * 0x9e3779b97f4a7c15ull + 1; }

static uint64_t next_u64(ng_rng *r) { /* splitmix64 */
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double ng_rng_uniform(ng_rng *r) { return (double)(next_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

double ng_rng_normal(ng_rng *r) {
  double u1 = ng_rng_uniform(r), u2 = ng_rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

float *ng_test_random(ng_rng *r, ng_dtype dt, size_t count, double mean, double std) {
  float *v = malloc((count ? count : 1) * sizeof(float));
  assert_non_null(v);
  for (size_t i = 0; i < count; i++) v[i] = ng_h_rd(dt, (float)(mean + std * ng_rng_normal(r)));
  return v;
}

/* ---- comparison ------------------------------------------------------------------------------- */
ng_tol ng_tol_for(ng_dtype dt, const double *ref, size_t count, double f32_rel) {
  double mx = 0;
  for (size_t i = 0; i < count; i++)
    if (isfinite(ref[i]) && fabs(ref[i]) > mx) mx = fabs(ref[i]);
  ng_tol t;
  /* two units in the last place of the storage dtype, plus f32 error on the tensor's scale */
  t.rtol = dt == NG_BF16 ? 1.0 / 128 : dt == NG_F16 ? 1.0 / 1024 : 4e-6;
  t.atol = f32_rel * mx + (dt == NG_F16 ? 6.1e-5 * 2 : 0); /* f16 subnormal spacing */
  return t;
}

void ng_test_assert_close(const char *what, const float *got, const double *ref, size_t count,
                          ng_tol tol, const char *file, int line) {
  size_t worst = 0, bad = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < count; i++) {
    double g = got[i], r = ref[i];
    double ratio;
    if (isnan(r) || isnan(g)) {
      ratio = (isnan(r) && isnan(g)) ? 0 : INFINITY;
    } else if (isinf(r) || isinf(g)) {
      ratio = (g == r) ? 0 : INFINITY;
    } else {
      double lim = tol.atol + tol.rtol * fabs(r);
      double d = fabs(g - r);
      ratio = lim > 0 ? d / lim : (d == 0 ? 0 : INFINITY);
    }
    if (ratio > 1) bad++;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (bad) {
    print_error("%s: %zu of %zu elements out of tolerance (rtol %g, atol %g); worst at %zu: got "
                "%.9g, want %.9g (%.3gx the limit)\n",
                what, bad, count, tol.rtol, tol.atol, worst, (double)got[worst], ref[worst],
                worst_ratio);
    _fail(file, line);
  }
}

void ng_test_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    chmod(path, 0700);
    DIR *d = opendir(path);
    if (d) {
      for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        ng_test_remove_tree(sub);
      }
      closedir(d);
    }
    rmdir(path);
  } else {
    unlink(path);
  }
}
