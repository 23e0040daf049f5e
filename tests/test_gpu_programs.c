/* Programs of GPU launch shapes, built on whatever device runs the tests (PoCL in CI): every
 * kernel in them fits the local memory of a GPU with 64 KB (AMD's and Intel's), or with the
 * device's own where that is less (NVIDIA's 48 KB), although the device here may offer more.
 *
 * A program holds every kernel of its .cl file that its options leave in, launched or not, and a
 * driver that checks local memory at build time refuses the whole program when any one kernel
 * exceeds it. The local arrays grow with the launch (WG·REG·VEC), so the programs checked are
 * those of each op's widest launches of bf16 rows and f32 weights, held and split across groups,
 * and the split ones of f32 and f16 rows, as the ops' own variant lists give them for an
 * emulated 132-unit GPU. Also: the host's copy of a kernel default that selects programs, and
 * the split kernels' slices as the header computes them. */
#include "ng_internal.h"
#include "ng_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPU_LOCAL_MEM 65536u /* at most; less where the device has less */

ng_status ng_rmsnorm_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user);
ng_status ng_fused_add_rmsnorm_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user);
ng_status ng_layernorm_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user);
ng_status ng_polynorm_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user);
ng_status ng_groupnorm_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user);

/* The value of -DNAME=… in o, or `dflt` when o does not set it. */
static long long opt_value(const ng_opts *o, const char *name, long long dflt) {
  char key[64];
  snprintf(key, sizeof key, "-D%s=", name);
  const char *p = strstr(o->text, key);
  while (p && p != o->text && p[-1] != ' ') p = strstr(p + 1, key);
  return p ? strtoll(p + strlen(key), NULL, 10) : dflt;
}

typedef struct checked {
  cl_ulong local_mem; /* the emulated GPU's */
  char keys[256][520];
  int n;       /* distinct programs built */
  int widest;  /* of those, programs of the widest launch shape seen (WG·REG = 2048) */
  int split;   /* of those, programs of rows split across groups */
  unsigned long max_local; /* the most local memory one kernel took */
} checked;

static ng_status check_program(ng_context *ctx, const char *program, const ng_opts *o,
                               void *user) {
  checked *ck = user;
  /* f32 weights (or none), the widest vectors, and work-groups of 256 and more */
  if (opt_value(o, "W_DTYPE", NG_F32) != NG_F32 || opt_value(o, "G_DTYPE", NG_F32) != NG_F32 ||
      opt_value(o, "B_DTYPE", NG_F32) != NG_F32 || opt_value(o, "VEC", 0) != 8 ||
      opt_value(o, "WG", 0) < 256)
    return NG_SUCCESS;
  const bool widest = opt_value(o, "WG", 0) * opt_value(o, "REG", 1) >= 2048;
  const bool split = opt_value(o, "RMS_BWD_COOP", 0) || opt_value(o, "LN_BWD_COOP", 0) ||
                     opt_value(o, "LN_FWD_COOP", 0) ||
                     (!strcmp(program, "polynorm") && opt_value(o, "REG", 0));
  /* bf16 rows; split programs of f32 and f16 rows too (f32 slices hold half the vectors, or
   * in a forward as many, of wider values), those with every gradient, which hold the most
   * local memory (each costs PoCL seconds to build) */
  const long long xd = opt_value(o, "DTYPE", -1);
  if (xd != NG_BF16 && !(split && (xd == NG_F32 || xd == NG_F16) &&
                         opt_value(o, "COMPUTE_DW", 1) && opt_value(o, "COMPUTE_DB", 1)))
    return NG_SUCCESS;
  /* the backward programs of the widest held launches, and every split program */
  if (!split && !(widest && opt_value(o, "COMPUTE_DW", -1) >= 0)) return NG_SUCCESS;
  char key[520];
  snprintf(key, sizeof key, "%s|%s", program, o->text);
  for (int i = 0; i < ck->n; i++)
    if (!strcmp(ck->keys[i], key)) return NG_SUCCESS;
  assert_true(ck->n < 256);
  snprintf(ck->keys[ck->n++], sizeof ck->keys[0], "%s", key);
  ck->widest += widest;
  ck->split += split;

  cl_program prog;
  ng_status s = ng_get_program(ctx, program, o, &prog);
  if (s != NG_SUCCESS)
    fail_msg("%s '%s': %s (%s)", program, o->text, ng_status_name(s), ng_last_error_detail());
  cl_uint nk = 0;
  assert_int_equal(clCreateKernelsInProgram(prog, 0, NULL, &nk), CL_SUCCESS);
  assert_true(nk > 0);
  cl_kernel *ks = calloc(nk, sizeof *ks);
  assert_non_null(ks);
  assert_int_equal(clCreateKernelsInProgram(prog, nk, ks, NULL), CL_SUCCESS);
  for (cl_uint i = 0; i < nk; i++) {
    cl_ulong lm = 0;
    char name[128] = "";
    assert_int_equal(clGetKernelWorkGroupInfo(ks[i], ng_test_env_get()->device,
                                              CL_KERNEL_LOCAL_MEM_SIZE, sizeof lm, &lm, NULL),
                     CL_SUCCESS);
    clGetKernelInfo(ks[i], CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
    if (lm > ck->max_local) ck->max_local = (unsigned long)lm;
    if (lm > ck->local_mem)
      fail_msg("%s in %s '%s' takes %lu bytes of local memory, over %lu", name, program, o->text,
               (unsigned long)lm, (unsigned long)ck->local_mem);
    clReleaseKernel(ks[i]);
  }
  free(ks);
  return NG_SUCCESS;
}

static void test_local_memory_fits(void **state) {
  (void)state;
  ng_test_env *env = ng_test_env_get();
  ng_context *c = NULL;
  NG_OK(ng_context_create(env->cl_ctx, env->device, &c));
  /* the launch choice reads only these facts: a large GPU with at most 64 KB of local memory; the
   * split rows are asked for as on any GPU with NG_TUNE_FUSED_REDUCE = 2 (no PTX: nv_shfl off) */
  c->info.type = CL_DEVICE_TYPE_GPU;
  c->info.compute_units = 132;
  c->info.max_wg = 1024;
  if (c->info.local_mem > GPU_LOCAL_MEM) c->info.local_mem = GPU_LOCAL_MEM;
  c->info.nv_shfl = c->info.nv_bf16 = false;
  c->fused_reduce = 2;
  static checked ck;
  memset(&ck, 0, sizeof ck);
  ck.local_mem = c->info.local_mem;
  NG_OK(ng_rmsnorm_for_each_variant(c, check_program, &ck));
  NG_OK(ng_fused_add_rmsnorm_for_each_variant(c, check_program, &ck));
  NG_OK(ng_layernorm_for_each_variant(c, check_program, &ck));
  NG_OK(ng_polynorm_for_each_variant(c, check_program, &ck));
  NG_OK(ng_groupnorm_for_each_variant(c, check_program, &ck));
  print_message("%d programs, %d of 512 x 4 launches, %d split; at most %lu bytes a kernel, "
                "of %lu\n",
                ck.n, ck.widest, ck.split, ck.max_local, (unsigned long)ck.local_mem);
  /* the checks reached the shapes they are for */
  assert_true(ck.widest >= 8);
  assert_true(ck.split >= 8);
  ng_context_release(c);
}

/* The shared header's text (ng_common.clh as the library builds it), malloc'ed. */
static char *common_header(void) {
  ng_source src;
  NG_OK(ng_source_get("rmsnorm", &src));
  char *hdr = malloc(src.lens[0] + 1);
  assert_non_null(hdr);
  memcpy(hdr, src.parts[0], src.lens[0]);
  hdr[src.lens[0]] = '\0';
  ng_source_free(&src);
  return hdr;
}

/* The host keeps the kernels' own CPU prefetch distance (NG_PF_FAR in ng_common.clh) as
 * NG_CPU_PF_DEFAULT, so that a launch asking for that distance adds no build option and shares
 * the default's program: the two must stay equal. */
static void test_prefetch_default(void **state) {
  (void)state;
  char *hdr = common_header();
  const char *key = "#define NG_PF_FAR ";
  const char *p = strstr(hdr, key);
  assert_non_null(p);
  assert_int_equal(strtoll(p + strlen(key), NULL, 10), NG_CPU_PF_DEFAULT);
  assert_null(strstr(p + 1, key)); /* one definition */
  free(hdr);
}

/* The split kernels' slices (ng_coop_width, NG_COOP_PLACE in ng_common.clh), computed by the
 * header's own code built on this device, for every row of up to 16 slices of WG·REG vectors
 * (NG_COOP_MAX_SLICES): the S slices of a row cover it, the last one is not empty, none is wider
 * than the group's WG·REG vectors (each work-item reaches its slice's vectors c0 + q·WG, q <
 * REG), and on a group of whole warps each starts on a 32-vector bound; under NG_COOP_WHOLE
 * every slice is WG·REG. A CPU never runs the split kernels, so this is their slicing's check
 * off a GPU. */
static void check_widths(const char *hdr, unsigned wg, unsigned reg, int whole) {
  ng_test_env *env = ng_test_env_get();
  static const char probe[] =
      "__kernel void coop_width_probe(__global uint *out) {\n"
      "  const uint nv = get_global_id(0) + 1, S = (nv + WG * REG - 1) / (WG * REG);\n"
      "  out[get_global_id(0)] = ng_coop_width(nv, S);\n"
      "}\n";
  const char *parts[2] = {hdr, probe};
  cl_int err;
  cl_program prog = clCreateProgramWithSource(env->cl_ctx, 2, parts, NULL, &err);
  assert_int_equal(err, CL_SUCCESS);
  char opts[160];
  /* WG and REG as a split launch's build sets them; DTYPE bf16 as any program's */
  snprintf(opts, sizeof opts, "-DNG_OPENCL=1 -DDTYPE=2 -DVEC=8 -DWG=%u -DREG=%u -DNG_COOP_WHOLE=%d",
           wg, reg, whole);
  err = clBuildProgram(prog, 1, &env->device, opts, NULL, NULL);
  if (err != CL_SUCCESS) {
    char log[4096] = "";
    clGetProgramBuildInfo(prog, env->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    fail_msg("probe build (%s): %d\n%s", opts, err, log);
  }
  cl_kernel k = clCreateKernel(prog, "coop_width_probe", &err);
  assert_int_equal(err, CL_SUCCESS);
  const size_t count = (size_t)16 * wg * reg;
  cl_mem out = clCreateBuffer(env->cl_ctx, CL_MEM_WRITE_ONLY, count * sizeof(cl_uint), NULL, &err);
  assert_int_equal(err, CL_SUCCESS);
  assert_int_equal(clSetKernelArg(k, 0, sizeof out, &out), CL_SUCCESS);
  assert_int_equal(clEnqueueNDRangeKernel(env->queue, k, 1, NULL, &count, NULL, 0, NULL, NULL),
                   CL_SUCCESS);
  cl_uint *w = malloc(count * sizeof *w);
  assert_non_null(w);
  assert_int_equal(clEnqueueReadBuffer(env->queue, out, CL_TRUE, 0, count * sizeof *w, w, 0, NULL,
                                       NULL),
                   CL_SUCCESS);
  const size_t cover = (size_t)wg * reg;
  for (size_t i = 0; i < count; i++) {
    const size_t nv = i + 1, S = (nv + cover - 1) / cover, sw = w[i];
    const bool ok = whole ? sw == cover
                          : sw <= cover && S * sw >= nv && (S - 1) * sw < nv &&
                                (wg % 32 != 0 || sw % 32 == 0);
    if (!ok)
      fail_msg("WG %u REG %u whole %d: nv %zu in %zu slices of %zu", wg, reg, whole, nv, S, sw);
  }
  free(w);
  clReleaseMemObject(out);
  clReleaseKernel(k);
  clReleaseProgram(prog);
}

static void test_coop_width(void **state) {
  (void)state;
  char *hdr = common_header();
  check_widths(hdr, 256, 4, 0); /* the split forwards' and most backwards' slices */
  check_widths(hdr, 256, 2, 0); /* RMSNorm's and LayerNorm's bf16 backward */
  check_widths(hdr, 48, 3, 0);  /* a group of no whole warps (an override's size) */
  check_widths(hdr, 256, 2, 1); /* NG_COOP_WHOLE */
  free(hdr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_local_memory_fits),
      cmocka_unit_test(test_prefetch_default),
      cmocka_unit_test(test_coop_width),
  };
  int r = NG_RUN_GROUP_TESTS(tests, NULL, NULL);
  ng_test_env_release();
  return r;
}
