/* SGEMM through CLBlast (src/gemm.c is the only file that includes clblast_c.h), and a planner
 * that splits one product into calls whose CLBlast temporary buffers stay small. Nothing here is
 * part of the API. */
#ifndef NG_GEMM_H
#define NG_GEMM_H

#include "ng_internal.h"

/* C[m×n] = alpha·op(A)·op(B) + beta·C, every matrix row-major with its leading dimension, offsets
 * in floats. col_major selects the equivalent column-major call Cᵀ = op(B)ᵀ·op(A)ᵀ (same memory,
 * same result, different CLBlast kernel layout requirements and so different temporaries). */
typedef struct ng_gemm {
  bool ta, tb, col_major;
  size_t m, n, k;
  float alpha, beta;
  cl_mem a, b, c;
  size_t a_off, lda, b_off, ldb, c_off, ldc;
} ng_gemm;

/* Bytes of temporary buffer CLBlast needs for `g` (CLBlastSGemmTempBufferSize). */
ng_status ng_gemm_temp_bytes(cl_command_queue q, const ng_gemm *g, size_t *bytes);

/* Enqueue `g` on the in-order queue `q` with `temp` as CLBlast's temporary buffer (required, so
 * CLBlast never allocates one of its own; CLBlast checks that its CL_MEM_SIZE suffices). The call
 * is recorded for ng_profile_* as one span, from a tiny fill of `temp` enqueued before it to its
 * last kernel. */
ng_status ng_gemm_enqueue(cl_command_queue q, const ng_gemm *g, cl_mem temp);

/* ---- splitting a product along one dimension ----------------------------------------------- */
typedef enum ng_gemm_dim { NG_GEMM_M = 0, NG_GEMM_N = 1, NG_GEMM_K = 2 } ng_gemm_dim;
typedef enum ng_gemm_operand { NG_GEMM_A = 0, NG_GEMM_B = 1, NG_GEMM_C = 2 } ng_gemm_operand;

/* The sub-product of `g` over [start, start+len) of `dim` (offsets advanced; a K-block after
 * the first adds into C: beta 1). */
ng_gemm ng_gemm_sub(const ng_gemm *g, ng_gemm_dim dim, size_t start, size_t len);
/* Elements of `g` along `dim`. */
size_t ng_gemm_extent(const ng_gemm *g, ng_gemm_dim dim);

/* True when CLBlast would copy operand `which` of `g` into its temporary buffer: the temp size
 * grows when that operand's offset is made non-zero exactly when it was not copied before (an
 * operand with an offset is always copied by the indirect kernel; the direct kernel copies
 * nothing). */
ng_status ng_gemm_copies(cl_command_queue q, const ng_gemm *g, ng_gemm_operand which,
                         bool *copies);

/* A product split into CLBlast calls so that the `big` operand (the one whose copy would be as
 * large as the weight) is either not copied at all or copied one block at a time:
 *   1. the whole product, in whichever layout does not copy `big`;
 *   2. else a leading part of `align` multiples along `dim` that does not copy `big`, then the
 *      rest in blocks of at most `block`;
 *   3. else (or when force_blocks) blocks of at most `block` from the start.
 * Each call uses the layout with the smaller temporary. */
typedef struct ng_gemm_plan {
  ng_gemm *calls;
  size_t count;
  size_t temp_bytes; /* largest temporary of any call */
  int strategy;      /* 1, 2 or 3 as above */
} ng_gemm_plan;

ng_status ng_gemm_plan_split(cl_command_queue q, const ng_gemm *whole, ng_gemm_dim dim,
                             ng_gemm_operand big, size_t block, size_t align, bool force_blocks,
                             ng_gemm_plan *out);
void ng_gemm_plan_free(ng_gemm_plan *p);
/* Re-point a plan made for other buffers/offsets at new ones: every call's offsets are shifted by
 * the same amounts (used to run one chunk's plan on the next chunk). */
void ng_gemm_plan_shift(ng_gemm_plan *p, ptrdiff_t da, ptrdiff_t db, ptrdiff_t dc);

/* ---- FLCE's calls (src/ops/flce.c), for the test that proves its temporaries bounded ------- */
/* Every CLBlast call ng_flce would make, in order, with which product it belongs to (0 logits,
 * 1 dinput, 2 dweight). The scratch buffer appears as a placeholder handle (offsets are real).
 * Caller frees *calls and *which. */
ng_status ng_flce_list_gemms(ng_context *ctx, cl_command_queue queue, const ng_flce_params *p,
                             const ng_flce_tensors *t, unsigned flags, ng_gemm **calls,
                             int **which, size_t *count, size_t *v_block, size_t *chunk);

#endif
