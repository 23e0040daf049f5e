/* Launch rules that only NVIDIA's devices reach, checked on whatever device runs the tests (PoCL
 * in CI) by giving a context an H100's properties: 132 compute units, work-groups of up to 1024,
 * 48 KB of local memory, the shuffles and bf16 PTX. Nothing is built or run; the checks are of
 * ng_choose_row_launch_k's choice, which the H100 measurements in src/ng_internal.h set. The
 * kernels behind each choice are tested on a GPU (tools/split_tests.py). */
#include "ng_internal.h"
#include "ng_test.h"

#include <stdint.h>
#include <stdlib.h>

static ng_context *h100(void) {
  ng_test_env *env = ng_test_env_get();
  unsetenv("NORMGRAD_TUNE"); /* read at context creation */
  ng_context *c = NULL;
  NG_OK(ng_context_create(env->cl_ctx, env->device, &c));
  c->info.type = CL_DEVICE_TYPE_GPU;
  c->info.compute_units = 132;
  c->info.max_wg = 1024;
  c->info.local_mem = 48 * 1024;
  c->info.nv_shfl = c->info.nv_bf16 = true;
  return c;
}

/* RMSNorm's (NG_ROWS_FWD) and LayerNorm's (NG_ROWS_FWD_RAW16) bf16 forward with
 * NG_ROWS_FWD_128X4: rows of 257-384 vectors on 128 × 4 in calls of more rows than compute
 * units, a group a row; 256 × 2 otherwise. */
static void test_fwd_128x4(void **state) {
  (void)state;
  ng_context *c = h100();
  const int modes[] = {NG_ROWS_FWD | NG_ROWS_X16 | NG_ROWS_HOLD4 | NG_ROWS_256X4,
                       NG_ROWS_FWD_RAW16 | NG_ROWS_X16 | NG_ROWS_256X4};
  for (size_t m = 0; m < NG_ARRAY_LEN(modes); m++) {
    const int with = modes[m] | NG_ROWS_FWD_128X4;
    const size_t taken[] = {2056, 2176, 2504, 3072};
    for (size_t i = 0; i < NG_ARRAY_LEN(taken); i++) {
      const size_t rows = ((size_t)1 << 25) / taken[i];
      const ng_row_launch l = ng_choose_row_launch_k(c, NULL, rows, taken[i], true, with);
      assert_int_equal(l.wg, 128);
      assert_int_equal(l.reg_cols, 4);
      assert_int_equal(l.groups, rows); /* a group a row */
      /* without the flag (f16 rows, the fused add) the launch before it */
      const ng_row_launch o = ng_choose_row_launch_k(c, NULL, rows, taken[i], true, modes[m]);
      assert_int_equal(o.wg, 256);
      assert_int_equal(o.reg_cols, 2);
    }
    /* a row a compute unit or fewer, rows outside 257-384 vectors, 1-wide vectors: unchanged */
    const struct {
      size_t rows, n;
      bool vec_ok;
    } kept[] = {{132, 2560, true}, {1, 2560, true}, {16384, 2048, true}, {9362, 3584, true},
                {13107, 2560, false}};
    for (size_t i = 0; i < NG_ARRAY_LEN(kept); i++) {
      const ng_row_launch a =
          ng_choose_row_launch_k(c, NULL, kept[i].rows, kept[i].n, kept[i].vec_ok, with);
      const ng_row_launch b =
          ng_choose_row_launch_k(c, NULL, kept[i].rows, kept[i].n, kept[i].vec_ok, modes[m]);
      assert_int_equal(a.wg, b.wg);
      assert_int_equal(a.reg_cols, b.reg_cols);
      assert_int_equal(a.groups, b.groups);
    }
  }
  /* the backward never takes it (the flag belongs to the forward's mode) */
  const ng_row_launch b = ng_choose_row_launch_k(
      c, NULL, 15420, 2176, true, NG_ROWS_BWD_DW | NG_ROWS_X16 | NG_ROWS_FWD_128X4);
  assert_int_equal(b.wg, 256);
  assert_int_equal(b.reg_cols, 2);
  ng_context_release(c);
}

/* PolyNorm's backward (a persistent grid: rows = SIZE_MAX) with NG_ROWS_POLY_F16_3 and a
 * gradient: rows of 257-512 vectors on 3 groups a compute unit without the prefetch; 8 a unit
 * with it otherwise, the frozen pass and shorter rows as before. */
static void test_poly_f16_3(void **state) {
  (void)state;
  ng_context *c = h100();
  const int base = NG_ROWS_POLY_BWD | NG_ROWS_X16;
  const int grads[] = {NG_ROWS_POLY_DW, NG_ROWS_POLY_DB};
  const size_t taken[] = {2056, 3072, 4096};
  for (size_t g = 0; g < NG_ARRAY_LEN(grads); g++)
    for (size_t i = 0; i < NG_ARRAY_LEN(taken); i++) {
      const ng_row_launch l = ng_choose_row_launch_k(c, NULL, SIZE_MAX, taken[i], true,
                                                     base | grads[g] | NG_ROWS_POLY_F16_3);
      assert_int_equal(l.wg, 256);
      assert_int_equal(l.groups, 3 * 132);
      assert_false(l.prefetch);
      const ng_row_launch o =
          ng_choose_row_launch_k(c, NULL, SIZE_MAX, taken[i], true, base | grads[g]);
      assert_int_equal(o.wg, 256);
      assert_int_equal(o.groups, 8 * 132);
      if (grads[g] == NG_ROWS_POLY_DW) assert_true(o.prefetch);
    }
  /* the frozen pass (no gradient flag) and rows of at most 256 vectors keep their launch */
  const struct {
    size_t n;
    int mode;
  } kept[] = {{4096, base}, {2048, base | NG_ROWS_POLY_DW}, {1024, base | NG_ROWS_POLY_DB}};
  for (size_t i = 0; i < NG_ARRAY_LEN(kept); i++) {
    const ng_row_launch a = ng_choose_row_launch_k(c, NULL, SIZE_MAX, kept[i].n, true,
                                                   kept[i].mode | NG_ROWS_POLY_F16_3);
    const ng_row_launch b = ng_choose_row_launch_k(c, NULL, SIZE_MAX, kept[i].n, true,
                                                   kept[i].mode);
    assert_int_equal(a.wg, b.wg);
    assert_int_equal(a.groups, b.groups);
    assert_int_equal(a.prefetch, b.prefetch);
  }
  ng_context_release(c);
}

/* Earlier rules, as src/ng_internal.h and src/context.c describe them, so that a change to the
 * launch code that moves one shows here before it reaches a GPU. */
static void test_earlier_rules(void **state) {
  (void)state;
  ng_context *c = h100();
  const int x16 = NG_ROWS_X16;
  /* NG_ROWS_256X4: the forward of 16-bit rows of 513-1024 vectors, a group a row of 256 × 4
   * without the prefetch, in calls of more rows than compute units */
  ng_row_launch l =
      ng_choose_row_launch_k(c, NULL, 5461, 6144, true, NG_ROWS_FWD | x16 | NG_ROWS_256X4);
  assert_int_equal(l.wg, 256);
  assert_int_equal(l.reg_cols, 4);
  assert_int_equal(l.groups, 5461);
  assert_false(l.prefetch);
  l = ng_choose_row_launch_k(c, NULL, 100, 6144, true, NG_ROWS_FWD | x16 | NG_ROWS_256X4);
  assert_true(l.wg != 256 || l.reg_cols != 4);
  /* NG_ROWS_HOLD4: the forward of 16-bit rows of 2049-4096 vectors on 1024 × 4, 16 groups a
   * compute unit at most (a group a row here), without the prefetch */
  l = ng_choose_row_launch_k(c, NULL, 1365, 24576, true, NG_ROWS_FWD | x16 | NG_ROWS_HOLD4);
  assert_int_equal(l.wg, 1024);
  assert_int_equal(l.reg_cols, 4);
  assert_int_equal(l.groups, 1365);
  assert_false(l.prefetch);
  /* the frozen backward of 16-bit rows of 128-256 vectors: four rows a group, prefetching, at
   * least a wave; NG_ROWS_FULL1 (rows that fill the group, many rows): a group a row */
  l = ng_choose_row_launch_k(c, NULL, 32768, 1024, true, NG_ROWS_BWD_FROZEN | x16);
  assert_int_equal(l.wg, 128);
  assert_int_equal(l.reg_cols, 1);
  assert_int_equal(l.groups, 32768 / 4);
  assert_true(l.prefetch);
  l = ng_choose_row_launch_k(c, NULL, 32768, 1024, true, NG_ROWS_BWD_FROZEN | x16 | NG_ROWS_FULL1);
  assert_int_equal(l.groups, 32768);
  l = ng_choose_row_launch_k(c, NULL, 1000, 1024, true, NG_ROWS_BWD_FROZEN | x16 | NG_ROWS_FULL1);
  assert_int_equal(l.groups, 1000); /* a wave (2112 groups) capped at the rows */
  /* NG_ROWS_1K: 16-bit rows of 513-1024 vectors in the backward on 1024 × 1, a group a compute
   * unit, prefetching */
  for (int frozen = 0; frozen < 2; frozen++) {
    l = ng_choose_row_launch_k(c, NULL, 4096, 8192, true,
                               (frozen ? NG_ROWS_BWD_FROZEN : NG_ROWS_BWD_DW) | x16 | NG_ROWS_1K);
    assert_int_equal(l.wg, 1024);
    assert_int_equal(l.reg_cols, 1);
    assert_int_equal(l.groups, 132);
    assert_true(l.prefetch);
  }
  /* NG_ROWS_DW_NOPF: the backward with dW of 16-bit rows of 1025-2048 vectors keeps 512 × 4, a
   * group a compute unit, without the prefetch */
  l = ng_choose_row_launch_k(c, NULL, 2048, 16384, true, NG_ROWS_BWD_DW | x16 | NG_ROWS_DW_NOPF);
  assert_int_equal(l.wg, 512);
  assert_int_equal(l.reg_cols, 4);
  assert_int_equal(l.groups, 132);
  assert_false(l.prefetch);
  l = ng_choose_row_launch_k(c, NULL, 2048, 16384, true, NG_ROWS_BWD_DW | x16);
  assert_true(l.prefetch);
  ng_context_release(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fwd_128x4),
      cmocka_unit_test(test_poly_f16_3),
      cmocka_unit_test(test_earlier_rules),
  };
  return NG_RUN_GROUP_TESTS(tests, NULL, NULL);
}
