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
  if (st == CLBlastSuccess && from && done) ng_profile_record_span(from, done);
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
