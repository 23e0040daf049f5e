/* ng_prebuild: get every program an op family can use on a device, so that later calls (and,
 * through the disk cache, later processes) compile nothing.
 *
 * Each op family enumerates its own variants in its src/ops file, with the same option builders
 * its launch path uses:
 *     ng_status ng_<op>_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user);
 * calling fn(ctx, program, opts, user) once per (program, options) that the op's launch choice
 * can produce on ctx's device (duplicates are fine). A new op plugs in by defining that function
 * and adding one line to NG_PREBUILD_OPS below, under its normgrad-cli name. */
#include "ng_internal.h"

#include <stdlib.h>
#include <string.h>

#define NG_PREBUILD_OPS(X)                                                                       \
  X("rmsnorm", ng_rmsnorm_for_each_variant)                                                      \
  X("fused-add-rmsnorm", ng_fused_add_rmsnorm_for_each_variant)                                  \
  X("layernorm", ng_layernorm_for_each_variant)                                                  \
  X("groupnorm", ng_groupnorm_for_each_variant)                                                  \
  X("polynorm", ng_polynorm_for_each_variant)

#define NG_DECLARE_(cli_name, fn) ng_status fn(ng_context *ctx, ng_variant_fn f, void *user);
NG_PREBUILD_OPS(NG_DECLARE_)
#undef NG_DECLARE_

typedef struct prebuild_op {
  const char *name;
  ng_status (*for_each)(ng_context *ctx, ng_variant_fn fn, void *user);
} prebuild_op;

static const prebuild_op ops[] = {
#define NG_ROW_(cli_name, fn) {cli_name, fn},
    NG_PREBUILD_OPS(NG_ROW_)
#undef NG_ROW_
};

/* Distinct (program, options) seen, so the count does not depend on how ops overlap. */
typedef struct seen {
  char **keys;
  unsigned n, cap;
} seen;

static ng_status get_one(ng_context *ctx, const char *program, const ng_opts *opts, void *user) {
  seen *sn = user;
  const size_t len = strlen(program) + 1 + opts->len + 1;
  char *k = malloc(len);
  if (!k) return ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "prebuild list");
  memcpy(k, program, strlen(program));
  k[strlen(program)] = '\n';
  memcpy(k + strlen(program) + 1, opts->text, opts->len + 1);
  for (unsigned i = 0; i < sn->n; i++)
    if (strcmp(sn->keys[i], k) == 0) {
      free(k);
      return NG_SUCCESS;
    }
  if (sn->n == sn->cap) {
    unsigned nc = sn->cap ? sn->cap * 2 : 64;
    char **nk = realloc(sn->keys, nc * sizeof *nk);
    if (!nk) {
      free(k);
      return ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "prebuild list");
    }
    sn->keys = nk;
    sn->cap = nc;
  }
  sn->keys[sn->n++] = k;
  cl_program p;
  return ng_get_program(ctx, program, opts, &p);
}

ng_status ng_prebuild(ng_context *ctx, const char *op, unsigned *programs) {
  ng_clear_detail();
  if (programs) *programs = 0;
  if (!ctx) return ng_fail(NG_ERR_NULL_HANDLE, "ctx is NULL");
  bool known = op == NULL;
  for (size_t i = 0; i < NG_ARRAY_LEN(ops); i++) known = known || strcmp(op, ops[i].name) == 0;
  if (!known) return ng_fail(NG_ERR_INVALID_VALUE, "no op named '%s' to prebuild", op);
  seen sn = {NULL, 0, 0};
  ng_status s = NG_SUCCESS;
  for (size_t i = 0; i < NG_ARRAY_LEN(ops) && s == NG_SUCCESS; i++)
    if (!op || strcmp(op, ops[i].name) == 0) s = ops[i].for_each(ctx, get_one, &sn);
  if (programs) *programs = sn.n;
  for (unsigned i = 0; i < sn.n; i++) free(sn.keys[i]);
  free(sn.keys);
  return s;
}

const char *ng_prebuild_op_name(unsigned i) {
  return i < NG_ARRAY_LEN(ops) ? ops[i].name : NULL;
}
