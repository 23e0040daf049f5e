/* Double-precision reference for fused linear + cross-entropy: it materializes the [bt, v]
 * logits (small shapes only) and follows torch.nn.functional.cross_entropy term by term. */
#ifndef REF_FLCE_H
#define REF_FLCE_H

#include "normgrad.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ref_flce {
  size_t bt, h, v;
  int64_t ignore_index;
  double label_smoothing, softcap, lse_square_scale;
  ng_reduction reduction;
  const float *bias;        /* [v] or NULL */
  const float *ce_weight;   /* [v] or NULL */
  const float *grad_output; /* [bt] for none; [1] or NULL (then go_scalar) for mean/sum */
  double go_scalar;
} ref_flce;

typedef struct ref_flce_out {
  /* out_n = bt for none, else 1 */
  double *loss, *z_loss, *accuracy; /* [out_n] */
  double *dinput;                   /* [bt·h]  */
  double *dweight;                  /* [v·h]   */
  double *dbias;                    /* [v]     */
  /* tolerance scales: Σ of |the terms| forming each gradient element (g's own terms included, as
   * they cancel under label smoothing), and the largest Σ_k |x·w| + |b| of any logit */
  double *dinput_scale, *dweight_scale, *dbias_scale; /* same shapes, may be NULL */
  double logit_scale;                                  /* max over rows and classes */
} ref_flce_out;

/* x [bt·h] and w [v·h] as the device sees them (already rounded to their dtypes); any output
 * pointer may be NULL. Gradients are the op's (grad_output folded in), before any rounding. */
void ref_flce_run(const ref_flce *p, const float *x, const float *w, const int64_t *target,
                  ref_flce_out *out);

/* The loss alone (the value torch returns: mean/sum scalar, or Σ of the per-row values for none
 * weighted by grad_output) — what the gradients are the gradient of. */
double ref_flce_objective(const ref_flce *p, const double *x, const double *w, const double *bias,
                          const int64_t *target);

#endif
