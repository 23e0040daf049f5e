/* Contexts: the caller's (or a default) cl_context + device, the device facts that launch choices
 * depend on, and the tuning overrides. */
#include "ng_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ng_status query_info(cl_device_id dev, ng_device_info *info) {
  cl_int e = 0;
  cl_uint bits = 0;
  cl_platform_id plat = NULL;
  memset(info, 0, sizeof *info);
  e |= clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof info->type, &info->type, NULL);
  e |= clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof info->compute_units,
                       &info->compute_units, NULL);
  e |= clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof info->max_wg, &info->max_wg,
                       NULL);
  e |= clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof info->local_mem, &info->local_mem,
                       NULL);
  e |= clGetDeviceInfo(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL);
  e |= clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof info->max_alloc,
                       &info->max_alloc, NULL);
  e |= clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof info->name - 1, info->name, NULL);
  e |= clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof info->vendor - 1, info->vendor, NULL);
  e |= clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof info->driver - 1, info->driver, NULL);
  e |= clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL);
  if (e != CL_SUCCESS) return ng_fail(CL_INVALID_DEVICE, "clGetDeviceInfo failed on the device");
  if (plat)
    clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof info->platform - 1, info->platform, NULL);
  info->base_align_bytes = bits / 8;
  /* PTX shuffles through inline asm: NVIDIA's driver only (cl_nv_device_attribute_query marks
   * it), with a portable local-memory tree everywhere else. */
  char ext[8192] = "";
  clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL);
  info->nv_shfl = strstr(info->vendor, "NVIDIA") && strstr(ext, "cl_nv_device_attribute_query");
  if (info->nv_shfl) {
    cl_uint major = 0; /* CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV */
    if (clGetDeviceInfo(dev, 0x4000, sizeof major, &major, NULL) == CL_SUCCESS)
      info->nv_bf16 = major >= 8;
  }
  if (info->compute_units == 0) info->compute_units = 1;
  if (info->max_wg == 0) info->max_wg = 1;
  return NG_SUCCESS;
}

ng_status ng_context_create(cl_context cl_ctx, cl_device_id device, ng_context **out) {
  ng_clear_detail();
  if (!out) return ng_fail(NG_ERR_NULL_HANDLE, "out is NULL");
  *out = NULL;
  if (!cl_ctx) return ng_fail(NG_ERR_NULL_HANDLE, "cl_context is NULL");
  if (!device) return ng_fail(NG_ERR_NULL_HANDLE, "device is NULL");
  /* Programs are built for `device` in `cl_ctx`: a device outside the context would only fail
   * later, on every op, as a queue "of another device". */
  cl_uint nd = 0;
  cl_int ce = clGetContextInfo(cl_ctx, CL_CONTEXT_NUM_DEVICES, sizeof nd, &nd, NULL);
  if (ce != CL_SUCCESS) return ng_fail(ce, "cl_context: not a valid OpenCL context");
  cl_device_id *cds = calloc(nd ? nd : 1, sizeof *cds);
  if (!cds) return ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "context device list");
  ce = clGetContextInfo(cl_ctx, CL_CONTEXT_DEVICES, nd * sizeof *cds, cds, NULL);
  /* A sub-device counts as its context device's: PoCL lists the root device as the device of
   * a context created on a sub-device (and accepts queues for either). */
  bool member = false;
  for (cl_device_id d = device; d && !member && ce == CL_SUCCESS;) {
    for (cl_uint i = 0; i < nd; i++) member = member || cds[i] == d;
    cl_device_id parent = NULL;
    if (clGetDeviceInfo(d, CL_DEVICE_PARENT_DEVICE, sizeof parent, &parent, NULL) != CL_SUCCESS)
      break;
    d = parent;
  }
  free(cds);
  if (ce != CL_SUCCESS) return ng_fail(ce, "cl_context: its device list cannot be read");
  if (!member) return ng_fail(CL_INVALID_DEVICE, "device is not one of the cl_context's devices");
  ng_context *c = calloc(1, sizeof *c);
  if (!c) return ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "context allocation");
  ng_status s = query_info(device, &c->info);
  if (s != NG_SUCCESS) {
    free(c);
    return s;
  }
  if (pthread_mutex_init(&c->lock, NULL) != 0) {
    free(c);
    return ng_fail(NG_ERR_INTERNAL, "mutex init failed");
  }
  cl_int e = clRetainContext(cl_ctx);
  if (e != CL_SUCCESS) {
    pthread_mutex_destroy(&c->lock);
    free(c);
    return ng_fail(e, "clRetainContext failed");
  }
  clRetainDevice(device);
  c->cl_ctx = cl_ctx;
  c->device = device;
  ng_disk_cache_init(c);
  ng_tuning_load(c);
  s = ng_tune_from_env(c);
  if (s != NG_SUCCESS) {
    char why[512];
    snprintf(why, sizeof why, "%s", ng_last_error_detail());
    ng_context_release(c);
    return ng_fail(s, "%s", why);
  }
  /* stored CLBlast parameters (normgrad-cli tune gemm); a refused set is ignored as a damaged
   * line would be */
  if (c->xgemm[0] && c->tune[NG_TUNE_TABLE] != 1) ng_gemm_apply_xgemm(c, c->xgemm);
  *out = c;
  return NG_SUCCESS;
}

ng_status ng_list_devices(cl_device_id *devices, cl_uint max, cl_uint *count) {
  ng_clear_detail();
  if (!count) return ng_fail(NG_ERR_NULL_HANDLE, "count is NULL");
  *count = 0;
  cl_uint np = 0;
  if (clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || np == 0) return NG_SUCCESS;
  cl_platform_id *plats = calloc(np, sizeof *plats);
  if (!plats) return ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "platform list");
  clGetPlatformIDs(np, plats, NULL);
  cl_uint total = 0;
  for (cl_uint i = 0; i < np; i++) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0)
      continue;
    cl_device_id *ds = calloc(nd, sizeof *ds);
    if (!ds) {
      free(plats);
      return ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "device list");
    }
    clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, nd, ds, NULL);
    for (cl_uint j = 0; j < nd; j++, total++)
      if (devices && total < max) devices[total] = ds[j];
    free(ds);
  }
  free(plats);
  *count = total;
  return NG_SUCCESS;
}

static bool contains_nocase(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
      i++;
    if (i == n) return true;
  }
  return n == 0;
}

ng_status ng_select_device(const char *sel, cl_device_id *out) {
  ng_clear_detail();
  if (!out) return ng_fail(NG_ERR_NULL_HANDLE, "out is NULL");
  *out = NULL;
  cl_uint count = 0;
  ng_status s = ng_list_devices(NULL, 0, &count);
  if (s != NG_SUCCESS) return s;
  if (count == 0) return ng_fail(NG_ERR_NO_DEVICE, "no OpenCL device found on any platform");
  cl_device_id *ds = calloc(count, sizeof *ds);
  if (!ds) return ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "device list");
  ng_list_devices(ds, count, &count);
  bool digits = sel && *sel;
  for (const char *c = sel; digits && *c; c++) digits = isdigit((unsigned char)*c) != 0;
  if (!sel || !*sel) {
    for (cl_uint i = 0; i < count && !*out; i++) {
      cl_device_type t = 0;
      clGetDeviceInfo(ds[i], CL_DEVICE_TYPE, sizeof t, &t, NULL);
      if (t & CL_DEVICE_TYPE_GPU) *out = ds[i];
    }
    if (!*out) *out = ds[0];
  } else if (digits) {
    unsigned long idx = strtoul(sel, NULL, 10);
    if (idx < count) *out = ds[idx];
    else s = ng_fail(NG_ERR_NO_DEVICE, "device index %lu out of range (%u devices)", idx, count);
  } else {
    for (cl_uint i = 0; i < count && !*out; i++) {
      char name[256] = "";
      clGetDeviceInfo(ds[i], CL_DEVICE_NAME, sizeof name - 1, name, NULL);
      if (contains_nocase(name, sel)) *out = ds[i];
    }
    if (!*out) s = ng_fail(NG_ERR_NO_DEVICE, "no device name contains '%s'", sel);
  }
  free(ds);
  return s;
}

ng_status ng_context_create_selected(const char *selector, ng_context **out) {
  ng_clear_detail();
  if (!out) return ng_fail(NG_ERR_NULL_HANDLE, "out is NULL");
  *out = NULL;
  cl_device_id dev = NULL;
  ng_status s = ng_select_device(selector, &dev);
  if (s != NG_SUCCESS) return s;
  cl_int e = CL_SUCCESS;
  cl_context cc = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
  if (!cc) return ng_fail(e, "clCreateContext failed for the selected device");
  s = ng_context_create(cc, dev, out);
  clReleaseContext(cc); /* the ng_context holds its own reference */
  return s;
}

ng_status ng_context_create_default(ng_context **out) {
  return ng_context_create_selected(NULL, out);
}

void ng_context_release(ng_context *ctx) {
  if (!ctx) return;
  ng_fused_release(ctx);
  ng_program_cache_clear(ctx);
  ng_disk_cache_free(ctx);
  free(ctx->tuned);
  pthread_mutex_destroy(&ctx->lock);
  clReleaseDevice(ctx->device);
  clReleaseContext(ctx->cl_ctx);
  free(ctx);
}

cl_context ng_context_cl_context(const ng_context *ctx) { return ctx ? ctx->cl_ctx : NULL; }
cl_device_id ng_context_device(const ng_context *ctx) { return ctx ? ctx->device : NULL; }

ng_status ng_context_override(ng_context *ctx, ng_tune what, unsigned value) {
  ng_clear_detail();
  if (!ctx) return ng_fail(NG_ERR_NULL_HANDLE, "ctx is NULL");
  switch (what) {
  case NG_TUNE_WORKGROUP:
    if (value != NG_TUNE_AUTO && !ng_wg_asked_ok(ctx, value))
      return ng_fail(NG_ERR_INVALID_VALUE,
                     "work-group size %u must be a power of two or a multiple of 32, <= %zu",
                     value, ctx->info.max_wg < 4096 ? ctx->info.max_wg : (size_t)4096);
    break;
  case NG_TUNE_GROUPS:
    break;
  case NG_TUNE_VECTOR:
    if (value != NG_TUNE_AUTO && value != 1 && value != 8)
      return ng_fail(NG_ERR_INVALID_VALUE, "vector width %u must be 1 or 8", value);
    break;
  case NG_TUNE_REG_COLS:
    if (value != NG_TUNE_AUTO && value != 1 && value != 2 && value != 4 && value != 8)
      return ng_fail(NG_ERR_INVALID_VALUE, "register column slots %u must be 1, 2, 4 or 8", value);
    break;
  case NG_TUNE_TABLE:
    if (value > 2)
      return ng_fail(NG_ERR_INVALID_VALUE, "table %u must be 1 (ignore) or 2 (use)", value);
    break;
  case NG_TUNE_PREFETCH:
    if (!ng_tune_prefetch_ok(value))
      return ng_fail(NG_ERR_INVALID_VALUE,
                     "prefetch %u must be 1 (off), 2 (on) or a distance in bytes, a power of two "
                     "from %u to %u", value, NG_PF_DIST_MIN, NG_PF_DIST_MAX);
    break;
  case NG_TUNE_FUSED_REDUCE:
    if (value > 3)
      return ng_fail(NG_ERR_INVALID_VALUE,
                     "fused reduce %u must be 1 (off), 2 (on) or 3 (on but for split rows' "
                     "partials)", value);
    ctx->fused_reduce = value;
    return NG_SUCCESS;
  default:
    return ng_fail(NG_ERR_INVALID_VALUE, "unknown tuning parameter %d", (int)what);
  }
  ctx->tune[what] = value;
  return NG_SUCCESS;
}

ng_status ng_context_get_stats(const ng_context *ctx, ng_context_stats *out) {
  ng_clear_detail();
  if (!ctx || !out) return ng_fail(NG_ERR_NULL_HANDLE, "ctx or out is NULL");
  ng_context *c = (ng_context *)ctx; /* the lock is not part of the logical state */
  pthread_mutex_lock(&c->lock);
  out->programs_built = c->programs_built;
  out->cache_hits = c->cache_hits;
  out->disk_hits = c->disk_hits;
  out->programs_cached = 0;
  for (ng_program_entry *e = c->programs; e; e = e->next) out->programs_cached++;
  out->disk_misses = c->disk.misses;
  out->disk_stores = c->disk.stores;
  out->disk_rejects = c->disk.rejects;
  out->disk_errors = c->disk.errors;
  pthread_mutex_unlock(&c->lock);
  return NG_SUCCESS;
}

/* Resident groups per compute unit for the dW grids: about 1024 row-vector slots per unit, a
 * group of wg work-items holding reg vectors each counting wg·reg (with REG = 2 or 4 a second
 * group would not fit beside the first in the register file, and would run as a second wave
 * that the first waits for). At least one; three quarters of it for the fused add's backward with
 * ds_out (NG_ROWS_FEW). */
/* NG_ROWS_FIT2's group for a row of nv vectors: half the row, rounded up to a warp */
static size_t fit2_group(size_t nv) { return ((nv + 1) / 2 + 31) / 32 * 32; }

/* NG_ROWS_HALF_MID_DS's rows (257-288 vectors) take groups of 160, which NG_ROWS_HALF_MID's
 * 2560 does not give the fused add with ds_out: its longest row stands for them */
_Static_assert(NG_HALF_MID_DS_MAX > 256 && NG_HALF_MID_DS_MAX <= 320, "one variant length");

size_t ng_variant_n(size_t i) {
  if (i <= 26) return (size_t)1 << i;
  if (i == 27) return 8 * NG_HALF_MID_DS_MAX; /* NG_ROWS_HALF_MID_DS */
  /* NG_ROWS_HALF_MID's group sizes (160, 192, 224), then NG_ROWS_FIT2's (288, 320, …), each from
   * its rule's shortest row */
  const size_t k = i - 28, half = (fit2_group(NG_HALF_MID_MAX) - fit2_group(257)) / 32 + 1;
  if (k < half) return 16 * (fit2_group(257) + 32 * k);
  const size_t wg = fit2_group(513) + 32 * (k - half);
  return 2 * wg <= NG_FIT2_MAX ? 16 * wg : 0;
}

size_t ng_variant_n_ctx(const ng_context *ctx, size_t i) {
  size_t listed = 0;
  while (ng_variant_n(listed)) listed++;
  return i < listed ? ng_variant_n(i) : ng_tuned_length(ctx, i - listed);
}

static size_t dw_groups_per_cu(size_t wg, size_t reg) {
  const size_t slots = wg * reg;
  return 1024 / slots > 1 ? 1024 / slots : 1;
}

/* Row kernels: GPU-shaped (a work-group per row, local-memory reduction) on GPUs and
 * accelerators; CPU-shaped (one work-item per row, no barriers) on CPUs, where PoCL turns
 * work-groups into loops and barriers into spills (PERF-NOTES).
 *
 * GPU choices, measured on the H100 (bf16, rows·n = 2^25; docs/perf.md has the sweep):
 *  - forward: the work-group is sized so that each work-item holds two vectors of the row
 *    (REG = 2, 32…1024 work-items); rows of up to 512 vectors get one group each (the hardware
 *    schedules them better than a persistent loop could), longer rows a persistent grid of 2048
 *    work-items per compute unit that prefetches each group's next row;
 *  - frozen backward: the work-group shape of the backward with dW (so dx is the same bits
 *    either way), the forward's grid;
 *  - backward with dW: the dW sums stay in registers for the whole grid, so every group must be
 *    resident and each work-item should hold as few of them as possible: one vector per
 *    work-item (REG = 1, the group as wide as the row) up to 512 vectors (256 for 16-bit rows,
 *    whose 257-512 get 256 work-items with two each: NG_ROWS_X16) and about 1024 work-items per
 *    compute unit; longer rows 512 work-items with 2 or 4 vectors each and one
 *    group per unit (two would not fit in the registers: the tuner measured 1.14-1.17x at
 *    16384 from this alone); past 2048 vectors the work splits by columns (ng_col_split). */
size_t ng_max_pow2_wg(const ng_context *ctx) {
  return ng_pow2_floor(ctx->info.max_wg < 1024 ? ctx->info.max_wg : 1024);
}

bool ng_wg_asked_ok(const ng_context *ctx, unsigned wg) {
  return wg >= 1 && wg <= ctx->info.max_wg && wg <= 4096 && ((wg & (wg - 1)) == 0 || wg % 32 == 0);
}

ng_row_launch ng_choose_row_launch(const ng_context *ctx, size_t rows, size_t n, bool vec_ok,
                                   ng_rows_mode mode) {
  return ng_choose_row_launch_k(ctx, NULL, NG_BF16, rows, n, vec_ok, mode | NG_ROWS_POW2_WG);
}

/* Precedence: ng_context_override / NORMGRAD_TUNE, then the tuned table (tuning.txt), then the
 * built-in table (src/tuning.c), then the rules below. */
ng_row_launch ng_choose_row_launch_k(const ng_context *ctx, const char *kind, ng_dtype xd,
                                     size_t rows, size_t n, bool vec_ok, ng_rows_mode mode) {
  const ng_rows_mode flags = mode;
  mode &= ~(NG_ROWS_X16 | NG_ROWS_FEW | NG_ROWS_ONE | NG_ROWS_PAIRS | NG_ROWS_PAIRS_1K |
            NG_ROWS_MANY | NG_ROWS_POLY_DW | NG_ROWS_POLY_DB | NG_ROWS_1K | NG_ROWS_MANY_2K |
            NG_ROWS_HOLD4 | NG_ROWS_256X4 | NG_ROWS_FIT2 | NG_ROWS_FIT2_640 | NG_ROWS_MANY_512 |
            NG_ROWS_W256 | NG_ROWS_DW_NOPF | NG_ROWS_512X4 | NG_ROWS_FULL1 | NG_ROWS_512X2 |
            NG_ROWS_F32_1SLOT | NG_ROWS_F32_1SLOT_512 | NG_ROWS_F16_1SLOT |
            NG_ROWS_F32_STREAM_1K | NG_ROWS_POLY_F16_3 | NG_ROWS_FWD_128X4 | NG_ROWS_HALF_MID |
            NG_ROWS_HALF_MID_320 | NG_ROWS_HALF_MID_384 | NG_ROWS_HALF_MID_DS |
            NG_ROWS_POLY_FZ_960 | NG_ROWS_POLY_FZ_1152 | NG_ROWS_HOLD4_FEW | NG_ROWS_POW2_WG);
  const bool x16 = (flags & NG_ROWS_X16) != 0, few = (flags & NG_ROWS_FEW) != 0;
  const bool one = (flags & NG_ROWS_ONE) != 0 && mode == NG_ROWS_BWD_FROZEN;
  const bool pairs = (flags & (NG_ROWS_PAIRS | NG_ROWS_PAIRS_1K)) != 0 && mode == NG_ROWS_FWD;
  const size_t pairs_upto = (flags & NG_ROWS_PAIRS_1K) ? 1024 : 512;
  const bool many = (flags & NG_ROWS_MANY) != 0 && mode == NG_ROWS_BWD_FROZEN;
  const size_t many_upto = (flags & NG_ROWS_MANY_2K) ? 2048 : 1024;
  const bool many512 = many && (flags & NG_ROWS_MANY_512) != 0;
  const bool poly_dw = (flags & NG_ROWS_POLY_DW) != 0 && mode == NG_ROWS_POLY_BWD;
  const bool poly_db = (flags & NG_ROWS_POLY_DB) != 0 && mode == NG_ROWS_POLY_BWD;
  const bool backward = mode == NG_ROWS_BWD_DW; /* partials: a resident persistent grid */
  const ng_device_info *d = &ctx->info;
  unsigned tune[NG_TUNE_SLOTS] = {0};
  ng_tuned_lookup(ctx, kind, xd, n, tune);
  const size_t klen = kind ? strlen(kind) : 0, suffix = sizeof "_frozen" - 1;
  if (klen > suffix && !strcmp(kind + klen - suffix, "_frozen")) {
    /* dx must be the same bits frozen or not: the work-group shape (which fixes the reduction
     * order) is the backward-with-dW kind's; only the grid and prefetch are the frozen kind's
     * (the frozen kinds: RMSNorm's, the fused add's and LayerNorm's backward without partials,
     * PolyNorm's with both parameters frozen) */
    char dw_kind[64];
    unsigned shape[NG_TUNE_SLOTS] = {0};
    if (klen - suffix < sizeof dw_kind) {
      memcpy(dw_kind, kind, klen - suffix);
      dw_kind[klen - suffix] = '\0';
      ng_tuned_lookup(ctx, dw_kind, xd, n, shape);
    }
    tune[NG_TUNE_WORKGROUP] = shape[NG_TUNE_WORKGROUP];
    tune[NG_TUNE_REG_COLS] = shape[NG_TUNE_REG_COLS];
    tune[NG_TUNE_VECTOR] = shape[NG_TUNE_VECTOR];
  }
  for (int i = 0; i < NG_TUNE_SLOTS; i++)
    if (ctx->tune[i]) tune[i] = ctx->tune[i];
  const bool cpu = (d->type & CL_DEVICE_TYPE_CPU) != 0;
  ng_row_launch l;
  memset(&l, 0, sizeof l);
  l.vec = vec_ok ? 8u : 1u;
  if (tune[NG_TUNE_VECTOR] == 1) l.vec = 1;
  const size_t nv = n / l.vec;
  const size_t maxwg = ng_max_pow2_wg(ctx);
  /* The launch rules below were measured on NVIDIA with 8-wide vectors (nv8); several take only
   * calls of more rows than compute units (`more`: smaller calls keep the old launch), never
   * GroupNorm's persistent map (rows == SIZE_MAX). */
  const bool nv8 = d->nv_shfl && l.vec == 8;
  const bool more = rows > d->compute_units && rows != SIZE_MAX;
  const bool fwd = mode == NG_ROWS_FWD;
  const bool wide1k = (flags & NG_ROWS_1K) != 0 && nv8 && x16 && nv > 512 && nv <= 1024 &&
                      maxwg >= 1024 && (mode == NG_ROWS_BWD_DW || mode == NG_ROWS_BWD_FROZEN);
  const bool hold4 =
      ((flags & NG_ROWS_HOLD4) != 0 || ((flags & NG_ROWS_HOLD4_FEW) != 0 && !more)) && fwd &&
      nv8 && x16 && nv > 2048 && nv <= 4096 && maxwg >= 1024;
  const bool w256x4 = (flags & NG_ROWS_256X4) != 0 && (fwd || mode == NG_ROWS_FWD_RAW16) && nv8 &&
                      nv > 512 && nv <= 1024 && maxwg >= 256 && more;
  const bool w256 = (flags & NG_ROWS_W256) != 0 && fwd && nv8 && nv > NG_W256_MIN && nv <= 256 &&
                    maxwg >= 256;
  const bool w512x4 = (flags & NG_ROWS_512X4) != 0 && fwd && nv8 && nv > 1024 && nv <= 2048 &&
                      maxwg >= 512 && more;
  const bool w512x2 = (flags & NG_ROWS_512X2) != 0 && fwd && nv8 && nv == 1024 && maxwg >= 512 &&
                      more;
  const bool w128x4 = (flags & NG_ROWS_FWD_128X4) != 0 && (fwd || mode == NG_ROWS_FWD_RAW16) &&
                      nv8 && nv > 256 && nv <= 384 && maxwg >= 128 && more;
  const bool dw_nopf = (flags & NG_ROWS_DW_NOPF) != 0 && backward && nv8 && x16 && nv > 1024 &&
                       nv <= 2048;
  const size_t fit2_wg = fit2_group(nv); /* NG_ROWS_FIT2(_640), NG_ROWS_HALF_MID(_320) */
  const bool f768 = (flags & NG_ROWS_FIT2) != 0;
  const size_t fit2_max = f768 ? NG_FIT2_MAX : (flags & NG_ROWS_FIT2_640) ? NG_FIT2_640_MAX : 0;
  const size_t fit2_rows = f768 ? NG_FIT2_MIN_ROWS_PER_CU : NG_FIT2_640_MIN_ROWS_PER_CU;
  const bool fit2 = nv8 && x16 && nv > 512 && nv <= fit2_max &&
                    fit2_wg <= d->max_wg && rows > fit2_rows * d->compute_units &&
                    (mode == NG_ROWS_BWD_DW || mode == NG_ROWS_BWD_FROZEN);
  const size_t half_max = (flags & NG_ROWS_HALF_MID)       ? NG_HALF_MID_MAX
                          : (flags & NG_ROWS_HALF_MID_DS)  ? NG_HALF_MID_DS_MAX
                          : (flags & NG_ROWS_HALF_MID_384) ? 384
                          : (flags & NG_ROWS_HALF_MID_320) ? 320
                                                           : 0;
  /* PolyNorm's backward asks for a persistent grid (rows == SIZE_MAX): no row bound there */
  const size_t half_min = fwd ? NG_HALF_MID_FWD_MIN_ROWS_PER_CU : NG_HALF_MID_MIN_ROWS_PER_CU;
  const bool half_rows = rows == SIZE_MAX ? mode == NG_ROWS_POLY_BWD
                                          : rows > half_min * d->compute_units;
  const bool half_mid = nv8 && x16 && nv > 256 && nv <= half_max && half_rows &&
                        fit2_wg <= d->max_wg &&
                        (mode == NG_ROWS_BWD_DW || mode == NG_ROWS_BWD_FROZEN || fwd ||
                         mode == NG_ROWS_POLY_BWD);
  size_t wg = 1, reg = 1;
  if (!cpu && (mode == NG_ROWS_FWD || mode == NG_ROWS_FWD_RAW16 || mode == NG_ROWS_POLY_BWD)) {
    wg = 32;
    while (wg < maxwg && wg * 2 < nv) wg *= 2;
    if (mode == NG_ROWS_POLY_BWD && wg == 512) wg = 256;
    reg = 2;
    if (mode == NG_ROWS_FWD_RAW16)
      while (reg < NG_FWD_RAW_REG && wg * reg < nv) reg *= 2;
    if (hold4) wg = 1024, reg = 4; /* NG_ROWS_HOLD4 */
    if (w256x4) wg = 256, reg = 4; /* NG_ROWS_256X4 */
    if (w256) wg = 256, reg = 1;   /* NG_ROWS_W256 (a group a row: nv <= 512 below) */
    if (w512x4) wg = 512, reg = 4; /* NG_ROWS_512X4 */
    if (w512x2) wg = 512, reg = 2; /* NG_ROWS_512X2 (in place of NG_ROWS_256X4) */
    if (w128x4) wg = 128, reg = 4; /* NG_ROWS_FWD_128X4 */
    if (half_mid) wg = fit2_wg, reg = 2; /* NG_ROWS_HALF_MID(_320), PolyNorm's */
  } else if (!cpu) {
    /* 16-bit rows of more than 256 vectors: two per work-item (NG_ROWS_X16) */
    const size_t per = x16 && nv > 256 ? 2 : 1;
    wg = 32;
    while (wg < maxwg && wg < 512 && wg * per < nv) wg *= 2;
    while (reg < 4 && wg * reg < nv) reg *= 2;
    if (wide1k) wg = 1024, reg = 1; /* NG_ROWS_1K */
    if (fit2) wg = fit2_wg, reg = 2;  /* NG_ROWS_FIT2 */
    if (half_mid) wg = fit2_wg, reg = 2; /* NG_ROWS_HALF_MID(_320) */
  }
  /* NG_ROWS_F32_1SLOT(_512): f32 rows past the threshold leave the registers (a 16-bit backward
   * mode carries NG_ROWS_X16; the forwards are given the flag for f32 rows only) */
  const size_t f32_past = (flags & NG_ROWS_F32_1SLOT_512) ? 512
                          : (flags & NG_ROWS_F32_1SLOT)   ? 768
                                                          : 0;
  if (f32_past && nv8 && !x16 && nv > f32_past) reg = 1;
  /* NG_ROWS_F16_1SLOT: the op passes it for f16 rows alone (x16 is set for bf16 too) */
  if ((flags & NG_ROWS_F16_1SLOT) && nv8 && x16 && nv > NG_F16_1SLOT_MIN &&
      (mode == NG_ROWS_BWD_DW || mode == NG_ROWS_BWD_FROZEN))
    reg = 1;
  /* NG_ROWS_F32_STREAM_1K: the op streams these rows rather than splitting them */
  if ((flags & NG_ROWS_F32_STREAM_1K) && nv8 && !x16 && fwd && ng_f32_stream_rows(nv)) reg = 1;
  if (tune[NG_TUNE_WORKGROUP]) wg = tune[NG_TUNE_WORKGROUP];
  if (wg > maxwg) wg = maxwg;
  if (tune[NG_TUNE_WORKGROUP] && (flags & NG_ROWS_POW2_WG)) wg = ng_pow2_floor(wg);
  l.wg = (unsigned)wg;
  l.reg_cols = (unsigned)reg;
  if (tune[NG_TUNE_REG_COLS]) l.reg_cols = tune[NG_TUNE_REG_COLS];
  /* PoCL 3.1 ignores the `i < nv` guard of a one-slot group's stores after its barriers, so a
   * held row shorter than the group (only a forced GPU shape on a CPU) stored past the row's
   * end, up to the buffer's (cl/ng_common.clh, NG_UNROLL_STORES). Two slots, the second idle,
   * store correctly and sum the same values in the same order: the same bits. */
  if (cpu && l.wg > 1 && l.reg_cols == 1 && nv < l.wg) l.reg_cols = 2;
  l.nv_shfl = d->nv_shfl && l.wg % 32 == 0;
  l.nv_bf16 = d->nv_bf16;
  const bool in_regs = nv <= (size_t)l.wg * l.reg_cols;
  /* groups of half a row as the rule gave them (no override of the shape); they hold the row,
   * since 2 · fit2_wg >= nv */
  const bool half_held = half_mid && l.wg == fit2_wg && l.reg_cols == 2;
  size_t g;
  bool prefetch = false;
  if (cpu) {
    g = (size_t)d->compute_units * 4;
  } else if (!backward) {
    prefetch = nv > 512;
    /* rows == SIZE_MAX: the caller (GroupNorm) maps its own work units onto a persistent grid */
    const size_t wave = (size_t)d->compute_units * (2048 / wg ? 2048 / wg : 1);
    g = nv <= 512 && rows != SIZE_MAX && !pairs ? rows : wave;
    /* The rules below were measured on NVIDIA only, where the next-row prefetch exists, and for
     * 16-bit rows (f32 lost where tried). Two of them give each group `rows_per` rows,
     * prefetched, with at least a wave of groups. */
    const bool nv16 = d->nv_shfl && x16;
    size_t rows_per = 0;
    if (pairs && nv16 && nv <= pairs_upto && rows != SIZE_MAX) {
      /* NG_ROWS_PAIRS (PolyNorm's forward, RMSNorm's at N >= 4096) and NG_ROWS_PAIRS_1K
       * (RMSNorm's bf16 rows). H100, rows·N = 2^25, old and new binaries alternating, two runs:
       * PolyNorm bf16 512 54.3-54.7 -> 51.8-52.2 us (0.84 -> 0.88), 1024 52.8-52.9 -> 51.4-53.1,
       * 2048 52.5-52.6 -> 51.1-51.8 (0.87 -> 0.89), 4096 53.8-53.9 -> 51.5-51.7 (0.85 -> 0.88);
       * f16 likewise (4096 53.7-53.8 -> 51.7-51.9). RMSNorm bf16 4096 52.1-52.3 -> 50.7-51.0
       * (0.87 -> 0.89-0.90), f16 52.5-52.8 -> 51.2, bf16 8192 (1024 vectors) 52.7-53.3 ->
       * 51.6-51.8 (0.86 -> 0.88); RMSNorm 2048 measured even. f16 rows of 1024 vectors lost
       * (RMSNorm 59.1-59.2 -> 61.5, PolyNorm 52.7-53.2 -> 53.7-53.8) and PolyNorm's bf16 ones
       * were within noise, so only RMSNorm's bf16 rows take them. The persistent grid alone with
       * the prefetch lost (PolyNorm 4096: 1056 groups 55.5-56.1 us), as did f32 rows (4096
       * 102.0-102.2 -> 103.6-104.4 with 2112 groups). */
      rows_per = 2;
    }
    if (nv16 && nv >= 128 &&
        ((poly_dw && nv <= 512) || (poly_db && (nv <= 256 || (half_mid && l.wg == fit2_wg))))) {
      /* NG_ROWS_POLY_DW, NG_ROWS_POLY_DB. H100, rows·N = 2^25, whole backward, old and new
       * binaries alternating, two runs: with dW bf16 2048 83.1-83.8 -> 81.0-81.2 us (0.82 ->
       * 0.84), 4096 87.0-87.1 -> 83.4-83.6 (0.78 -> 0.82), f16 84.7-85.2 -> 81.2-81.3 and
       * 87.2-87.3 -> 85.9 (then with the separate sum of the partials). With PolyNorm's chunked
       * in-kernel sum (cl/polynorm.cl), in a scan (prefetch forced), with dW 1024 81.3-82.1 ->
       * 78.6-79.9, 2048 even; dbias alone 1024 82.0-83.1 -> 78.8-78.9, 2048 82.1-83.8 ->
       * 77.6-77.7 (before the chunks 1024 lost, 85.3-85.6 -> 86.1-87.7). dbias alone at 4096,
       * which keeps the separate sum, lost: 79.4-79.7 -> 82.9-83.3. dbias alone on groups of
       * half a row (NG_ROWS_HALF_MID: bf16 257-448 vectors, f16 257-384) prefetches too, summing in
       * the kernel. */
      prefetch = true;
    }
    /* PolyNorm's backward on groups of half a row (NG_POLY_SMALL_GRID_MAX, ng_internal.h): with
     * a gradient eight groups a unit, both frozen one resident wave (its dtype's work-items) */
    const size_t fz_items = (flags & NG_ROWS_POLY_FZ_960)    ? 960
                            : (flags & NG_ROWS_POLY_FZ_1152) ? 1152
                                                             : 0;
    if (mode == NG_ROWS_POLY_BWD && nv16 && half_held && nv <= NG_POLY_SMALL_GRID_MAX) {
      if (poly_dw || poly_db) g = (size_t)d->compute_units * 8;
      else if (fz_items) g = (size_t)d->compute_units * (fz_items / l.wg);
    }
    /* PolyNorm's backward with dW, rows of 449-512 vectors (bf16 N = 3592-4096; f16's take
     * NG_ROWS_POLY_F16_3 below) on 256 × 2: six groups a unit rather than the wave's eight.
     * H100, bf16, the binaries alternating, four runs: 8192 rows of 4096 82.1-83.6 -> 80.4-81.2
     * us (0.83-0.84 -> 0.85), 9039 of 3712 84.3-85.1 -> 80.8-81.6, 12000 of 4096 115.1-116.0 ->
     * 111.0-112.3, 1000 of 4096 23.7-24.7 -> 21.8-22.7, 4096 of 4096 even (48.4-49.2 ->
     * 48.8-49.2). In the scan before, five and seven a unit were even, four +6 %; dB alone lost on
     * five to seven a unit (+1.9 to +15 %), both frozen too (+2.7 to +17 %). */
    if (poly_dw && nv16 && nv > NG_HALF_MID_MAX && nv <= 512 && l.wg == 256 && l.reg_cols == 2)
      g = (size_t)d->compute_units * 6;
    if ((flags & NG_ROWS_POLY_F16_3) && (poly_dw || poly_db) && nv16 && nv > 256 && nv <= 512 &&
        l.wg == 256) {
      g = (size_t)d->compute_units * 3; /* NG_ROWS_POLY_F16_3 */
      prefetch = false;
    }
    if (one && nv16 && in_regs && l.reg_cols >= 4)
      g = d->compute_units; /* NG_ROWS_ONE */
    if (mode == NG_ROWS_BWD_FROZEN && nv16 && nv >= 128 && nv <= 256 &&
        rows != SIZE_MAX) {
      /* A frozen backward of 16-bit rows of 128-256 vectors (N = 1024-2048): four rows a group,
       * each prefetching the group's next row, and at least a wave of groups, rather than a
       * group a row. H100, rows·N = 2^25, old and new binaries alternating, two runs: bf16
       * RMSNorm 1024 76.3-77.6 -> 73.4-74.0 us (0.89-0.90 -> 0.93-0.94), 2048 78.0-78.4 ->
       * 73.6-74.4 (0.88 -> 0.92-0.93); fused add 98.7-98.9 -> 95.0-95.1 (0.93 -> 0.96) and
       * 100.7-101.4 -> 96.4-97.2 (0.90-0.91 -> 0.94-0.95); LayerNorm with both parameters
       * frozen 75.3-76.9 -> 72.8-74.1 and 76.8-77.5 -> 73.7-73.8; f16 likewise (RMSNorm 2048
       * 83.7-83.8 -> 75.2-76.6) but LayerNorm at 1024 (72.1-72.4 -> 72.9-73.5). f32 rows lost
       * 3-10 % (RMSNorm 1024 137.2-138.2 -> 144.0-144.8, already at the copy's rate), and
       * 512-vector rows (4096) lost with two rows a group, so both keep a group a row. */
      rows_per = 4;
      /* NG_ROWS_FULL1, LayerNorm's alone: RMSNorm's and the fused add's lost 5-13 % a group a
       * row (RMSNorm bf16 1024 73.4-74.7 -> 79.2-79.9 us) and were even with two rows */
      if ((flags & NG_ROWS_FULL1) && nv == (size_t)l.wg * l.reg_cols && rows > rows_per * wave)
        rows_per = 1;
    }
    if (rows_per) {
      const size_t want = (rows + rows_per - 1) / rows_per;
      g = want > wave ? want : wave;
      prefetch = true;
    }
    if (many && nv16 && nv > 512 && nv <= many_upto && in_regs && rows != SIZE_MAX) {
      /* NG_ROWS_MANY. H100, bf16, rows·N = 2^25, old and new binaries alternating, two runs:
       * fused add (weight frozen, ds_out) 106.4-106.6 -> 102.3-102.6 us (0.85 -> 0.89), f16
       * 106.6-107.1 -> 102.6-102.8, 8192 rows 215.8-217.1 -> 196.1-196.3 (0.84 -> 0.93), 1000
       * rows within noise; LayerNorm both frozen 78.6-79.3 -> 74.6-74.8 (0.87 -> 0.92), f16
       * 76.7-78.0 -> 74.0-76.0, 1000 rows 27.4-28.1 -> 26.1-26.6; 8 a unit took LayerNorm
       * 76.1, the fused add 104.1-104.6. RMSNorm's lost with more groups (74.5 -> 76-78). */
      g = (size_t)d->compute_units * 16;
      prefetch = nv <= 1024; /* NG_ROWS_MANY_2K: without it past 1024 */
      /* NG_ROWS_MANY_2K (LayerNorm's): rows of 513-1024 vectors a group a row. The prefetch
       * stays in the program, where nothing is left for it to ask for, as measured. */
      if ((flags & NG_ROWS_MANY_2K) && nv <= 1024) g = rows;
    }
    if (many512 && nv16 && nv > 256 && nv <= 512 && in_regs && rows != SIZE_MAX) {
      g = (size_t)d->compute_units * 8; /* NG_ROWS_MANY_512 */
      prefetch = false;
    }
    if ((flags & NG_ROWS_HALF_MID_DS) && mode == NG_ROWS_BWD_FROZEN && half_held) {
      g = (size_t)d->compute_units * 16; /* NG_ROWS_HALF_MID_DS, in place of NG_ROWS_MANY_512 */
      prefetch = true;
    }
    if (hold4 && l.wg == 1024 && l.reg_cols == 4 && in_regs && rows != SIZE_MAX) {
      g = (size_t)d->compute_units * 16; /* NG_ROWS_HOLD4: a group a row */
      prefetch = false;
    }
    if (w256x4 && l.wg == 256 && l.reg_cols == 4 && in_regs) {
      g = rows; /* NG_ROWS_256X4: a group a row */
      prefetch = false;
    }
    if (w512x4 && l.wg == 512 && l.reg_cols == 4 && in_regs) {
      g = rows; /* NG_ROWS_512X4: a group a row */
      prefetch = false;
    }
    if (w512x2 && l.wg == 512 && l.reg_cols == 2 && in_regs) {
      g = (size_t)d->compute_units * 16; /* NG_ROWS_512X2 */
      prefetch = false;
    }
  } else {
    prefetch = !(dw_nopf && l.wg == 512 && l.reg_cols == 4 && in_regs); /* NG_ROWS_DW_NOPF */
    size_t per = in_regs ? dw_groups_per_cu(l.wg, l.reg_cols) : 1;
    if (fit2 && l.wg == fit2_wg && l.reg_cols == 2 && in_regs) per = 2; /* NG_ROWS_FIT2 */
    if (half_held) /* NG_ROWS_HALF_MID */
      per = (flags & NG_ROWS_HALF_MID) && nv <= NG_HALF_MID_4_MAX ? 4 : 3;
    if (few && d->nv_shfl) per = (3 * per + 3) / 4; /* NG_ROWS_FEW, measured on NVIDIA */
    g = (size_t)d->compute_units * per;
  }
  if (wide1k && l.wg == 1024 && l.reg_cols == 1 && in_regs) {
    g = d->compute_units; /* NG_ROWS_1K: one group a unit, each prefetching its next row */
    prefetch = true;
  }
  const unsigned pf = tune[NG_TUNE_PREFETCH];
  if (pf) prefetch = pf >= 2; /* a distance means on */
  l.prefetch = d->nv_shfl && prefetch; /* the PTX prefetch exists on NVIDIA only */
  /* CPUs prefetch their row streams in the kernels (NG_PF_MEM) unless told not to, as far
   * ahead as told (the kernels' own distance, NG_PF_FAR, keeps the program's options short) */
  if (cpu && pf == 1) l.cpu_pf = NG_CPU_PF_OFF;
  else if (cpu && pf > 2 && pf != NG_CPU_PF_DEFAULT) l.cpu_pf = pf;
  /* frozen backward has no partials: the caller passes backward=false for it */
  if (tune[NG_TUNE_GROUPS]) g = tune[NG_TUNE_GROUPS];
  l.grid = g < UINT32_MAX / 1024 ? (unsigned)g : UINT32_MAX / 1024;
  if (g > rows) g = rows;
  if (g > UINT32_MAX / 1024) g = UINT32_MAX / 1024; /* global size = groups·wg fits 32 bits */
  if (g == 0) g = 1;
  l.groups = (unsigned)g;
  l.asked_wg = tune[NG_TUNE_WORKGROUP];
  l.asked_groups = tune[NG_TUNE_GROUPS];
  l.asked_prefetch = tune[NG_TUNE_PREFETCH];
  return l;
}

void ng_row_opts(ng_opts *o, const ng_row_launch *l, ng_dtype x_dtype, ng_tensor weight) {
  ng_row_opts_dt(o, l, x_dtype, weight.mem != NULL, weight.dtype);
}

void ng_row_opts_dt(ng_opts *o, const ng_row_launch *l, ng_dtype x_dtype, bool has_w,
                    ng_dtype w_dtype) {
  ng_opts_add(o, "DTYPE", x_dtype);
  ng_opts_add(o, "W_DTYPE", has_w ? w_dtype : NG_F32);
  ng_opts_add(o, "HAS_W", has_w ? 1 : 0);
  ng_opts_add(o, "VEC", l->vec);
  ng_opts_add(o, "WG", l->wg);
  ng_opts_add(o, "REG", l->reg_cols);
  ng_launch_opts(o, l);
}

bool ng_row_beyond_regs(const ng_row_launch *l, size_t n) {
  return l->wg > 1 && n / l->vec > (size_t)l->wg * l->reg_cols;
}

bool ng_col_split(const ng_context *ctx, const ng_row_launch *l, size_t rows, size_t n,
                  size_t *nblocks, size_t *rgroups) {
  if (!ng_row_beyond_regs(l, n)) return false;
  const size_t nv = n / l->vec, cover = (size_t)l->wg * l->reg_cols;
  *nblocks = (nv + cover - 1) / cover;
  const size_t want = (size_t)ctx->info.compute_units * dw_groups_per_cu(l->wg, l->reg_cols);
  size_t g = (want + *nblocks - 1) / *nblocks;
  if (g > rows) g = rows;
  *rgroups = g ? g : 1;
  return true;
}

ng_status ng_partials_scratch(const ng_context *ctx, const ng_row_launch *l, size_t rows, size_t n,
                              size_t sections, size_t row_floats, size_t *bytes) {
  size_t nblocks, rgroups, part, sums = 0;
  const bool split = ng_col_split(ctx, l, rows, n, &nblocks, &rgroups);
  if (ng_mul_overflows((split ? rgroups : l->groups) * 4 * sections, n, &part) ||
      (split && ng_mul_overflows(rows, 4 * row_floats, &sums)) || part + sums < part)
    return ng_fail(NG_ERR_INDEX_OVERFLOW, "scratch size overflows");
  *bytes = part + sums;
  return NG_SUCCESS;
}

ng_status ng_partials_scratch_any(const ng_context *ctx, const char *kind, ng_rows_mode mode_flags,
                                  size_t rows, size_t n, size_t sections, size_t row_floats,
                                  size_t hold, unsigned xflags, size_t *bytes) {
  ng_status s = NG_SUCCESS;
  *bytes = 0;
  /* vector-aligned or not × each dtype (the built-in table's entries are by dtype) */
  for (int i = 0; i < 6 && s == NG_SUCCESS; i++) {
    const ng_dtype xd = i < 2 ? NG_F32 : i < 4 ? NG_BF16 : NG_F16;
    const ng_row_launch l = ng_choose_row_launch_k(ctx, kind, xd, rows, n, i & 1,
                                                   ng_bwd_mode(true, xd) | mode_flags);
    size_t b = 0, bc = 0;
    s = ng_partials_scratch(ctx, &l, rows, n, sections, row_floats, &b);
    /* the rows split across groups, where they may be (a queue without a counter area falls
     * back to the launch above) */
    ng_coop c;
    if (s == NG_SUCCESS && ng_coop_plan(ctx, &l, xd, rows, n, hold, xflags, &c))
      s = ng_coop_partials(&c, n, sections, &bc);
    if (bc > b) b = bc;
    if (b > *bytes) *bytes = b;
  }
  return s;
}

/* Split rows: 256 work-items of four vectors a slice (H100, bf16, rows·n = 2^25, probe beside the
 * library in one run: backward with dW at 65536 151.6 us (row sums + column blocks + reduction)
 * against 107 us + the reduction; 32768 144.2 against 106; frozen 65536 116.8 (rows streamed
 * twice) against 96-98; frozen 32768 89.7 against 96. Two groups per compute unit measured best
 * (264 groups: 98-107 us, 528: 100-113, 1056: 103-125). */
#define NG_COOP_WG 256
#define NG_COOP_REG 4
#define NG_COOP_MAX_SLICES 16

bool ng_coop_plan(const ng_context *ctx, const ng_row_launch *l, ng_dtype x_dtype, size_t rows,
                  size_t n, size_t hold, unsigned xflags, ng_coop *c) {
  return ng_coop_plan_shape(ctx, l, x_dtype, rows, n, hold, xflags, NG_COOP_REG, 1, 2, c);
}

bool ng_coop_plan_shape(const ng_context *ctx, const ng_row_launch *l, ng_dtype x_dtype,
                        size_t rows, size_t n, size_t hold, unsigned xflags, unsigned reg,
                        unsigned lslots, unsigned per_cu, ng_coop *c) {
  if (!ng_reduce_on(ctx, ctx->info.nv_shfl) || l->wg < 2 || l->vec != 8) return false;
  /* Which dtypes split is the op's (xflags), from what measured faster: f16 lost in the fused
   * add and LayerNorm's forward (H100, 65536: 157 -> 197 us, 67 -> 83), f32 in RMSNorm's and
   * PolyNorm's forward with half the vectors (32768: 122 -> 132, 124 -> 134) */
  if (x_dtype == NG_F32 && (xflags & NG_COOP_F32)) reg = reg > 1 ? reg / 2 : 1;
  else if (!(x_dtype == NG_BF16 || (x_dtype == NG_F32 && (xflags & NG_COOP_F32_FULL)) ||
             (x_dtype == NG_F16 && (xflags & NG_COOP_F16))))
    return false;
  const size_t nv = n / l->vec;
  size_t fits = (size_t)l->wg * l->reg_cols; /* the row fits one group */
  if (hold && hold < fits) fits = hold;
  if (nv <= fits) return false;
  ng_row_launch cl = *l;
  if (!l->asked_wg) cl.wg = NG_COOP_WG; /* an override's or a table's group size stands */
  if (cl.wg > ng_max_pow2_wg(ctx)) cl.wg = (unsigned)ng_max_pow2_wg(ctx);
  if (cl.wg < 4) return false; /* PolyNorm's kernel sums its four gradient columns in one pass */
  cl.reg_cols = reg;
  cl.nv_shfl = ctx->info.nv_shfl && cl.wg % 32 == 0;
  const size_t cover = (size_t)cl.wg * cl.reg_cols, slices = (nv + cover - 1) / cover;
  size_t wait = ng_max_waiting_groups(ctx);
  if (wait > NG_COOP_MAX_SLICES) wait = NG_COOP_MAX_SLICES;
  if (slices > wait) return false;
  /* lslots float vectors per slot of the group live in local memory beside the reduction
   * buffer: RMSNorm's dW sums, one of the two kinds of sums where a kernel has two, LayerNorm's
   * weight */
  if ((size_t)cl.wg * cl.reg_cols * 8 * 4 * lslots + (size_t)cl.wg * 8 + 64 > ctx->info.local_mem)
    return false;
  size_t g = l->asked_groups ? l->asked_groups : (size_t)ctx->info.compute_units * per_cu;
  size_t sets = g / slices;
  if (sets > rows) sets = rows;
  if (sets > ((size_t)1 << 16)) sets = (size_t)1 << 16;
  if (sets == 0) sets = 1;
  cl.groups = cl.grid = (unsigned)(sets * slices);
  c->l = cl;
  c->slices = (unsigned)slices;
  c->sets = (unsigned)sets;
  c->f16_pack = x_dtype == NG_F16 && (xflags & NG_COOP_F16_PACK) && cl.nv_bf16;
  c->bf16_pack = x_dtype == NG_BF16 && (xflags & NG_COOP_BF16_PACK) && cl.nv_bf16;
  c->red_f = 0;
  c->ahead = (x_dtype == NG_BF16 && (xflags & NG_COOP_AHEAD_BF16)) ||
             (x_dtype == NG_F32 && (xflags & NG_COOP_AHEAD_F32)) ||
             (x_dtype == NG_F16 && (xflags & NG_COOP_AHEAD_F16));
  /* 16-bit rows alone: f32 ones lost (LayerNorm's forward at 65536 +10 %, docs/tuning.md) */
  c->late = c->ahead && x_dtype != NG_F32 && (xflags & NG_COOP_LATE16);
  /* whole slices where the even shares are the same slices (they divide the row, or one slice
   * holds it): the kernel as measured before them. They cost PolyNorm's f32 backward at 32768
   * 3.8 % in an A/B (H200), and in two sweeps its bf16 one with both frozen at 5120-7168 (one
   * slice) 0.01-0.02 of the copy. */
  c->whole = (xflags & NG_COOP_WHOLE) || nv % cover == 0 || slices == 1;
  return true;
}

void ng_coop_opts(ng_opts *o, const ng_coop *c) {
  if (c->ahead) ng_opts_add(o, "NG_COOP_AHEAD", 1);
  if (c->late) ng_opts_add(o, "NG_COOP_LATE", 1);
  if (c->f16_pack) ng_opts_add(o, "NG_F16_PACK", 1);
  if (c->bf16_pack) ng_opts_add(o, "NG_BF16_PACK", 1);
  if (c->whole) ng_opts_add(o, "NG_COOP_WHOLE", 1);
}

ng_status ng_coop_sync(ng_context *ctx, cl_command_queue q, const ng_coop *c, cl_mem *sync) {
  *sync = NULL;
  /* tickets, done count, a counter per set and bank, from an even index the banks of shares
   * (up to four 64-bit slots a group each): NG_COOP_AREA in cl/ng_common.clh */
  const size_t banks = c->ahead ? 4 : 2;
  return ng_sync_area(ctx, q, 2 + banks * c->sets + 1 + banks * 8 * (size_t)c->l.groups, sync);
}

ng_status ng_coop_partials(const ng_coop *c, size_t n, size_t sections, size_t *bytes) {
  if (ng_mul_overflows((size_t)c->sets * 4 * sections, n, bytes))
    return ng_fail(NG_ERR_INDEX_OVERFLOW, "scratch size overflows");
  return NG_SUCCESS;
}

void ng_launch_opts(ng_opts *o, const ng_row_launch *l) {
  if (l->nv_shfl) ng_opts_add(o, "NG_NV_SHFL", 1);
  if (l->nv_bf16) ng_opts_add(o, "NG_NV_BF16", 1);
  if (l->prefetch) ng_opts_add(o, "PREFETCH", 1);
  if (l->cpu_pf) ng_opts_add(o, "NG_PF_FAR", l->cpu_pf == NG_CPU_PF_OFF ? 0 : l->cpu_pf);
}

/* ---- in-kernel reductions ------------------------------------------------------------------ */
/* Groups that may wait in one launch: half the compute units (one on a CPU), so that the groups
 * they wait for find a slot even beside a second such kernel on another queue. The compute units
 * less one (fewer rounds for the in-kernel sums) measured within the runs' spread on the H100
 * (docs/tuning.md, "In-kernel gradient reduction"), so the margin stays. */
size_t ng_max_waiting_groups(const ng_context *ctx) {
  const bool cpu = (ctx->info.type & CL_DEVICE_TYPE_CPU) != 0;
  return cpu || ctx->info.compute_units < 4 ? 1 : ctx->info.compute_units / 2;
}

/* Sequential rounds of f loads (NG_RED_F: 8 or 16) a reducer's thread makes when the partial
 * rows are summed in blocks of cw columns (cl/ng_common.clh: four columns a thread, 4·wg / cw
 * slices of rows), with the blocks shared among at most cmax reducers (*reducers: how many). */
static size_t fused_rounds(size_t groups, size_t wg, size_t ncols, size_t sections, size_t cmax,
                           size_t cw, size_t f, size_t *reducers) {
  const size_t blocks = sections * ((ncols + cw - 1) / cw);
  *reducers = blocks < cmax ? blocks : cmax;
  const size_t per = (blocks + *reducers - 1) / *reducers;
  const size_t slices = 4 * wg / cw, chain = (groups + slices - 1) / slices;
  return per * ((chain + f - 1) / f);
}

/* Blocks and reducers of an in-kernel reduction of `rows` partial rows by a grid of `groups`:
 * at most ng_max_waiting_groups reducers, blocks of cw columns, a power of two from 8 (a 32-byte
 * sector a row; 4 for shorter rows) to 4·wg, whichever takes the fewest rounds of loads
 * (fused_rounds), the widest of equals (fewer blocks, and fewer slices to meet in the tree). */
static size_t fused_shape_of(const ng_context *ctx, size_t rows, size_t groups, size_t wg,
                             size_t ncols, size_t sections, size_t f, size_t *cw_out,
                             size_t *reducers) {
  size_t cmax = ng_max_waiting_groups(ctx);
  if (cmax > groups) cmax = groups;
  size_t best = SIZE_MAX, best_cw = 4, best_reducers = 1;
  for (size_t cw = ncols < 8 ? 4 : 8; cw <= 4 * wg; cw *= 2) {
    size_t red;
    const size_t r = fused_rounds(rows, wg, ncols, sections, cmax, cw, f, &red);
    if (r <= best) best = r, best_cw = cw, best_reducers = red;
    if (cw >= ncols) break; /* one block covers the row: wider adds nothing */
  }
  *cw_out = best_cw;
  *reducers = best_reducers;
  return best;
}

/* Rows in flight per reducer thread of a held-row launch: 16 where the grid has two groups per
 * compute unit (more than one, at most two), else 8. H100, bf16, whole backward with dW, old and
 * new binaries alternating, two runs: at 4096 (264 groups of 256 x 2) RMSNorm 81.2-81.8 ->
 * 79.4-79.5 us, LayerNorm's dB alone 81.0-82.0 -> 78.3-79.6, LayerNorm's dW + dB, which then
 * goes in-kernel (3 rounds instead of 5), 84.4-84.9 -> 82.0-83.0. With 16 at 2048 (528 groups)
 * RMSNorm took 78.9-79.3 -> 98.8-99.4 us and LayerNorm 83.2-83.9 -> 101.0-102.6; at 8192 and
 * 16384 (132 groups) it was even or up to 1.4 us slower (LayerNorm's dW + dB at 16384, then
 * in-kernel, 95.4-96.0 -> 95.9-97.4). Taken on the grid before the cap at the row count, as the
 * rounds are, since the kernel is built with it (NG_RED_F). */
unsigned ng_fused_rows_in_flight(const ng_context *ctx, const ng_row_launch *l) {
  const size_t g = l->grid > l->groups ? l->grid : l->groups, cu = ctx->info.compute_units;
  return g > cu && g <= 2 * cu ? 16u : 8u;
}

/* A row launch's groups each leave a partial row. */
static size_t fused_shape(const ng_context *ctx, const ng_row_launch *l, size_t ncols,
                          size_t sections, size_t *cw_out, size_t *reducers) {
  return fused_shape_of(ctx, l->groups, l->groups, l->wg, ncols, sections,
                        ng_fused_rows_in_flight(ctx, l), cw_out, reducers);
}

/* The default sums in the kernel where a reducer's thread makes at most this many rounds of
 * loads and the grid has at most NG_FUSED_MAX_PER_CU groups per compute unit. H100, bf16, with
 * dW, rows·N = 2^25, separate -> in-kernel (fused_rounds; docs/tuning.md has the table):
 *  - 1-3 rounds: RMSNorm 4096 85.3-86.8 -> 81.1-83.2 us, 8192 87.6-89.0 -> 86.0-86.8, 16384
 *    90.3-92.2 -> 89.5-91.4; LayerNorm 8192 91.1-95.7 -> 90.0-90.3, weight frozen (dB only)
 *    4096 84.6-85.6 -> 80.5-82.8, 16384 95.9-100.0 -> 90.4-92.9; PolyNorm 2048 84.4-84.8 ->
 *    79.8-80.4, 4096 87.9-89.4 -> 89.3-89.8;
 *  - 5 rounds: LayerNorm 2048 83.3-84.1 -> 83.4-84.5, 16384 96.1-96.7 -> 97.1-98.0, 4096
 *    85.1-88.3 -> 82.6-83.5; 9 rounds: LayerNorm 1024 83.6-84.2 -> 90.0 (its reducers' loads
 *    taken out, a measurement build: 79.2-80.1, so about 1 us a round);
 *  - the 1056 groups (8 per compute unit) of N = 1024 measured even or slower for every op,
 *    PolyNorm's 3 rounds too: 85.1-85.5 -> 85.2-87.2.
 * When a thread summed one column as scalars, every op at N = 1024 took 33 rounds (RMSNorm 81 ->
 * 89 us). Rounds and groups are taken on the grid before the cap at the row count, so the
 * choice (a build option) does not depend on the batch. */
#define NG_FUSED_MAX_ROUNDS 3
#define NG_FUSED_MAX_PER_CU 4

bool ng_fused_wanted(const ng_context *ctx, const ng_row_launch *l, size_t ncols,
                     size_t sections, ng_fused_rule rule) {
  if (l->wg < 2 || ncols == 0 || sections == 0) return false; /* the CPU shape: separate kernel */
  if (ctx->fused_reduce) return ctx->fused_reduce >= 2;
  if (!l->nv_shfl || rule == NG_FUSED_NEVER) return false; /* measured on NVIDIA only */
  if (rule == NG_FUSED_ALWAYS) return true;
  ng_row_launch full = *l;
  full.groups = l->grid > l->groups ? l->grid : l->groups;
  if (full.groups > (size_t)NG_FUSED_MAX_PER_CU * ctx->info.compute_units) return false;
  size_t cw, reducers;
  return fused_shape(ctx, &full, ncols, sections, &cw, &reducers) <= NG_FUSED_MAX_ROUNDS;
}

/* The counter slot of queue q (index into sync_buf's pairs), or -1. Called under ctx->lock. */
static int sync_slot(ng_context *ctx, cl_command_queue q, ng_status *s) {
  *s = NG_SUCCESS;
  for (unsigned i = 0; i < ctx->n_sync_queues; i++)
    if (ctx->sync_queues[i] == q) return (int)i;
  if (ctx->n_sync_queues == NG_SYNC_QUEUES) return -1;
  if (!ctx->sync_buf) {
    /* made from zeros on the host side: no enqueue, so no ordering with the caller's queue */
    static const cl_uint zeros[2 * NG_SYNC_QUEUES];
    cl_int e = CL_SUCCESS;
    ctx->sync_buf = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                   sizeof zeros, (void *)zeros, &e);
    if (!ctx->sync_buf) {
      *s = ng_fail(e, "clCreateBuffer(%zu bytes) for the reduction counters failed", sizeof zeros);
      return -1;
    }
  }
  cl_int e = clRetainCommandQueue(q);
  if (e != CL_SUCCESS) return -1;
  ctx->sync_queues[ctx->n_sync_queues] = q;
  return (int)ctx->n_sync_queues++;
}

/* A plan that is off, with the gradients' arguments set (the kernels take them either way). */
static void fused_off(ng_fused *out, ng_tensor dw, ng_tensor db, bool acc) {
  memset(out, 0, sizeof *out);
  out->dw = dw.mem;
  out->dw_off = dw.offset;
  out->db = db.mem;
  out->db_off = db.offset;
  out->acc = acc ? 1 : 0;
  out->cw = 1;
  out->reducers = 1;
}

/* A plan turned on: blocks of cw columns summed by `reducers` groups. */
static void fused_on(ng_fused *out, size_t cw, size_t reducers) {
  out->on = true;
  out->cw = (cl_uint)cw;
  out->reducers = (cl_uint)reducers;
}

/* The queue's two counters into plan out (false: none, past NG_SYNC_QUEUES queues, or *s). */
static bool fused_counters(ng_context *ctx, cl_command_queue q, ng_fused *out, ng_status *s) {
  pthread_mutex_lock(&ctx->lock);
  const int slot = sync_slot(ctx, q, s);
  pthread_mutex_unlock(&ctx->lock);
  if (slot < 0) return false;
  out->sync = ctx->sync_buf;
  out->sync_off = 2 * (cl_ulong)slot;
  return true;
}

ng_status ng_fused_plan(ng_context *ctx, cl_command_queue q, const ng_row_launch *l, size_t ncols,
                        size_t sections, ng_fused_rule rule, ng_tensor dw, ng_tensor db, bool acc,
                        ng_fused *out) {
  fused_off(out, dw, db, acc);
  if (!ng_fused_wanted(ctx, l, ncols, sections, rule)) return NG_SUCCESS;
  ng_status s;
  if (!fused_counters(ctx, q, out, &s)) return s;
  size_t cw, reducers;
  fused_shape(ctx, l, ncols, sections, &cw, &reducers);
  fused_on(out, cw, reducers);
  return NG_SUCCESS;
}

ng_status ng_fused_plan_own(ng_context *ctx, cl_command_queue q, size_t reducers, ng_tensor dw,
                            ng_tensor db, bool acc, ng_fused *out) {
  fused_off(out, dw, db, acc);
  ng_status s;
  if (reducers == 0 || !fused_counters(ctx, q, out, &s)) return reducers ? s : NG_SUCCESS;
  fused_on(out, 0, reducers);
  return NG_SUCCESS;
}

bool ng_coop_fused_wanted(const ng_context *ctx, const ng_coop *c, size_t ncols,
                          size_t sections, bool by_default) {
  if (c->l.wg < 2 || ncols == 0 || sections == 0) return false;
  if (ctx->fused_reduce) return ctx->fused_reduce == 2;
  return by_default && c->l.nv_shfl; /* measured on NVIDIA only */
}

void ng_coop_fused_plan(const ng_context *ctx, const ng_coop *c, size_t ncols, size_t sections,
                        bool by_default, ng_tensor dw, ng_tensor db, bool acc, ng_fused *out) {
  fused_off(out, dw, db, acc);
  if (!ng_coop_fused_wanted(ctx, c, ncols, sections, by_default)) return;
  size_t cw, reducers;
  fused_shape_of(ctx, c->sets, c->l.groups, c->l.wg, ncols, sections, ng_coop_red_f(c), &cw,
                 &reducers);
  fused_on(out, cw, reducers);
}

ng_status ng_sync_area(ng_context *ctx, cl_command_queue q, size_t n, cl_mem *mem) {
  *mem = NULL;
  ng_status s;
  pthread_mutex_lock(&ctx->lock);
  const int slot = sync_slot(ctx, q, &s);
  if (slot >= 0 && ctx->sync_area_n[slot] < n) {
    /* grown to a power of two, so a few sizes cover every shape; the old buffer lives on until
     * the commands that use it finish (clReleaseMemObject's contract) */
    size_t cap = 256;
    while (cap < n) cap *= 2;
    cl_uint *zeros = calloc(cap, sizeof *zeros);
    cl_int e = CL_SUCCESS;
    cl_mem m = zeros ? clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                      cap * sizeof *zeros, zeros, &e)
                     : NULL;
    if (!m)
      s = zeros ? ng_fail(e, "clCreateBuffer(%zu bytes) for the counters failed", cap * 4)
                : ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "no memory for %zu counters", cap);
    free(zeros);
    if (!m) {
      pthread_mutex_unlock(&ctx->lock);
      return s;
    }
    if (ctx->sync_area[slot]) clReleaseMemObject(ctx->sync_area[slot]);
    ctx->sync_area[slot] = m;
    ctx->sync_area_n[slot] = cap;
  }
  if (slot >= 0 && clRetainMemObject(ctx->sync_area[slot]) == CL_SUCCESS)
    *mem = ctx->sync_area[slot];
  pthread_mutex_unlock(&ctx->lock);
  return s;
}

void ng_fused_release(ng_context *ctx) {
  for (unsigned i = 0; i < NG_SYNC_QUEUES; i++) {
    if (ctx->sync_area[i]) clReleaseMemObject(ctx->sync_area[i]);
    ctx->sync_area[i] = NULL;
    ctx->sync_area_n[i] = 0;
  }
  for (unsigned i = 0; i < ctx->n_sync_queues; i++) clReleaseCommandQueue(ctx->sync_queues[i]);
  ctx->n_sync_queues = 0;
  if (ctx->sync_buf) clReleaseMemObject(ctx->sync_buf);
  ctx->sync_buf = NULL;
}
