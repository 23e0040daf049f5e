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
 * launch code that moves one shows here before it reaches a GPU (with test_more_rules, every
 * NG_ROWS_* rule of ng_choose_row_launch_k is checked at least once). */
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

/* The rest of the rules: grids and prefetch of the forward and the frozen backward, shapes of
 * the backward, the one-slot rules of f32 and f16 rows. */
static void test_more_rules(void **state) {
  (void)state;
  ng_context *c = h100();
  const int x16 = NG_ROWS_X16, fwd = NG_ROWS_FWD, frz = NG_ROWS_BWD_FROZEN, dw = NG_ROWS_BWD_DW;
  ng_row_launch l;
  /* NG_ROWS_PAIRS_1K: two rows a group, prefetching, at least a wave (1056 groups of 256) */
  l = ng_choose_row_launch_k(c, NULL, 8192, 4096, true, fwd | x16 | NG_ROWS_PAIRS_1K);
  assert_int_equal(l.wg, 256);
  assert_int_equal(l.reg_cols, 2);
  assert_int_equal(l.groups, 4096);
  assert_true(l.prefetch);
  l = ng_choose_row_launch_k(c, NULL, 1000, 4096, true, fwd | x16 | NG_ROWS_PAIRS_1K);
  assert_int_equal(l.grid, 1056);
  /* NG_ROWS_PAIRS takes rows of up to 512 vectors, NG_ROWS_PAIRS_1K up to 1024 */
  l = ng_choose_row_launch_k(c, NULL, 8192, 4096, true, fwd | x16 | NG_ROWS_PAIRS);
  assert_int_equal(l.groups, 4096);
  l = ng_choose_row_launch_k(c, NULL, 100, 8192, true, fwd | x16 | NG_ROWS_PAIRS);
  assert_int_equal(l.groups, 100);
  l = ng_choose_row_launch_k(c, NULL, 100, 8192, true, fwd | x16 | NG_ROWS_PAIRS_1K);
  assert_int_equal(l.grid, 528); /* a wave of groups of 512, capped at the rows */
  /* without a rule, rows of at most 512 vectors a group a row, no prefetch */
  l = ng_choose_row_launch_k(c, NULL, 8192, 4096, true, fwd | x16);
  assert_int_equal(l.groups, 8192);
  assert_false(l.prefetch);
  /* NG_ROWS_W256: rows of 225-256 vectors on 256 × 1 */
  l = ng_choose_row_launch_k(c, NULL, 16384, 2048, true, fwd | x16 | NG_ROWS_W256);
  assert_int_equal(l.wg, 256);
  assert_int_equal(l.reg_cols, 1);
  l = ng_choose_row_launch_k(c, NULL, 16384, 1792, true, fwd | x16 | NG_ROWS_W256);
  assert_int_equal(l.wg, 128);
  /* NG_ROWS_512X4 (1025-2048 vectors) a group a row; NG_ROWS_512X2 (1024 vectors) 16 a unit;
   * neither in calls of at most a row a compute unit */
  l = ng_choose_row_launch_k(c, NULL, 2048, 16384, true, fwd | x16 | NG_ROWS_512X4);
  assert_int_equal(l.wg, 512);
  assert_int_equal(l.reg_cols, 4);
  assert_int_equal(l.groups, 2048);
  assert_false(l.prefetch);
  l = ng_choose_row_launch_k(c, NULL, 4096, 8192, true, fwd | x16 | NG_ROWS_256X4 | NG_ROWS_512X2);
  assert_int_equal(l.wg, 512);
  assert_int_equal(l.reg_cols, 2);
  assert_int_equal(l.groups, 16 * 132);
  assert_false(l.prefetch);
  l = ng_choose_row_launch_k(c, NULL, 132, 8192, true, fwd | x16 | NG_ROWS_256X4 | NG_ROWS_512X2);
  assert_true(l.wg != 512 || l.reg_cols != 2 || l.groups != 132 || l.prefetch);
  /* NG_ROWS_MANY: the frozen backward of rows of 513-1024 vectors 16 groups a unit, prefetching;
   * NG_ROWS_MANY_2K: a group a row up to 1024 vectors, 16 a unit without the prefetch beyond;
   * NG_ROWS_MANY_512: rows of 257-512 vectors 8 a unit without it */
  l = ng_choose_row_launch_k(c, NULL, 4096, 8192, true, frz | x16 | NG_ROWS_MANY);
  assert_int_equal(l.groups, 16 * 132);
  assert_true(l.prefetch);
  l = ng_choose_row_launch_k(c, NULL, 4096, 8192, true, frz | x16 | NG_ROWS_MANY | NG_ROWS_MANY_2K);
  assert_int_equal(l.groups, 4096);
  l = ng_choose_row_launch_k(c, NULL, 4096, 16384, true,
                             frz | x16 | NG_ROWS_MANY | NG_ROWS_MANY_2K);
  assert_int_equal(l.groups, 16 * 132);
  assert_false(l.prefetch);
  l = ng_choose_row_launch_k(c, NULL, 8192, 4096, true,
                             frz | x16 | NG_ROWS_MANY | NG_ROWS_MANY_512);
  assert_int_equal(l.groups, 8 * 132);
  assert_false(l.prefetch);
  /* NG_ROWS_ONE: the frozen backward held four vectors a work-item, a group a compute unit */
  l = ng_choose_row_launch_k(c, NULL, 2048, 16384, true, frz | x16 | NG_ROWS_ONE);
  assert_int_equal(l.reg_cols, 4);
  assert_int_equal(l.groups, 132);
  /* the backward with dW: about 1024 work-items a unit; NG_ROWS_FEW three quarters of them */
  l = ng_choose_row_launch_k(c, NULL, 32768, 1024, true, dw | x16);
  assert_int_equal(l.wg, 128);
  assert_int_equal(l.groups, 8 * 132);
  l = ng_choose_row_launch_k(c, NULL, 32768, 1024, true, dw | x16 | NG_ROWS_FEW);
  assert_int_equal(l.groups, 6 * 132);
  /* NG_ROWS_FIT2: rows of 513-768 vectors on groups of half the row rounded up to a warp, two
   * vectors each, two groups a unit with dW, in calls of more than 8 rows a unit */
  l = ng_choose_row_launch_k(c, NULL, 5461, 6144, true, dw | x16 | NG_ROWS_FIT2);
  assert_int_equal(l.wg, 384);
  assert_int_equal(l.reg_cols, 2);
  assert_int_equal(l.groups, 2 * 132);
  l = ng_choose_row_launch_k(c, NULL, 1000, 6144, true, dw | x16 | NG_ROWS_FIT2);
  assert_int_equal(l.wg, 512);
  /* NG_ROWS_FIT2_640: rows of 513-640 vectors alike, in calls of more than 16 rows a unit */
  l = ng_choose_row_launch_k(c, NULL, 7281, 4608, true, dw | x16 | NG_ROWS_FIT2_640);
  assert_int_equal(l.wg, 288);
  assert_int_equal(l.reg_cols, 2);
  l = ng_choose_row_launch_k(c, NULL, 2000, 4608, true, dw | x16 | NG_ROWS_FIT2_640);
  assert_int_equal(l.wg, 512);
  l = ng_choose_row_launch_k(c, NULL, 5461, 6144, true, dw | x16 | NG_ROWS_FIT2_640);
  assert_int_equal(l.wg, 512);
  /* one slot a work-item: f32 rows past 768 (NG_ROWS_F32_1SLOT) or 512 vectors (_512), f16
   * backward rows past 1280 (NG_ROWS_F16_1SLOT), f32 forward rows of 769-1024
   * (NG_ROWS_F32_STREAM_1K) */
  l = ng_choose_row_launch_k(c, NULL, 4096, 8192, true, dw | NG_ROWS_F32_1SLOT);
  assert_int_equal(l.reg_cols, 1);
  l = ng_choose_row_launch_k(c, NULL, 4096, 6144, true, dw | NG_ROWS_F32_1SLOT);
  assert_int_equal(l.reg_cols, 2);
  l = ng_choose_row_launch_k(c, NULL, 4096, 6144, true, fwd | NG_ROWS_F32_1SLOT_512);
  assert_int_equal(l.reg_cols, 1);
  l = ng_choose_row_launch_k(c, NULL, 2048, 16384, true, dw | x16 | NG_ROWS_F16_1SLOT);
  assert_int_equal(l.reg_cols, 1);
  l = ng_choose_row_launch_k(c, NULL, 4096, 10240, true, dw | x16 | NG_ROWS_F16_1SLOT);
  assert_int_equal(l.reg_cols, 4);
  l = ng_choose_row_launch_k(c, NULL, 4096, 8192, true, fwd | NG_ROWS_F32_STREAM_1K);
  assert_int_equal(l.reg_cols, 1);
  l = ng_choose_row_launch_k(c, NULL, 2048, 16384, true, fwd | NG_ROWS_F32_STREAM_1K);
  assert_int_equal(l.reg_cols, 2);
  /* PolyNorm's backward: the prefetch with dW for 128-512 vectors, with dB alone 128-256 */
  const int poly = NG_ROWS_POLY_BWD | x16;
  const struct {
    size_t n;
    int flag;
    bool prefetch;
  } pf[] = {{4096, NG_ROWS_POLY_DW, true},
            {2048, NG_ROWS_POLY_DB, true},
            {4096, NG_ROWS_POLY_DB, false},
            {4096, 0, false}};
  for (size_t i = 0; i < NG_ARRAY_LEN(pf); i++)
    assert_int_equal(
        ng_choose_row_launch_k(c, NULL, SIZE_MAX, pf[i].n, true, poly | pf[i].flag).prefetch,
        pf[i].prefetch);
  ng_context_release(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fwd_128x4),
      cmocka_unit_test(test_poly_f16_3),
      cmocka_unit_test(test_earlier_rules),
      cmocka_unit_test(test_more_rules),
  };
  return NG_RUN_GROUP_TESTS(tests, NULL, NULL);
}
