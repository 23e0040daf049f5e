/* SGEMM through CLBlast: the only file that sees clblast_c.h.
 *
 * Why a planner. CLBlast's fast ("indirect") GEMM kernel wants each operand in one particular
 * layout: with its GEMMK=0 kernel, A and B with K as the outer (strided) index and C with M
 * contiguous; with GEMMK=1, the plain row-major NN layout. An operand that is transposed relative
 * to that, whose dimensions are not multiples of the kernel's tiles (MWG, NWG, KWG·KREG), whose
 * leading dimension is not exactly its first dimension, or that has a non-zero offset is first
 * copied, padded and/or transposed into CLBlast's temporary buffer (xgemm.hpp, NoTempBuffer and
 * GetTempSize), C both ways when beta ≠ 0. Small products (m·n·k below XGEMM_MIN_INDIRECT_SIZE³)
 * take the "direct" kernel, which copies nothing. For FLCE the copied operand that matters is the
 * [V, H] weight (or its gradient): copied whole it is exactly the V·H·4-byte intermediate the op
 * exists to avoid. So the planner asks CLBlast (CLBlastSGemmTempBufferSize) whether the weight
 * operand is copied, and when it would be, splits the product along V so that each call copies
 * at most one block of rows. */
#include "ng_gemm.h"

#include <clblast_c.h>
#include <stdlib.h>
#include <string.h>

static CLBlastTranspose tr(bool t) { return t ? CLBlastTransposeYes : CLBlastTransposeNo; }

/* CLBlast reports OpenCL errors with their OpenCL codes (-1…-63): pass those through; its own
 * codes (clBLAS-like -1007…-1024, custom -2039…-2050) become NG_ERR_GEMM_FAILED. */
static ng_status map_status(CLBlastStatusCode st, const char *what, const ng_gemm *g) {
  if (st == CLBlastSuccess) return NG_SUCCESS;
  if (st < 0 && st >= -63)
    return ng_fail((ng_status)st, "CLBlast %s (m %zu, n %zu, k %zu) failed with OpenCL error %d",
                   what, g->m, g->n, g->k, (int)st);
  return ng_fail(NG_ERR_GEMM_FAILED, "CLBlast %s (m %zu, n %zu, k %zu) returned status %d", what,
                 g->m, g->n, g->k, (int)st);
}

ng_status ng_gemm_temp_bytes(cl_command_queue q, const ng_gemm *g, size_t *bytes) {
  size_t sz = 0;
  CLBlastStatusCode st;
  if (g->col_major)
    st = CLBlastSGemmTempBufferSize(CLBlastLayoutColMajor, tr(g->tb), tr(g->ta), g->n, g->m, g->k,
                                    g->b_off, g->ldb, g->a_off, g->lda, g->c_off, g->ldc, &q, &sz);
  else
    st = CLBlastSGemmTempBufferSize(CLBlastLayoutRowMajor, tr(g->ta), tr(g->tb), g->m, g->n, g->k,
                                    g->a_off, g->lda, g->b_off, g->ldb, g->c_off, g->ldc, &q, &sz);
  *bytes = sz;
  return map_status(st, "temp-buffer query", g);
}

ng_status ng_gemm_enqueue(cl_command_queue q, const ng_gemm *g, cl_mem temp) {
  /* Always a temporary buffer of our own: CLBlast then never allocates one behind our back, and
   * checks that ours (its CL_MEM_SIZE) is large enough for the call. */
  if (!temp) return ng_fail(NG_ERR_INTERNAL, "GEMM without a temporary buffer");
  cl_event from = NULL, done = NULL;
  const bool prof = ng_profile_active();
  if (prof) {
    /* CLBlast returns the event of its last kernel only; a 4-byte fill of the temporary (which
     * CLBlast overwrites before reading) marks where the call starts. A marker would not do:
     * some drivers (PoCL) stamp markers at submission, not at completion of what precedes. */
    const cl_uint zero = 0;
    cl_int e = clEnqueueFillBuffer(q, temp, &zero, sizeof zero, 0, sizeof zero, 0, NULL, &from);
    if (e != CL_SUCCESS) return ng_fail(e, "clEnqueueFillBuffer before a GEMM failed");
  }
  cl_mem t = temp;
  CLBlastStatusCode st;
  if (g->col_major)
    st = CLBlastSgemmWithTempBuffer(CLBlastLayoutColMajor, tr(g->tb), tr(g->ta), g->n, g->m, g->k,
                                    g->alpha, g->b, g->b_off, g->ldb, g->a, g->a_off, g->lda,
                                    g->beta, g->c, g->c_off, g->ldc, &q, prof ? &done : NULL, t);
  else
    st = CLBlastSgemmWithTempBuffer(CLBlastLayoutRowMajor, tr(g->ta), tr(g->tb), g->m, g->n, g->k,
                                    g->alpha, g->a, g->a_off, g->lda, g->b, g->b_off, g->ldb,
                                    g->beta, g->c, g->c_off, g->ldc, &q, prof ? &done : NULL, t);
  if (st == CLBlastSuccess && from && done) ng_profile_record_span(from, done, "clblast_sgemm");
  if (from) clReleaseEvent(from);
  if (done) clReleaseEvent(done);
  return map_status(st, "SGEMM", g);
}

/* ---- splitting --------------------------------------------------------------------------- */
size_t ng_gemm_extent(const ng_gemm *g, ng_gemm_dim dim) {
  return dim == NG_GEMM_M ? g->m : dim == NG_GEMM_N ? g->n : g->k;
}

/* Row-major addressing: op(A)[i][p] is A[i·lda + p] (or A[p·lda + i] when ta), op(B)[p][j] is
 * B[p·ldb + j] (or B[j·ldb + p] when tb), C[i][j] is C[i·ldc + j]. */
ng_gemm ng_gemm_sub(const ng_gemm *g, ng_gemm_dim dim, size_t start, size_t len) {
  ng_gemm s = *g;
  switch (dim) {
  case NG_GEMM_M:
    s.m = len;
    s.a_off += g->ta ? start : start * g->lda;
    s.c_off += start * g->ldc;
    break;
  case NG_GEMM_N:
    s.n = len;
    s.b_off += g->tb ? start * g->ldb : start;
    s.c_off += start;
    break;
  case NG_GEMM_K:
    s.k = len;
    s.a_off += g->ta ? start * g->lda : start;
    s.b_off += g->tb ? start : start * g->ldb;
    if (start > 0) s.beta = 1.0f;
    break;
  }
  return s;
}

ng_status ng_gemm_copies(cl_command_queue q, const ng_gemm *g, ng_gemm_operand which,
                         bool *copies) {
  size_t t0 = 0, t1 = 0;
  ng_status s = ng_gemm_temp_bytes(q, g, &t0);
  if (s != NG_SUCCESS) return s;
  const size_t off = which == NG_GEMM_A ? g->a_off : which == NG_GEMM_B ? g->b_off : g->c_off;
  /* No temporary: the direct kernel (or nothing to copy). */
  if (t0 == 0) {
    *copies = false;
    return NG_SUCCESS;
  }
  /* Indirect, and an operand with an offset is always copied there. */
  if (off != 0) {
    *copies = true;
    return NG_SUCCESS;
  }
  /* Offset 0: force the copy with offset 1; if that costs more, it was not copied before. */
  ng_gemm probe = *g;
  if (which == NG_GEMM_A) probe.a_off = 1;
  else if (which == NG_GEMM_B) probe.b_off = 1;
  else probe.c_off = 1;
  s = ng_gemm_temp_bytes(q, &probe, &t1);
  if (s != NG_SUCCESS) return s;
  *copies = t1 == t0;
  return NG_SUCCESS;
}

/* ---- planning ---------------------------------------------------------------------------- */
/* CLBlast's temporary size depends on the layout, the transposes, m, n, k, the leading
 * dimensions and on whether each offset is zero (not on its value), so the blocks of one split
 * share their answers. */
typedef struct memo_entry {
  ng_gemm key;
  size_t bytes;
} memo_entry;
typedef struct memo {
  memo_entry e[32];
  unsigned n, next;
} memo;

static bool same_shape(const ng_gemm *x, const ng_gemm *y) {
  return x->ta == y->ta && x->tb == y->tb && x->col_major == y->col_major && x->m == y->m &&
         x->n == y->n && x->k == y->k && x->lda == y->lda && x->ldb == y->ldb &&
         x->ldc == y->ldc && (x->a_off == 0) == (y->a_off == 0) &&
         (x->b_off == 0) == (y->b_off == 0) && (x->c_off == 0) == (y->c_off == 0);
}

static ng_status temp_memo(memo *mm, cl_command_queue q, const ng_gemm *g, size_t *bytes) {
  for (unsigned i = 0; i < mm->n; i++)
    if (same_shape(&mm->e[i].key, g)) {
      *bytes = mm->e[i].bytes;
      return NG_SUCCESS;
    }
  ng_status s = ng_gemm_temp_bytes(q, g, bytes);
  if (s != NG_SUCCESS) return s;
  unsigned slot = mm->n < NG_ARRAY_LEN(mm->e) ? mm->n++ : (mm->next++ % NG_ARRAY_LEN(mm->e));
  mm->e[slot].key = *g;
  mm->e[slot].bytes = *bytes;
  return NG_SUCCESS;
}

/* The layout of `g` with the smaller temporary; when `big_uncopied`, only layouts that do not
 * copy operand `big` qualify (*found false when none does). */
static ng_status pick_layout(memo *mm, cl_command_queue q, ng_gemm *g, bool big_uncopied,
                             ng_gemm_operand big, bool *found, size_t *bytes) {
  *found = false;
  ng_gemm best = *g;
  size_t best_bytes = 0;
  for (int cm = 0; cm < 2; cm++) {
    ng_gemm c = *g;
    c.col_major = cm != 0;
    if (big_uncopied) {
      bool copies = true;
      ng_status s = ng_gemm_copies(q, &c, big, &copies);
      if (s != NG_SUCCESS) return s;
      if (copies) continue;
    }
    size_t t = 0;
    ng_status s = temp_memo(mm, q, &c, &t);
    if (s != NG_SUCCESS) return s;
    if (!*found || t < best_bytes) {
      best = c;
      best_bytes = t;
      *found = true;
    }
  }
  *g = best;
  *bytes = best_bytes;
  return NG_SUCCESS;
}

static ng_status plan_push(ng_gemm_plan *p, size_t *cap, const ng_gemm *g, size_t bytes) {
  if (p->count == *cap) {
    size_t nc = *cap ? *cap * 2 : 8;
    ng_gemm *n = realloc(p->calls, nc * sizeof *n);
    if (!n) return ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "GEMM plan of %zu calls", nc);
    p->calls = n;
    *cap = nc;
  }
  p->calls[p->count++] = *g;
  if (bytes > p->temp_bytes) p->temp_bytes = bytes;
  return NG_SUCCESS;
}

static ng_status plan_blocks(memo *mm, cl_command_queue q, const ng_gemm *whole, ng_gemm_dim dim,
                             ng_gemm_operand big, size_t from, size_t block, ng_gemm_plan *p,
                             size_t *cap) {
  const size_t S = ng_gemm_extent(whole, dim);
  for (size_t start = from; start < S; start += block) {
    const size_t len = S - start < block ? S - start : block;
    ng_gemm g = ng_gemm_sub(whole, dim, start, len);
    bool found = false;
    size_t bytes = 0;
    ng_status s = pick_layout(mm, q, &g, false, big, &found, &bytes);
    if (s == NG_SUCCESS) s = plan_push(p, cap, &g, bytes);
    if (s != NG_SUCCESS) return s;
  }
  return NG_SUCCESS;
}

ng_status ng_gemm_plan_split(cl_command_queue q, const ng_gemm *whole, ng_gemm_dim dim,
                             ng_gemm_operand big, size_t block, size_t align, bool force_blocks,
                             ng_gemm_plan *out) {
  memset(out, 0, sizeof *out);
  if (block == 0) return ng_fail(NG_ERR_INTERNAL, "GEMM plan with a zero block");
  memo mm;
  mm.n = mm.next = 0;
  size_t cap = 0, bytes = 0;
  bool found = false;
  const size_t S = ng_gemm_extent(whole, dim);

  ng_gemm g = *whole;
  ng_status s = NG_SUCCESS;
  if (!force_blocks) s = pick_layout(&mm, q, &g, true, big, &found, &bytes);
  if (s == NG_SUCCESS && found) {
    out->strategy = 1;
    s = plan_push(out, &cap, &g, bytes);
  }
  if (s == NG_SUCCESS && !found && !force_blocks && align > 0 && S > align && S % align != 0) {
    const size_t lead = S / align * align;
    g = ng_gemm_sub(whole, dim, 0, lead);
    s = pick_layout(&mm, q, &g, true, big, &found, &bytes);
    if (s == NG_SUCCESS && found) {
      out->strategy = 2;
      s = plan_push(out, &cap, &g, bytes);
      if (s == NG_SUCCESS) s = plan_blocks(&mm, q, whole, dim, big, lead, block, out, &cap);
    }
  }
  if (s == NG_SUCCESS && !found) {
    out->strategy = 3;
    s = plan_blocks(&mm, q, whole, dim, big, 0, block, out, &cap);
  }
  if (s != NG_SUCCESS) ng_gemm_plan_free(out);
  return s;
}

void ng_gemm_plan_free(ng_gemm_plan *p) {
  free(p->calls);
  p->calls = NULL;
  p->count = 0;
  p->temp_bytes = 0;
}

void ng_gemm_plan_shift(ng_gemm_plan *p, ptrdiff_t da, ptrdiff_t db, ptrdiff_t dc) {
  for (size_t i = 0; i < p->count; i++) {
    p->calls[i].a_off = (size_t)((ptrdiff_t)p->calls[i].a_off + da);
    p->calls[i].b_off = (size_t)((ptrdiff_t)p->calls[i].b_off + db);
    p->calls[i].c_off = (size_t)((ptrdiff_t)p->calls[i].c_off + dc);
  }
}

/* ---- CLBlast's Xgemm parameters (normgrad-cli tune gemm, docs/tuning.md) ------------------
 * CLBlast ships no tuning for many devices (the H100 among them: 29–33 TFLOP/s with its
 * defaults, about 40 with good parameters; PERF-NOTES). CLBlastOverrideParameters sets them per
 * device and precision for the whole process; the next SGEMM recompiles with them. */
#include <math.h>
#include <stdio.h>
#include <time.h>

static const char *const xgemm_names[] = {"GEMMK", "KREG", "KWG", "KWI", "MDIMA", "MDIMC",
                                          "MWG",   "NDIMB", "NDIMC", "NWG", "SA", "SB",
                                          "STRM",  "STRN", "VWM", "VWN"};
#define XGEMM_N (sizeof xgemm_names / sizeof xgemm_names[0])

static bool parse_xgemm(const char *params, size_t v[XGEMM_N]) {
  bool seen[XGEMM_N] = {false};
  const char *p = params;
  for (;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (!*p) break;
    char name[16];
    unsigned long val;
    int used = 0;
    if (sscanf(p, "%15[A-Z]=%lu%n", name, &val, &used) != 2) return false;
    p += used;
    size_t k = 0;
    while (k < XGEMM_N && strcmp(xgemm_names[k], name)) k++;
    if (k == XGEMM_N || val > 4096) return false;
    v[k] = (size_t)val;
    seen[k] = true;
  }
  for (size_t k = 0; k < XGEMM_N; k++)
    if (!seen[k]) return false;
  return true;
}

static bool override_xgemm(cl_device_id dev, const size_t v[XGEMM_N]) {
  return CLBlastOverrideParameters(dev, "Xgemm", CLBlastPrecisionSingle, XGEMM_N,
                                   (const char **)xgemm_names, v) == CLBlastSuccess;
}

bool ng_gemm_apply_xgemm(const ng_context *ctx, const char *params) {
  size_t v[XGEMM_N];
  return parse_xgemm(params, v) && override_xgemm(ctx->device, v);
}

static void format_xgemm(const size_t v[XGEMM_N], char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t k = 0; k < XGEMM_N && used < len; k++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s=%zu", k ? " " : "", xgemm_names[k],
                             v[k]);
}

/* Xgemm configurations that satisfy the kernel's divisibility rules and fit the device: tiles
 * of 64 or 128 squared (or mixed), 8×8…32×8 threads, vector widths 2 and 4, local-memory
 * caching of A and B first, 32–64 accumulators per work-item on GPUs (16–64 on CPUs); at most
 * 40 on GPUs and 8 on CPUs, in that order. */
static size_t xgemm_candidates(const ng_context *ctx, size_t (*out)[XGEMM_N], size_t max) {
  static const size_t tiles[][2] = {{64, 64}, {128, 128}, {64, 128}, {128, 64}};
  static const size_t dims[][2] = {{16, 16}, {8, 16}, {16, 8}, {8, 8}, {32, 8}, {8, 32}};
  static const size_t vws[] = {2, 4}, kwgs[] = {16, 32}, sabs[] = {1, 0};
  cl_ulong local = 0;
  clGetDeviceInfo(ctx->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
  /* every candidate is a CLBlast compile: about 1 s on NVIDIA, 10 s on PoCL */
  const bool cpu = (ctx->info.type & CL_DEVICE_TYPE_CPU) != 0;
  if (cpu && max > 8) max = 8;
  if (!cpu && max > 40) max = 40;
  size_t n = 0;
  for (size_t sab = 0; sab < 2; sab++)
    for (size_t t = 0; t < 4; t++)
      for (size_t d = 0; d < 6; d++)
        for (size_t vm = 0; vm < 2; vm++)
          for (size_t kw = 0; kw < 2; kw++) {
            const size_t mwg = tiles[t][0], nwg = tiles[t][1], mdimc = dims[d][0],
                         ndimc = dims[d][1], vw = vws[vm], kwg = kwgs[kw], sa = sabs[sab];
            const size_t mdima = mdimc, ndimb = ndimc;
            if (mwg % (mdimc * vw) || nwg % (ndimc * vw)) continue;
            if (mwg % (mdima * vw) || nwg % (ndimb * vw)) continue;
            if (kwg % ((mdimc * ndimc) / mdima) || kwg % ((mdimc * ndimc) / ndimb)) continue;
            if (mdimc * ndimc > ctx->info.max_wg) continue;
            const size_t acc = (mwg / mdimc) * (nwg / ndimc); /* accumulators per work-item */
            if (acc < (cpu ? 16u : 32u) || acc > 64) continue;
            if ((sa ? kwg * (mwg + nwg) : 0) * 4 > local) continue;
            if (n == max) return n;
            const size_t v[XGEMM_N] = {0, 1, kwg, 2, mdima, mdimc, mwg, ndimb, ndimc, nwg,
                                       sa, sa, 1, 1, vw, vw};
            memcpy(out[n++], v, sizeof v);
          }
  return n;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Median wall time of 3 runs (after one that compiles and warms up) of C = A·B, size³. */
static ng_status time_sgemm(cl_command_queue q, size_t size, cl_mem a, cl_mem b, cl_mem c,
                            double *ms) {
  double t[3];
  for (int r = 0; r < 4; r++) {
    const double t0 = now_ms();
    CLBlastStatusCode st =
        CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, size, size,
                     size, 1.0f, a, 0, size, b, 0, size, 0.0f, c, 0, size, &q, NULL);
    if (st != CLBlastSuccess) return NG_ERR_GEMM_FAILED;
    if (clFinish(q) != CL_SUCCESS) return NG_ERR_GEMM_FAILED;
    if (r) t[r - 1] = now_ms() - t0;
  }
  double x = t[0], y = t[1], z = t[2]; /* median of three */
  *ms = fmax(fmin(x, y), fmin(fmax(x, y), z));
  return NG_SUCCESS;
}

ng_status ng_tune_gemm(ng_context *ctx, cl_command_queue queue, size_t size, int store,
                       ng_gemm_tune_result *out) {
  ng_clear_detail();
  if (!ctx || !queue || !out) return ng_fail(NG_ERR_NULL_HANDLE, "ctx, queue or out is NULL");
  memset(out, 0, sizeof *out);
  if (size < 64 || size > 16384 || size % 64)
    return ng_fail(NG_ERR_INVALID_VALUE, "size %zu: a multiple of 64 in [64, 16384]", size);
  ng_status s = ng_check_queue(ctx, queue);
  if (s != NG_SUCCESS) return s;
  const size_t elems = size * size, bytes = elems * 4;
  cl_ulong global = 0;
  clGetDeviceInfo(ctx->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL);
  if (3 * (cl_ulong)bytes > global / 2 || bytes > ctx->info.max_alloc)
    return ng_fail(NG_ERR_INVALID_VALUE, "size %zu needs 3 x %zu bytes of device memory", size,
                   bytes);
  float *h = malloc(bytes), *ref = malloc(bytes), *got = malloc(bytes);
  size_t(*cand)[XGEMM_N] = malloc(256 * sizeof *cand);
  cl_mem a = NULL, b = NULL, c = NULL;
  cl_int e = CL_SUCCESS;
  if (!h || !ref || !got || !cand) {
    s = ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "tuning buffers");
    goto done;
  }
  uint64_t x = 0x9e3779b97f4a7c15ull; /* small values: sums of `size` products stay exact-ish */
  for (size_t i = 0; i < elems; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    h[i] = (float)((int)(x % 17) - 8) / 8.0f;
  }
  a = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, h, &e);
  if (a) b = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, h, &e);
  if (b) c = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &e);
  if (!c) {
    s = ng_fail(e, "clCreateBuffer for the tuning matrices failed");
    goto done;
  }
  const double flop = 2.0 * (double)size * (double)size * (double)size;
  /* the baseline: whatever is active (a stored set, else CLBlast's own) */
  s = time_sgemm(queue, size, a, b, c, &out->default_ms);
  if (s != NG_SUCCESS) {
    s = ng_fail(NG_ERR_GEMM_FAILED, "the baseline SGEMM failed");
    goto done;
  }
  if ((e = clEnqueueReadBuffer(queue, c, CL_TRUE, 0, bytes, ref, 0, NULL, NULL)) != CL_SUCCESS) {
    s = ng_fail(e, "reading the baseline result failed");
    goto done;
  }
  double maxabs = 0;
  for (size_t i = 0; i < elems; i++) maxabs = fmax(maxabs, fabs(ref[i]));
  const size_t nc = xgemm_candidates(ctx, cand, 256);
  out->candidates = (unsigned)nc;
  out->best_ms = out->default_ms;
  snprintf(out->best, sizeof out->best, "baseline");
  size_t best = SIZE_MAX;
  for (size_t i = 0; i < nc; i++) {
    double ms = 0;
    if (!override_xgemm(ctx->device, cand[i]) ||
        time_sgemm(queue, size, a, b, c, &ms) != NG_SUCCESS ||
        clEnqueueReadBuffer(queue, c, CL_TRUE, 0, bytes, got, 0, NULL, NULL) != CL_SUCCESS) {
      out->rejected++;
      continue;
    }
    /* inputs are multiples of 1/8 below 1: every product and partial sum is exact in f32 up to
     * 2^24/64, so any summation order must give the same values */
    bool same = true;
    for (size_t k = 0; k < elems && same; k++)
      same = fabs(got[k] - ref[k]) <= 1e-6 * maxabs;
    if (!same) {
      out->rejected++;
      continue;
    }
    if (ms < out->best_ms) {
      out->best_ms = ms;
      best = i;
    }
  }
  out->default_tflops = flop / out->default_ms * 1e-9;
  out->best_tflops = flop / out->best_ms * 1e-9;
  /* leave the winner active (or the stored set, or the last candidate when CLBlast's own
   * defaults won: CLBlast cannot be asked for those back) */
  if (best != SIZE_MAX) {
    override_xgemm(ctx->device, cand[best]);
    format_xgemm(cand[best], out->best, sizeof out->best);
  } else if (ctx->xgemm[0]) {
    ng_gemm_apply_xgemm(ctx, ctx->xgemm);
  }
  if (store && best != SIZE_MAX && out->best_ms < 0.99 * out->default_ms) {
    char id[17], key[64], line[1024];
    ng_tuning_device_id(ctx, id);
    snprintf(key, sizeof key, "ng-clblast-1 %s Xgemm ", id);
    snprintf(line, sizeof line, "%s%s  # %s, SGEMM %zu^3: %.1f TFLOP/s vs %.1f before\n", key,
             out->best, ctx->info.name, size, out->best_tflops, out->default_tflops);
    s = ng_tuning_write_line(ctx, key, line);
    if (s == NG_SUCCESS) out->stored = 1;
  }
done:
  if (a) clReleaseMemObject(a);
  if (b) clReleaseMemObject(b);
  if (c) clReleaseMemObject(c);
  free(h);
  free(ref);
  free(got);
  free(cand);
  return s;
}
