/* Launch rules that only NVIDIA's devices reach, checked on whatever device runs the tests (PoCL
 * in CI) by giving a context an H100's properties: 132 compute units, work-groups of up to 1024,
 * 48 KB of local memory, the shuffles and bf16 PTX (and an H100's name, or an H200's for the
 * built-in table). Nothing is built or run; the checks are of
 * ng_choose_row_launch_k's choice, which the H100 measurements in src/ng_internal.h set. The
 * kernels behind each choice are tested on a GPU (tools/split_tests.py). */
#include "ng_internal.h"
#include "ng_test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ng_context *h100(void) {
  ng_test_env *env = ng_test_env_get();
  unsetenv("NORMGRAD_TUNE"); /* read at context creation */
  ng_context *c = NULL;
  NG_OK(ng_context_create(env->cl_ctx, env->device, &c));
  /* the built-in table keys on the name: an H200 running the tests must not look like itself */
  ng_test_as_nvidia(c, "NVIDIA H100 80GB HBM3");
  return c;
}

/* RMSNorm's and the fused add's (NG_ROWS_FWD) and LayerNorm's (NG_ROWS_FWD_RAW16) 16-bit forward
 * with NG_ROWS_FWD_128X4: rows of 257-384 vectors on 128 × 4 in calls of more rows
 * than compute units, a group a row; 256 × 2 otherwise. */
static void test_fwd_128x4(void **state) {
  (void)state;
  ng_context *c = h100();
  const ng_rows_mode modes[] = {NG_ROWS_FWD | NG_ROWS_X16 | NG_ROWS_HOLD4 | NG_ROWS_256X4,
                                NG_ROWS_FWD_RAW16 | NG_ROWS_X16 | NG_ROWS_256X4,
                                /* the fused add's */
                                NG_ROWS_FWD | NG_ROWS_256X4 | NG_ROWS_W256 | NG_ROWS_512X4 |
                                    NG_ROWS_512X2};
  for (size_t m = 0; m < NG_ARRAY_LEN(modes); m++) {
    const ng_rows_mode with = modes[m] | NG_ROWS_FWD_128X4;
    const size_t taken[] = {2056, 2176, 2504, 3072};
    for (size_t i = 0; i < NG_ARRAY_LEN(taken); i++) {
      const size_t rows = ((size_t)1 << 25) / taken[i];
      const ng_row_launch l = ng_choose_row_launch(c, rows, taken[i], true, with);
      assert_int_equal(l.wg, 128);
      assert_int_equal(l.reg_cols, 4);
      assert_int_equal(l.groups, rows); /* a group a row */
      /* without the flag, the launch before it */
      const ng_row_launch o = ng_choose_row_launch(c, rows, taken[i], true, modes[m]);
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
          ng_choose_row_launch(c, kept[i].rows, kept[i].n, kept[i].vec_ok, with);
      const ng_row_launch b =
          ng_choose_row_launch(c, kept[i].rows, kept[i].n, kept[i].vec_ok, modes[m]);
      assert_int_equal(a.wg, b.wg);
      assert_int_equal(a.reg_cols, b.reg_cols);
      assert_int_equal(a.groups, b.groups);
    }
  }
  /* the backward never takes it (the flag belongs to the forward's mode) */
  const ng_row_launch b =
      ng_choose_row_launch(c, 15420, 2176, true, NG_ROWS_BWD_DW | NG_ROWS_X16 | NG_ROWS_FWD_128X4);
  assert_int_equal(b.wg, 256);
  assert_int_equal(b.reg_cols, 2);
  ng_context_release(c);
}

/* RMSNorm's backward (NG_ROWS_HALF_MID, rows of 257-448 vectors) and LayerNorm's
 * (NG_ROWS_HALF_MID_320, 257-320), 16-bit: in calls of more than 16 rows a compute unit, groups
 * of half the row rounded up to a warp (160, 192 or 224 work-items) of two vectors each, with
 * dW four a compute unit (RMSNorm's rows of up to 288 vectors) or three, frozen a group a row,
 * the same shape in both passes; 256 × 2 otherwise. PolyNorm's forward takes the shape too, in
 * calls of more than 8 rows a unit, and its backward in every call. */
static void test_half_mid(void **state) {
  (void)state;
  ng_context *c = h100();
  const struct {
    ng_rows_mode flag;
    size_t n, wg; /* wg 0: not taken */
  } cases[] = {{NG_ROWS_HALF_MID, 2056, 160},     {NG_ROWS_HALF_MID, 2176, 160},
               {NG_ROWS_HALF_MID, 2304, 160},     {NG_ROWS_HALF_MID, 2312, 160},
               {NG_ROWS_HALF_MID, 2560, 160},     {NG_ROWS_HALF_MID, 2568, 192},
               {NG_ROWS_HALF_MID, 3072, 192},     {NG_ROWS_HALF_MID, 3080, 224},
               {NG_ROWS_HALF_MID, 3584, 224},     {NG_ROWS_HALF_MID, 3592, 0},
               {NG_ROWS_HALF_MID, 2048, 0},       {NG_ROWS_HALF_MID_384, 3072, 192},
               {NG_ROWS_HALF_MID_384, 3080, 0},   {NG_ROWS_HALF_MID_320, 2056, 160},
               {NG_ROWS_HALF_MID_320, 2560, 160}, {NG_ROWS_HALF_MID_320, 2568, 0},
               {NG_ROWS_HALF_MID_320, 3072, 0}};
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    const size_t n = cases[i].n, rows = ((size_t)1 << 25) / n;
    const ng_rows_mode bdw = NG_ROWS_BWD_DW | NG_ROWS_X16, frz = NG_ROWS_BWD_FROZEN | NG_ROWS_X16;
    const ng_row_launch dw = ng_choose_row_launch(c, rows, n, true, bdw | cases[i].flag);
    const ng_row_launch fz = ng_choose_row_launch(c, rows, n, true, frz | cases[i].flag);
    const ng_row_launch dw0 = ng_choose_row_launch(c, rows, n, true, bdw);
    const ng_row_launch fz0 = ng_choose_row_launch(c, rows, n, true, frz);
    if (!cases[i].wg) {
      assert_int_equal(dw.wg, dw0.wg);
      assert_int_equal(dw.groups, dw0.groups);
      assert_int_equal(fz.wg, fz0.wg);
      assert_int_equal(fz.groups, fz0.groups);
      continue;
    }
    assert_int_equal(dw0.wg, 256); /* the launch before the rule */
    assert_int_equal(dw.wg, cases[i].wg);
    assert_int_equal(dw.reg_cols, 2);
    /* with dW four a unit up to 288 vectors (RMSNorm's), three beyond and LayerNorm's */
    const bool four = cases[i].flag == NG_ROWS_HALF_MID && n / 8 <= 288;
    assert_int_equal(dw.groups, (four ? 4 : 3) * 132);
    assert_true(dw.nv_shfl); /* sums over warps: the only ones a size of 160-224 takes */
    assert_int_equal(fz.wg, dw.wg); /* dx's bits: the same shape frozen */
    assert_int_equal(fz.reg_cols, 2);
    assert_int_equal(fz.groups, rows); /* a group a row */
  }
  /* calls of at most 16 rows a compute unit, 1-wide vectors, f32 rows: 256 × 2 or the f32
   * launch */
  const ng_rows_mode bdw = NG_ROWS_BWD_DW | NG_ROWS_HALF_MID;
  for (int frozen = 0; frozen < 2; frozen++) {
    const ng_rows_mode m = (frozen ? NG_ROWS_BWD_FROZEN | NG_ROWS_HALF_MID : bdw) | NG_ROWS_X16;
    assert_int_equal(ng_choose_row_launch(c, 16 * 132, 2560, true, m).wg, 256);
    assert_int_equal(ng_choose_row_launch(c, 16 * 132 + 1, 2560, true, m).wg, 160);
  }
  const ng_row_launch v1 = ng_choose_row_launch(c, 13107, 2560, false, bdw | NG_ROWS_X16);
  assert_int_equal(v1.wg & (v1.wg - 1), 0);
  const ng_row_launch f32 = ng_choose_row_launch(c, 13107, 2560, true, bdw);
  assert_int_equal(f32.wg, ng_choose_row_launch(c, 13107, 2560, true, NG_ROWS_BWD_DW).wg);
  /* PolyNorm's forward: the shape, on the grid of NG_ROWS_PAIRS (two rows a group, at least a
   * wave, prefetching) */
  const ng_rows_mode pf = NG_ROWS_FWD | NG_ROWS_X16 | NG_ROWS_PAIRS;
  const ng_row_launch f = ng_choose_row_launch(c, 10922, 3072, true, pf | NG_ROWS_HALF_MID);
  const ng_row_launch f0 = ng_choose_row_launch(c, 10922, 3072, true, pf);
  assert_int_equal(f0.wg, 256);
  assert_int_equal(f.wg, 192);
  assert_int_equal(f.reg_cols, 2);
  assert_int_equal(f.groups, f0.groups);
  assert_int_equal(f.groups, 10922 / 2);
  assert_true(f.prefetch);
  /* PolyNorm's backward (a persistent grid: rows = SIZE_MAX) with NG_ROWS_HALF_MID: 160 × 2 up
   * to 320 vectors, 192 × 2 up to 384, 224 × 2 up to 448; with dW, with dB alone and with neither
   * the same shape. Up to 384 vectors (NG_POLY_SMALL_GRID_MAX) with a gradient on eight groups a
   * unit, both frozen on 960 work-items a unit (bf16's NG_ROWS_POLY_FZ_960; f16's 1152 below),
   * beyond on the wave of 2048. Both gradients' modes prefetch the next row, the frozen one does
   * not; beyond 448 vectors (and beyond 384 with f16's NG_ROWS_HALF_MID_384) groups of 256, dB
   * alone without the prefetch. */
  for (int gi = 0; gi < 3; gi++) {
    const ng_rows_mode pb =
        NG_ROWS_POLY_BWD | NG_ROWS_X16 |
        (gi == 1 ? NG_ROWS_POLY_DW : gi == 2 ? NG_ROWS_POLY_DB : NG_ROWS_POLY_FZ_960);
    const size_t ns[] = {2560, 3072, 3584}, wgs[] = {160, 192, 224};
    const size_t grids[3][3] = {{6 * 132, 5 * 132, 9 * 132}, /* 960 / wg a unit, then the wave */
                                {8 * 132, 8 * 132, 9 * 132},
                                {8 * 132, 8 * 132, 9 * 132}};
    for (size_t i = 0; i < NG_ARRAY_LEN(ns); i++) {
      const ng_row_launch b =
          ng_choose_row_launch(c, SIZE_MAX, ns[i], true, pb | NG_ROWS_HALF_MID);
      assert_int_equal(b.wg, wgs[i]);
      assert_int_equal(b.reg_cols, 2);
      assert_int_equal(b.grid, grids[gi][i]);
      assert_int_equal(b.prefetch, gi != 0);
    }
    const ng_row_launch b5 =
        ng_choose_row_launch(c, SIZE_MAX, 3600, true, pb | NG_ROWS_HALF_MID);
    assert_int_equal(b5.wg, 256);
    assert_int_equal(b5.prefetch, gi == 1);
    assert_int_equal(
        ng_choose_row_launch(c, SIZE_MAX, 3584, true, pb | NG_ROWS_HALF_MID_384).wg, 256);
    /* NG_ROWS_HALF_MID_320 stops at 320 vectors */
    assert_int_equal(
        ng_choose_row_launch(c, SIZE_MAX, 3072, true, pb | NG_ROWS_HALF_MID_320).wg, 256);
  }
  /* f16's both-frozen grid: 1152 work-items a unit (seven groups of 160, six of 192); without
   * either flag, the wave */
  const ng_rows_mode pz = NG_ROWS_POLY_BWD | NG_ROWS_X16 | NG_ROWS_HALF_MID_384;
  const ng_rows_mode pz16 = pz | NG_ROWS_POLY_FZ_1152;
  assert_int_equal(ng_choose_row_launch(c, SIZE_MAX, 2560, true, pz16).grid, 7 * 132);
  assert_int_equal(ng_choose_row_launch(c, SIZE_MAX, 3072, true, pz16).grid, 6 * 132);
  assert_int_equal(ng_choose_row_launch(c, SIZE_MAX, 2560, true, pz).grid, 12 * 132);
  /* The scratch query holds the partials of each gradient's own grid, although the frozen grid,
   * once the largest, is now smaller than the gradients' eight a unit */
  for (size_t n = 2056; n <= 3072; n += 504) {
    const ng_polynorm_params pp = {((size_t)1 << 25) / n, n, 1e-6f};
    for (int gi = 1; gi < 3; gi++) {
      const ng_row_launch b = ng_choose_row_launch_k(
          c, "polynorm.bwd", NG_BF16, SIZE_MAX, n, true,
          NG_ROWS_POLY_BWD | NG_ROWS_X16 | NG_ROWS_HALF_MID |
              (gi == 1 ? NG_ROWS_POLY_DW : NG_ROWS_POLY_DB));
      size_t bytes = 0;
      NG_OK(ng_polynorm_backward_scratch_size(c, &pp, gi == 1, gi == 2, &bytes));
      assert_true(bytes >= (size_t)b.groups * 4 * (gi == 1 ? 3 : 1));
    }
  }
  /* ... in calls of more than 8 rows a compute unit */
  assert_int_equal(ng_choose_row_launch(c, 8 * 132, 3072, true, pf | NG_ROWS_HALF_MID).wg,
                   256);
  assert_int_equal(
      ng_choose_row_launch(c, 8 * 132 + 1, 3072, true, pf | NG_ROWS_HALF_MID).wg, 192);
  ng_context_release(c);
}

/* The fused add's backward with ds_out (NG_ROWS_HALF_MID_DS, the flags rms_bwd_mode gives it):
 * 16-bit rows of 257-NG_HALF_MID_DS_MAX vectors on groups of half the row, with dW three a
 * compute unit, frozen sixteen a unit prefetching; beyond the bound and in calls of at most 16
 * rows a unit 256 × 2, frozen on NG_ROWS_MANY_512's eight a unit without the prefetch. */
static void test_half_mid_ds(void **state) {
  (void)state;
  ng_context *c = h100();
  const ng_rows_mode common = NG_ROWS_X16 | NG_ROWS_ONE | NG_ROWS_1K | NG_ROWS_HALF_MID_DS;
  const ng_rows_mode bdw = NG_ROWS_BWD_DW | NG_ROWS_FEW | common;
  const ng_rows_mode frz = NG_ROWS_BWD_FROZEN | NG_ROWS_MANY | NG_ROWS_MANY_512 | common;
  const size_t ns[] = {2056, 2176, NG_HALF_MID_DS_MAX * 8, NG_HALF_MID_DS_MAX * 8 + 8, 2560, 3584};
  for (size_t i = 0; i < NG_ARRAY_LEN(ns); i++) {
    const size_t n = ns[i], nv = n / 8, rows = ((size_t)1 << 25) / n;
    const ng_row_launch dw = ng_choose_row_launch(c, rows, n, true, bdw);
    const ng_row_launch fz = ng_choose_row_launch(c, rows, n, true, frz);
    const ng_row_launch dw0 = ng_choose_row_launch(c, rows, n, true, bdw & ~common);
    assert_int_equal(dw.reg_cols, 2);
    assert_int_equal(fz.wg, dw.wg); /* dx's bits: the same shape frozen */
    assert_int_equal(fz.reg_cols, 2);
    if (nv > NG_HALF_MID_DS_MAX) {
      assert_int_equal(dw.wg, 256);
      assert_int_equal(dw.groups, dw0.groups);
      assert_int_equal(fz.groups, 8 * 132);
      assert_false(fz.prefetch);
      continue;
    }
    assert_int_equal(dw.wg, 160); /* half of 257-288 vectors, rounded up to a warp */
    assert_int_equal(dw.groups, 3 * 132);
    assert_true(dw.prefetch);
    assert_int_equal(fz.groups, 16 * 132);
    assert_true(fz.prefetch);
  }
  /* calls of at most 16 rows a unit keep 256 × 2 in both passes */
  for (int frozen = 0; frozen < 2; frozen++) {
    const ng_rows_mode m = frozen ? frz : bdw;
    assert_int_equal(ng_choose_row_launch(c, 16 * 132, 2176, true, m).wg, 256);
    assert_int_equal(ng_choose_row_launch(c, 16 * 132 + 1, 2176, true, m).wg, 160);
  }
  ng_context_release(c);
}

/* PolyNorm's backward (a persistent grid: rows = SIZE_MAX) with NG_ROWS_POLY_F16_3 and a
 * gradient: rows of 257-512 vectors on 3 groups a compute unit without the prefetch; 8 a unit
 * with it otherwise (bf16's dW 6 a unit past 448 vectors), the frozen pass and shorter rows as
 * before. */
static void test_poly_f16_3(void **state) {
  (void)state;
  ng_context *c = h100();
  const ng_rows_mode base = NG_ROWS_POLY_BWD | NG_ROWS_X16;
  const ng_rows_mode grads[] = {NG_ROWS_POLY_DW, NG_ROWS_POLY_DB};
  const size_t taken[] = {2056, 3072, 4096};
  for (size_t g = 0; g < NG_ARRAY_LEN(grads); g++)
    for (size_t i = 0; i < NG_ARRAY_LEN(taken); i++) {
      const ng_row_launch l = ng_choose_row_launch(c, SIZE_MAX, taken[i], true,
                                                     base | grads[g] | NG_ROWS_POLY_F16_3);
      assert_int_equal(l.wg, 256);
      assert_int_equal(l.groups, 3 * 132);
      assert_false(l.prefetch);
      const ng_row_launch o =
          ng_choose_row_launch(c, SIZE_MAX, taken[i], true, base | grads[g]);
      assert_int_equal(o.wg, 256);
      const bool six = grads[g] == NG_ROWS_POLY_DW && taken[i] / 8 > NG_HALF_MID_MAX;
      assert_int_equal(o.groups, (six ? 6 : 8) * 132);
      if (grads[g] == NG_ROWS_POLY_DW) assert_true(o.prefetch);
    }
  /* bf16's dW on six a unit from 449 vectors */
  const ng_rows_mode bdw = base | NG_ROWS_POLY_DW;
  assert_int_equal(ng_choose_row_launch(c, SIZE_MAX, 3584, true, bdw).groups, 8 * 132);
  assert_int_equal(ng_choose_row_launch(c, SIZE_MAX, 3592, true, bdw).groups, 6 * 132);
  /* the frozen pass (no gradient flag) and rows of at most 256 vectors keep their launch */
  const struct {
    size_t n;
    ng_rows_mode mode;
  } kept[] = {{4096, base}, {2048, base | NG_ROWS_POLY_DW}, {1024, base | NG_ROWS_POLY_DB}};
  for (size_t i = 0; i < NG_ARRAY_LEN(kept); i++) {
    const ng_row_launch a = ng_choose_row_launch(c, SIZE_MAX, kept[i].n, true,
                                                   kept[i].mode | NG_ROWS_POLY_F16_3);
    const ng_row_launch b = ng_choose_row_launch(c, SIZE_MAX, kept[i].n, true,
                                                   kept[i].mode);
    assert_int_equal(a.wg, b.wg);
    assert_int_equal(a.groups, b.groups);
    assert_int_equal(a.prefetch, b.prefetch);
  }
  ng_context_release(c);
}

/* Every other NG_ROWS_* rule of ng_choose_row_launch_k, at least once, as src/ng_internal.h and
 * src/context.c describe it, so that a change to the launch code that moves one shows here before
 * it reaches a GPU. ANY: not checked. */
#define ANY (-1)
#define X16 NG_ROWS_X16
#define FWD NG_ROWS_FWD
#define FRZ NG_ROWS_BWD_FROZEN
#define BDW NG_ROWS_BWD_DW
#define PBW (NG_ROWS_POLY_BWD | NG_ROWS_X16)
typedef struct rule_case {
  const char *what;
  size_t rows, n;
  ng_rows_mode mode;
  long wg, reg, groups, grid, prefetch; /* expected, or ANY */
} rule_case;

static const rule_case RULES[] = {
    /* NG_ROWS_256X4: the forward of 16-bit rows of 513-1024 vectors, a group a row of 256 × 4
     * without the prefetch, in calls of more rows than compute units */
    {"256X4", 5461, 6144, FWD | X16 | NG_ROWS_256X4, 256, 4, 5461, ANY, 0},
    {"256X4, 100 rows: 512 x 2", 100, 6144, FWD | X16 | NG_ROWS_256X4, 512, 2, ANY, ANY, ANY},
    /* NG_ROWS_HOLD4: 2049-4096 vectors on 1024 × 4, 16 a unit at most, no prefetch */
    {"HOLD4", 1365, 24576, FWD | X16 | NG_ROWS_HOLD4, 1024, 4, 1365, ANY, 0},
    /* NG_ROWS_HOLD4_FEW: the same in calls of at most a row a compute unit, else 1024 × 2 (whose
     * rows of more than 2048 vectors RMSNorm splits) */
    {"HOLD4_FEW, 132 rows", 132, 32768, FWD | X16 | NG_ROWS_HOLD4_FEW, 1024, 4, 132, ANY, 0},
    {"HOLD4_FEW, 133 rows", 133, 32768, FWD | X16 | NG_ROWS_HOLD4_FEW, 1024, 2, ANY, ANY, ANY},
    /* the frozen backward of 16-bit rows of 128-256 vectors: four rows a group, prefetching, at
     * least a wave; NG_ROWS_FULL1 (rows that fill the group, many rows): a group a row */
    {"frozen, four rows a group", 32768, 1024, FRZ | X16, 128, 1, 32768 / 4, ANY, 1},
    {"FULL1", 32768, 1024, FRZ | X16 | NG_ROWS_FULL1, ANY, ANY, 32768, ANY, ANY},
    {"FULL1, 1000 rows: a wave", 1000, 1024, FRZ | X16 | NG_ROWS_FULL1, ANY, ANY, 1000, 2112, ANY},
    /* NG_ROWS_1K: 513-1024 vectors in the backward on 1024 × 1, a group a unit, prefetching */
    {"1K with dW", 4096, 8192, BDW | X16 | NG_ROWS_1K, 1024, 1, 132, ANY, 1},
    {"1K frozen", 4096, 8192, FRZ | X16 | NG_ROWS_1K, 1024, 1, 132, ANY, 1},
    /* NG_ROWS_DW_NOPF: with dW, 1025-2048 vectors keep 512 × 4, a group a unit, no prefetch */
    {"DW_NOPF", 2048, 16384, BDW | X16 | NG_ROWS_DW_NOPF, 512, 4, 132, ANY, 0},
    {"no DW_NOPF", 2048, 16384, BDW | X16, 512, 4, 132, ANY, 1},
    /* NG_ROWS_PAIRS_1K: two rows a group, prefetching, at least a wave (1056 groups of 256);
     * NG_ROWS_PAIRS up to 512 vectors, _1K up to 1024 */
    {"PAIRS_1K", 8192, 4096, FWD | X16 | NG_ROWS_PAIRS_1K, 256, 2, 4096, ANY, 1},
    {"PAIRS_1K, 1000 rows", 1000, 4096, FWD | X16 | NG_ROWS_PAIRS_1K, ANY, ANY, 1000, 1056, ANY},
    {"PAIRS", 8192, 4096, FWD | X16 | NG_ROWS_PAIRS, ANY, ANY, 4096, ANY, 1},
    {"PAIRS past 512 vectors", 100, 8192, FWD | X16 | NG_ROWS_PAIRS, ANY, ANY, 100, ANY, ANY},
    {"PAIRS_1K, 100 rows of 8192", 100, 8192, FWD | X16 | NG_ROWS_PAIRS_1K, 512, ANY, 100, 528,
     ANY},
    /* no rule: rows of at most 512 vectors a group a row without the prefetch */
    {"forward, no rule", 8192, 4096, FWD | X16, ANY, ANY, 8192, ANY, 0},
    /* NG_ROWS_W256: rows of 225-256 vectors on 256 × 1 */
    {"W256", 16384, 2048, FWD | X16 | NG_ROWS_W256, 256, 1, ANY, ANY, ANY},
    {"W256, 224 vectors", 16384, 1792, FWD | X16 | NG_ROWS_W256, 128, ANY, ANY, ANY, ANY},
    /* NG_ROWS_512X4 (1025-2048 vectors) a group a row; NG_ROWS_512X2 (1024) 16 a unit */
    {"512X4", 2048, 16384, FWD | X16 | NG_ROWS_512X4, 512, 4, 2048, ANY, 0},
    {"512X2", 4096, 8192, FWD | X16 | NG_ROWS_256X4 | NG_ROWS_512X2, 512, 2, 16 * 132, ANY, 0},
    {"512X2, 132 rows", 132, 8192, FWD | X16 | NG_ROWS_256X4 | NG_ROWS_512X2, 512, 2, 132, 528,
     1},
    /* NG_ROWS_MANY: the frozen backward of 513-1024 vectors 16 groups a unit, prefetching;
     * _2K: a group a row up to 1024 vectors, 16 a unit without the prefetch beyond; _512: rows of
     * 257-512 vectors 8 a unit without it */
    {"MANY", 4096, 8192, FRZ | X16 | NG_ROWS_MANY, ANY, ANY, 16 * 132, ANY, 1},
    {"MANY_2K", 4096, 8192, FRZ | X16 | NG_ROWS_MANY | NG_ROWS_MANY_2K, ANY, ANY, 4096, ANY, ANY},
    {"MANY_2K past 1024 vectors", 4096, 16384, FRZ | X16 | NG_ROWS_MANY | NG_ROWS_MANY_2K, ANY,
     ANY, 16 * 132, ANY, 0},
    {"MANY_512", 8192, 4096, FRZ | X16 | NG_ROWS_MANY | NG_ROWS_MANY_512, ANY, ANY, 8 * 132, ANY,
     0},
    /* NG_ROWS_ONE: the frozen backward held four vectors a work-item, a group a compute unit */
    {"ONE", 2048, 16384, FRZ | X16 | NG_ROWS_ONE, ANY, 4, 132, ANY, ANY},
    /* the backward with dW: about 1024 work-items a unit; NG_ROWS_FEW three quarters of them */
    {"dW grid", 32768, 1024, BDW | X16, 128, ANY, 8 * 132, ANY, ANY},
    {"FEW", 32768, 1024, BDW | X16 | NG_ROWS_FEW, ANY, ANY, 6 * 132, ANY, ANY},
    /* NG_ROWS_FIT2 (513-768 vectors) and _640 (513-640): groups of half the row rounded up to a
     * warp, two vectors each, two a unit with dW, in calls of more than 8 (16) rows a unit */
    {"FIT2", 5461, 6144, BDW | X16 | NG_ROWS_FIT2, 384, 2, 2 * 132, ANY, ANY},
    {"FIT2, 1000 rows", 1000, 6144, BDW | X16 | NG_ROWS_FIT2, 512, ANY, ANY, ANY, ANY},
    {"FIT2_640", 7281, 4608, BDW | X16 | NG_ROWS_FIT2_640, 288, 2, ANY, ANY, ANY},
    {"FIT2_640, 2000 rows", 2000, 4608, BDW | X16 | NG_ROWS_FIT2_640, 512, ANY, ANY, ANY, ANY},
    {"FIT2_640, 768 vectors", 5461, 6144, BDW | X16 | NG_ROWS_FIT2_640, 512, ANY, ANY, ANY, ANY},
    /* one slot a work-item: f32 rows past 768 (F32_1SLOT) or 512 vectors (_512), f16 backward
     * rows past 1280 (F16_1SLOT), f32 forward rows of 769-1024 (F32_STREAM_1K) */
    {"F32_1SLOT", 4096, 8192, BDW | NG_ROWS_F32_1SLOT, ANY, 1, ANY, ANY, ANY},
    {"F32_1SLOT, 768 vectors", 4096, 6144, BDW | NG_ROWS_F32_1SLOT, ANY, 2, ANY, ANY, ANY},
    {"F32_1SLOT_512", 4096, 6144, FWD | NG_ROWS_F32_1SLOT_512, ANY, 1, ANY, ANY, ANY},
    {"F16_1SLOT", 2048, 16384, BDW | X16 | NG_ROWS_F16_1SLOT, ANY, 1, ANY, ANY, ANY},
    {"F16_1SLOT, 1280 vectors", 4096, 10240, BDW | X16 | NG_ROWS_F16_1SLOT, ANY, 4, ANY, ANY, ANY},
    {"F32_STREAM_1K", 4096, 8192, FWD | NG_ROWS_F32_STREAM_1K, ANY, 1, ANY, ANY, ANY},
    {"F32_STREAM_1K, 2048 vectors", 2048, 16384, FWD | NG_ROWS_F32_STREAM_1K, ANY, 2, ANY, ANY,
     ANY},
    /* PolyNorm's backward: the prefetch with dW for 128-512 vectors, with dB alone 128-256 */
    {"POLY_DW", SIZE_MAX, 4096, PBW | NG_ROWS_POLY_DW, ANY, ANY, ANY, ANY, 1},
    {"POLY_DB", SIZE_MAX, 2048, PBW | NG_ROWS_POLY_DB, ANY, ANY, ANY, ANY, 1},
    {"POLY_DB, 512 vectors", SIZE_MAX, 4096, PBW | NG_ROWS_POLY_DB, ANY, ANY, ANY, ANY, 0},
    {"PolyNorm frozen", SIZE_MAX, 4096, PBW, ANY, ANY, ANY, ANY, 0},
};

static void expect(const char *what, const char *field, long want, long got) {
  if (want != ANY && want != got) fail_msg("%s: %s %ld, expected %ld", what, field, got, want);
}

static void test_other_rules(void **state) {
  (void)state;
  ng_context *c = h100();
  for (size_t i = 0; i < NG_ARRAY_LEN(RULES); i++) {
    const rule_case *r = &RULES[i];
    const ng_row_launch l = ng_choose_row_launch(c, r->rows, r->n, true, r->mode);
    expect(r->what, "wg", r->wg, l.wg);
    expect(r->what, "reg", r->reg, l.reg_cols);
    expect(r->what, "groups", r->groups, l.groups);
    expect(r->what, "grid", r->grid, l.grid);
    expect(r->what, "prefetch", r->prefetch, l.prefetch);
  }
  ng_context_release(c);
}

/* PolyNorm's forward splits bf16 rows past 2048 vectors, f16 rows of 2049-4096 vectors alone
 * (PN_FWD_COOP_F16_TO) in calls of at least three rows a compute unit (396 here), publishing
 * each row's sums ahead and late, f16 rows with their bits widened pair by pair; other f16 rows
 * stream. */
static void test_poly_fwd_split(void **state) {
  (void)state;
  ng_context *c = h100();
  const struct {
    size_t rows, n; /* rows 0: rows·N = 2^25 */
    ng_dtype xd;
    bool split;
  } cases[] = {{0, 16384, NG_F16, false},   {0, 16392, NG_F16, true},
               {0, 32768, NG_F16, true},    {0, 32776, NG_F16, false},
               {0, 65536, NG_F16, false},   {396, 32768, NG_F16, true},
               {395, 32768, NG_F16, false}, {100, 24576, NG_F16, false},
               {0, 16392, NG_BF16, true},   {0, 32776, NG_BF16, true},
               {0, 65536, NG_BF16, true},   {100, 32768, NG_BF16, true}};
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    const size_t rows = cases[i].rows ? cases[i].rows : ((size_t)1 << 25) / cases[i].n;
    ng_coop cp;
    memset(&cp, 0, sizeof cp);
    const bool split = ng_polynorm_fwd_plan(c, rows, cases[i].n, cases[i].xd, &cp);
    if (split != cases[i].split)
      fail_msg("%zu rows of %zu, %s: expected %s", rows, cases[i].n,
               cases[i].xd == NG_F16 ? "f16" : "bf16", cases[i].split ? "split" : "not split");
    if (split && (!cp.ahead || !cp.late || cp.f16_pack != (cases[i].xd == NG_F16)))
      fail_msg("%zu rows of %zu: ahead %d late %d f16_pack %d", rows, cases[i].n, cp.ahead,
               cp.late, cp.f16_pack);
  }
  /* forced on (NG_TUNE_FUSED_REDUCE = 2, as the tests' split cases), small calls split too */
  NG_OK(ng_context_override(c, NG_TUNE_FUSED_REDUCE, 2));
  ng_coop cp;
  assert_true(ng_polynorm_fwd_plan(c, 3, 32768, NG_F16, &cp));
  assert_false(ng_polynorm_fwd_plan(c, 3, 32776, NG_F16, &cp));
  ng_context_release(c);
}

/* RMSNorm's forward splits 16-bit rows past 4096 vectors (those of 2049-4096 in calls of more
 * rows than compute units, NG_ROWS_HOLD4_FEW, bf16 only) and f32 rows past 1024 vectors, and
 * publishes each row's sum ahead; 16-bit rows late, f16 rows with their bits widened pair by
 * pair (NG_COOP_F16_PACK). */
static void test_rms_fwd_split(void **state) {
  (void)state;
  ng_context *c = h100();
  const struct {
    size_t rows, n;
    ng_dtype xd;
    bool split, late, f16_pack;
  } cases[] = {{512, 65536, NG_F16, true, true, true},
               {256, 131072, NG_F16, true, true, true},
               {1024, 32768, NG_F16, false, false, false}, /* held: NG_ROWS_HOLD4 */
               {512, 65536, NG_BF16, true, true, false},
               {1024, 32768, NG_BF16, true, true, false},
               {100, 32768, NG_BF16, false, false, false}, /* held: NG_ROWS_HOLD4_FEW */
               {256, 65536, NG_F32, true, false, false}};
  for (size_t i = 0; i < NG_ARRAY_LEN(cases); i++) {
    ng_coop cp;
    memset(&cp, 0, sizeof cp);
    const bool split = ng_rmsnorm_fwd_plan(c, cases[i].rows, cases[i].n, cases[i].xd, &cp);
    if (split != cases[i].split || (split && (!cp.ahead || cp.late != cases[i].late ||
                                              cp.f16_pack != cases[i].f16_pack)))
      fail_msg("%zu rows of %zu, dtype %d: split %d ahead %d late %d f16_pack %d", cases[i].rows,
               cases[i].n, (int)cases[i].xd, split, split && cp.ahead, split && cp.late,
               split && cp.f16_pack);
  }
  ng_context_release(c);
}

/* An H100-shaped context named as the H200 the built-in table names (the H200's launches are
 * the H100's: the same compute units, registers and local memory). */
/* Split rows take even slices (cl/ng_common.clh, ng_coop_width) in every plan but RMSNorm's
 * bf16 backward, whose pass with dW lost a group a compute unit with them; that plan keeps whole
 * slices in both passes (NG_COOP_WHOLE), so that dx has the same bits frozen or not, and it
 * reaches the kernel as a build option. Rows that the whole slices divide, or that one slice
 * holds, keep them too. */
static void test_coop_slices(void **state) {
  (void)state;
  ng_context *c = h100();
  const size_t n = 18432, rows = ((size_t)1 << 25) / n; /* 2304 bf16 vectors: uneven slices */
  ng_row_launch l;
  ng_coop cp;
  for (int dw = 0; dw < 2; dw++) {
    memset(&cp, 0, sizeof cp);
    assert_true(ng_rmsnorm_bwd_plan(c, rows, n, NG_BF16, false, false, dw, &l, &cp));
    if (!cp.whole || cp.slices != 5)
      fail_msg("RMSNorm bf16 dw %d: whole %d slices %u", dw, cp.whole, cp.slices);
    ng_opts o;
    ng_opts_init(&o);
    ng_coop_opts(&o, &cp);
    assert_non_null(strstr(o.text, "-DNG_COOP_WHOLE=1"));
    /* the fused add with ds_out runs its own kernel on the even slices */
    memset(&cp, 0, sizeof cp);
    assert_true(ng_rmsnorm_bwd_plan(c, rows, n, NG_BF16, true, true, dw, &l, &cp));
    assert_false(cp.whole);
    ng_opts_init(&o);
    ng_coop_opts(&o, &cp);
    assert_null(strstr(o.text, "NG_COOP_WHOLE"));
    memset(&cp, 0, sizeof cp);
    assert_true(ng_layernorm_bwd_plan(c, rows, n, NG_BF16, dw, dw, &l, &cp));
    assert_false(cp.whole);
    memset(&cp, 0, sizeof cp);
    assert_true(ng_polynorm_bwd_plan(c, rows, n, NG_BF16, dw, dw, &l, &cp));
    assert_false(cp.whole);
  }
  memset(&cp, 0, sizeof cp);
  assert_true(ng_rmsnorm_fwd_plan(c, rows, n, NG_BF16, &cp));
  assert_false(cp.whole);
  memset(&cp, 0, sizeof cp);
  assert_true(ng_polynorm_fwd_plan(c, rows, n, NG_BF16, &cp));
  assert_false(cp.whole);
  /* 32768: whole slices, forward and in the fused add's backward (they divide the row) */
  memset(&cp, 0, sizeof cp);
  assert_true(ng_rmsnorm_fwd_plan(c, 1024, 32768, NG_BF16, &cp));
  assert_true(cp.whole && cp.slices == 4);
  memset(&cp, 0, sizeof cp);
  assert_true(ng_rmsnorm_bwd_plan(c, 1024, 32768, NG_BF16, true, true, true, &l, &cp));
  if (!cp.whole) fail_msg("the fused add at 32768: %u slices, not whole", cp.slices);
  /* PolyNorm's backward at 7168 (896 vectors): one slice of 256 × 4 */
  memset(&cp, 0, sizeof cp);
  assert_true(ng_polynorm_bwd_plan(c, ((size_t)1 << 25) / 7168, 7168, NG_BF16, false, false, &l,
                                   &cp));
  if (!cp.whole || cp.slices != 1) fail_msg("PolyNorm at 7168: %u slices", cp.slices);
  ng_context_release(c);
}

static ng_context *h200(void) {
  ng_context *c = h100();
  ng_test_as_nvidia(c, "NVIDIA H200");
  return c;
}

/* Values the device of ctx can take: a work-group as an override or tuning.txt may ask for it
 * (ng_wg_asked_ok: a power of two or a multiple of 32, within the device's limit) */
static bool valid_values(const ng_context *ctx, const unsigned v[NG_TUNE_SLOTS]) {
  const unsigned wg = v[NG_TUNE_WORKGROUP], r = v[NG_TUNE_REG_COLS];
  return (wg == 0 || ng_wg_asked_ok(ctx, wg)) &&
         (r == 0 || r == 1 || r == 2 || r == 4 || r == 8) &&
         (v[NG_TUNE_VECTOR] == 0 || v[NG_TUNE_VECTOR] == 1 || v[NG_TUNE_VECTOR] == 8) &&
         v[NG_TUNE_PREFETCH] <= 2 && v[NG_TUNE_TABLE] == 0;
}

/* The built-in table: each entry serves its device, kind, dtypes and lengths and nothing else,
 * with values the device can take; table=1, other device names and a MIG slice (the name with
 * fewer compute units) see none of it. */
static void test_builtin_entries(void **state) {
  (void)state;
  ng_context *h2 = h200(), *h1 = h100();
  size_t count = 0;
  const ng_builtin_tune *t = ng_tuning_builtin(&count);
  assert_true(count > 0);
  static const ng_dtype dts[] = {NG_F32, NG_F16, NG_BF16};
  for (size_t i = 0; i < count; i++) {
    const ng_builtin_tune *e = &t[i];
    if (!(e->lo <= e->hi && e->lo > 1 && e->dtypes && !(e->dtypes & ~7u) && valid_values(h2, e->v)))
      fail_msg("entry %zu (%s, %zu-%zu) is malformed", i, e->kind, e->lo, e->hi);
    assert_string_equal(e->device, "NVIDIA H200");
    assert_int_equal(e->compute_units, 132);
    for (size_t j = 0; j < i; j++) /* an earlier entry would shadow this one */
      if (!strcmp(t[j].device, e->device) && !strcmp(t[j].kind, e->kind) &&
          (t[j].dtypes & e->dtypes) && t[j].lo <= e->hi && e->lo <= t[j].hi)
        fail_msg("entries %zu and %zu (%s) overlap", j, i, e->kind);
    for (size_t d = 0; d < NG_ARRAY_LEN(dts); d++) {
      const bool serves = (e->dtypes & NG_DTYPE_BIT(dts[d])) != 0;
      const size_t ns[] = {e->lo, (e->lo + e->hi) / 2, e->hi};
      for (size_t k = 0; k < NG_ARRAY_LEN(ns); k++) {
        unsigned v[NG_TUNE_SLOTS] = {0};
        const bool got = ng_tuned_lookup(h2, e->kind, dts[d], ns[k], v);
        /* an unknown kind would never be asked for: the lookup must know it too */
        if (serves && (!got || memcmp(v, e->v, sizeof v)))
          fail_msg("%s, dtype %d, n %zu: not served", e->kind, (int)dts[d], ns[k]);
        if (!serves && got && !memcmp(v, e->v, sizeof v))
          fail_msg("%s, dtype %d, n %zu: served", e->kind, (int)dts[d], ns[k]);
        assert_false(ng_tuned_lookup(h1, e->kind, dts[d], ns[k], v)); /* another device */
      }
    }
  }
  unsigned v[NG_TUNE_SLOTS] = {0};
  assert_true(ng_tuned_lookup(h2, "rmsnorm.bwd", NG_BF16, 16384, v));
  assert_false(ng_tuned_lookup(h2, "rmsnorm.bwd", NG_BF16, 16385, v));
  assert_false(ng_tuned_lookup(h2, "rmsnorm.bwd", NG_BF16, 8703, v)); /* below 8704 */
  assert_false(ng_tuned_lookup(h2, "rmsnorm.bwd_frozen", NG_BF16, 16384, v)); /* no entry */
  assert_false(ng_tuned_lookup(h2, NULL, NG_BF16, 16384, v));
  NG_OK(ng_context_override(h2, NG_TUNE_TABLE, 1));
  assert_false(ng_tuned_lookup(h2, "rmsnorm.bwd", NG_BF16, 16384, v));
  /* the exact name: an H200 NVL was not measured; nor a MIG slice (the name, fewer units) */
  snprintf(h1->info.name, sizeof h1->info.name, "%s", "NVIDIA H200 NVL");
  assert_false(ng_tuned_lookup(h1, "rmsnorm.bwd", NG_BF16, 16384, v));
  snprintf(h1->info.name, sizeof h1->info.name, "%s", "NVIDIA H200");
  assert_true(ng_tuned_lookup(h1, "rmsnorm.bwd", NG_BF16, 16384, v));
  h1->info.compute_units = 16;
  assert_false(ng_tuned_lookup(h1, "rmsnorm.bwd", NG_BF16, 16384, v));
  ng_context_release(h2);
  ng_context_release(h1);
}

/* The four cases of the tables' range checks: d 0-2 bf16, f16, f32 on the H200, d 3 bf16 on the
 * H100; a 16-bit entry's work-group wg16 serves the 16-bit H200 cases alone (*wg 0: the rules') */
static ng_context *case_of(int d, ng_context *h2, ng_context *h1, unsigned wg16, ng_dtype *xd,
                           unsigned *wg) {
  *xd = d == 1 ? NG_F16 : d == 2 ? NG_F32 : NG_BF16;
  *wg = d < 2 ? wg16 : 0;
  return d == 3 ? h1 : h2;
}

/* A launch on a table entry's shape wg x reg (and, where groups is not 0, that grid with the
 * prefetch), or with wg 0 the rules' power of two */
static void assert_fit_or_rules(const ng_row_launch *l, unsigned wg, unsigned reg,
                                unsigned groups) {
  if (!wg) {
    assert_int_equal(l->wg & (l->wg - 1), 0);
    return;
  }
  assert_int_equal(l->wg * 8 + l->reg_cols, wg * 8 + reg);
  if (groups) {
    assert_int_equal(l->groups, groups);
    assert_true(l->prefetch);
  }
}

/* What the built-in table's entries do to the launches the ops take on an H200: RMSNorm's bf16
 * backward at 16384 on 1024 x 2 a group a compute unit, its frozen pass on the same shape (dx's
 * bits) but not its f16 passes; LayerNorm's both-frozen split rows on four groups a compute
 * unit, and its f16 rows of 2048 on a grid with the prefetch; PolyNorm's single slice at 8192
 * with the prefetch; RMSNorm's f32 rows on their own shapes. An H100 keeps the rules'
 * launches. */
static void test_builtin_launches(void **state) {
  (void)state;
  ng_context *h2 = h200(), *h1 = h100();
  const ng_rows_mode bdw = NG_ROWS_BWD_DW | NG_ROWS_X16 | NG_ROWS_FIT2 | NG_ROWS_F32_1SLOT_512;
  const ng_rows_mode bfz = NG_ROWS_BWD_FROZEN | NG_ROWS_X16 | NG_ROWS_FIT2 | NG_ROWS_F32_1SLOT_512;
  for (int frozen = 0; frozen < 2; frozen++) {
    const char *kind = frozen ? "rmsnorm.bwd_frozen" : "rmsnorm.bwd";
    const ng_rows_mode m = frozen ? bfz : bdw;
    const ng_row_launch a = ng_choose_row_launch_k(h2, kind, NG_BF16, 2048, 16384, true, m);
    assert_int_equal(a.wg, 1024);
    assert_int_equal(a.reg_cols, 2);
    if (!frozen) assert_int_equal(a.groups, 132);
    const ng_row_launch f = ng_choose_row_launch_k(h2, kind, NG_F16, 2048, 16384, true, m);
    const ng_row_launch o = ng_choose_row_launch_k(h1, kind, NG_BF16, 2048, 16384, true, m);
    assert_int_not_equal(f.wg * 8 + f.reg_cols, 1024 * 8 + 2);
    assert_int_not_equal(o.wg * 8 + o.reg_cols, 1024 * 8 + 2);
  }
  /* f32: RMSNorm's backward at 4096 on 128 x 4, frozen too; its forward at 16384 on 512 x 4 */
  for (int frozen = 0; frozen < 2; frozen++) {
    const ng_row_launch a =
        ng_choose_row_launch_k(h2, frozen ? "rmsnorm.bwd_frozen" : "rmsnorm.bwd", NG_F32, 8192,
                               4096, true, ng_bwd_mode(!frozen, NG_F32));
    assert_int_equal(a.wg, 128);
    assert_int_equal(a.reg_cols, 4);
  }
  const ng_row_launch rf = ng_rmsnorm_fwd_launch(h2, false, 2048, 16384, NG_F32, true);
  assert_int_equal(rf.wg, 512);
  assert_int_equal(rf.reg_cols, 4);
  assert_int_equal(rf.groups, 1056);
  assert_false(rf.prefetch);
  ng_row_launch l;
  ng_coop c2, c1;
  assert_true(ng_layernorm_bwd_plan(h2, 512, 65536, NG_BF16, false, false, &l, &c2));
  assert_true(ng_layernorm_bwd_plan(h1, 512, 65536, NG_BF16, false, false, &l, &c1));
  /* sets of c.slices groups each: as many as the grid holds */
  assert_int_equal(c2.l.groups, 528 / c2.slices * c2.slices);
  assert_int_equal(c1.l.groups, 396 / c1.slices * c1.slices);
  assert_int_not_equal(c2.l.groups, c1.l.groups);
  assert_true(c2.l.prefetch);
  /* with dB the kind is another: the rules' two groups a compute unit */
  assert_true(ng_layernorm_bwd_plan(h2, 512, 65536, NG_BF16, true, true, &l, &c2));
  assert_int_equal(c2.l.groups, 264 / c2.slices * c2.slices);
  assert_false(ng_layernorm_bwd_plan(h2, 16384, 2048, NG_F16, false, false, &l, &c2));
  assert_int_equal(l.groups, 2112);
  assert_true(l.prefetch);
  assert_false(ng_layernorm_bwd_plan(h1, 16384, 2048, NG_F16, false, false, &l, &c1));
  assert_int_equal(l.groups, 16384); /* a group a row */
  assert_false(ng_layernorm_bwd_plan(h2, 16384, 2048, NG_F32, false, false, &l, &c2));
  assert_int_not_equal(l.groups, 2112);
  for (int dw = 0; dw < 2; dw++) {
    assert_true(ng_polynorm_bwd_plan(h2, 4096, 8192, NG_BF16, dw, true, &l, &c2));
    assert_true(ng_polynorm_bwd_plan(h1, 4096, 8192, NG_BF16, dw, true, &l, &c1));
    assert_int_equal(c2.slices, 1);
    assert_true(c2.l.prefetch);
    assert_false(c1.l.prefetch);
  }
  /* its both-frozen pass, a kind of its own, keeps that prefetch too */
  assert_true(ng_polynorm_bwd_plan(h2, 4096, 8192, NG_BF16, false, false, &l, &c2));
  assert_true(ng_polynorm_bwd_plan(h1, 4096, 8192, NG_BF16, false, false, &l, &c1));
  assert_true(c2.l.prefetch);
  assert_false(c1.l.prefetch);
  /* the fifth round (bf16, the hidden sizes of models): RMSNorm's split rows at 18432 on nine
   * whole slices of 128 x 2, six groups a compute unit, with dW and frozen alike (dx's bits);
   * 20480 and the H100 keep 256 x 2 */
  for (int dw = 0; dw < 2; dw++) {
    assert_true(ng_rmsnorm_bwd_plan(h2, 1820, 18432, NG_BF16, false, false, dw, &l, &c2));
    assert_int_equal(c2.l.wg, 128);
    assert_int_equal(c2.slices, 9);
    assert_true(c2.whole);
    assert_int_equal(c2.l.groups, 792);
    assert_true(ng_rmsnorm_bwd_plan(h1, 1820, 18432, NG_BF16, false, false, dw, &l, &c1));
    assert_int_equal(c1.l.wg, 256);
    assert_true(ng_rmsnorm_bwd_plan(h2, 1638, 20480, NG_BF16, false, false, dw, &l, &c2));
    assert_int_equal(c2.l.wg, 256);
    /* at 6144 both passes on 512 x 2 (the rules' 384 x 2), two groups a compute unit with dW */
    assert_false(ng_rmsnorm_bwd_plan(h2, 5461, 6144, NG_BF16, false, false, dw, &l, &c2));
    assert_int_equal(l.wg * 8 + l.reg_cols, 512 * 8 + 2);
    if (dw) assert_int_equal(l.groups, 264);
    assert_false(ng_rmsnorm_bwd_plan(h1, 5461, 6144, NG_BF16, false, false, dw, &l, &c1));
    assert_int_equal(l.wg, 384);
  }
  /* LayerNorm's both-frozen rows of 6145-7168 on a grid of 264 groups instead of a group a row
   * (bf16; f16 on 528); and the twelfth round's 5632-6144 on 192 x 4, with dW or dB on two
   * groups a compute unit with the prefetch, both frozen on four without it, bf16 and f16;
   * 5631, f32 and the H100 keep the rules' power of two and grids */
  const struct {
    size_t n;
    unsigned wg;
  } lb[] = {{5631, 0}, {5632, 192}, {5888, 192}, {6144, 192}, {6145, 0}, {7168, 0}};
  for (size_t i = 0; i < NG_ARRAY_LEN(lb); i++) {
    const size_t rows = (1u << 25) / lb[i].n;
    for (int d = 0; d < 4; d++) {
      ng_dtype xd;
      unsigned wg;
      ng_context *dev = case_of(d, h2, h1, lb[i].wg, &xd, &wg);
      for (int g = 0; g < 4; g++) {
        const bool dw = g == 0 || g == 1, db = g == 0 || g == 2;
        const bool sp = ng_layernorm_bwd_plan(dev, rows, lb[i].n, xd, dw, db, &l, &c2);
        if (!wg) { /* f32 rows may split (NG_ROWS_F32_1SLOT) */
          if (d != 2) assert_false(sp);
          assert_fit_or_rules(sp ? &c2.l : &l, 0, 0, 0);
          if (g == 3 && d < 2 && lb[i].n > 6144) { /* the frozen grids from 6145 */
            assert_int_equal(l.groups, d == 1 ? 528 : 264);
            assert_true(l.prefetch);
          } else if (g == 3 && d == 3) {
            assert_int_equal(l.groups, rows); /* a group a row */
          }
          continue;
        }
        assert_false(sp);
        if (g < 3) {
          assert_fit_or_rules(&l, wg, 4, 264);
        } else {
          assert_fit_or_rules(&l, wg, 4, 0);
          assert_int_equal(l.groups, 528);
          assert_false(l.prefetch);
        }
      }
    }
  }
  /* PolyNorm's 16-bit forward at 12288 split on slices of 128, four groups a compute unit,
   * where the rules hold the row (13312 and the H100 too) */
  for (int d = 0; d < 2; d++) {
    const ng_dtype xd = d ? NG_F16 : NG_BF16;
    assert_true(ng_polynorm_fwd_plan(h2, 2730, 12288, xd, &c2));
    assert_int_equal(c2.l.wg, 128);
    assert_int_equal(c2.l.groups, 528 / c2.slices * c2.slices);
    assert_true(c2.l.prefetch);
    assert_false(ng_polynorm_fwd_plan(h2, 2520, 13312, xd, &c2));
    assert_false(ng_polynorm_fwd_plan(h1, 2730, 12288, xd, &c1));
  }
  /* PolyNorm's forward at 18432 on slices of 128 x 4 */
  assert_true(ng_polynorm_fwd_plan(h2, 1820, 18432, NG_BF16, &c2));
  assert_true(ng_polynorm_fwd_plan(h1, 1820, 18432, NG_BF16, &c1));
  assert_int_equal(c2.l.wg, 128);
  assert_int_equal(c2.l.groups, 792 / c2.slices * c2.slices);
  assert_int_not_equal(c1.l.wg, 128);
  /* the sixth round (18432) and the seventh (8704-14336): PolyNorm's 16-bit backward on slices
   * of 128, four groups a compute unit with dW or dB, six with both frozen (that pass's own grid
   * on the backward's shape; its line needs the shape of the line with dW, so both end at
   * 14336); 16384, 24576 and the H100 keep the rules' */
  for (int g = 0; g < 6; g++) {
    const bool dw = g % 3 == 0, db = g % 3 < 2, fz = g % 3 == 2;
    const ng_dtype xd = g < 3 ? NG_BF16 : NG_F16;
    const size_t ns[] = {8704, 10240, 14336, 18432};
    for (size_t i = 0; i < NG_ARRAY_LEN(ns); i++) {
      assert_true(ng_polynorm_bwd_plan(h2, (1u << 25) / ns[i], ns[i], xd, dw, db, &l, &c2));
      assert_int_equal(c2.l.wg, 128);
      assert_int_equal(c2.l.groups, (fz ? 792 : 528) / c2.slices * c2.slices);
      assert_true(c2.l.prefetch);
      assert_true(ng_polynorm_bwd_plan(h1, (1u << 25) / ns[i], ns[i], xd, dw, db, &l, &c1));
      assert_int_not_equal(c1.l.wg, 128);
    }
    assert_true(ng_polynorm_bwd_plan(h2, 2048, 16384, xd, dw, db, &l, &c2));
    assert_int_equal(c2.l.wg, 256);
    assert_true(ng_polynorm_bwd_plan(h2, 1365, 24576, xd, dw, db, &l, &c2));
    assert_int_not_equal(c2.l.wg, 128);
  }
  /* the fused add's forward holds rows of 18432 on 1024 x 4; LayerNorm's of 5120 on 256 x 4
   * (the launches as the ops choose them: ng_rmsnorm_fwd_launch, ng_layernorm_fwd_launch) */
  l = ng_rmsnorm_fwd_launch(h2, true, 1820, 18432, NG_BF16, true);
  assert_int_equal(l.wg * 8 + l.reg_cols, 1024 * 8 + 4);
  assert_int_equal(l.groups, 264);
  l = ng_layernorm_fwd_launch(h2, 6553, 5120, NG_BF16, true);
  assert_int_equal(l.wg * 8 + l.reg_cols, 256 * 8 + 4);
  assert_int_equal(l.groups, 528);
  /* ... and its 16-bit rows of 18432 on slices of 128, four groups a compute unit (24576 and
   * f32: the rules') */
  for (int d = 0; d < 2; d++) {
    l = ng_layernorm_fwd_launch(h2, 1820, 18432, d ? NG_F16 : NG_BF16, true);
    assert_int_equal(l.wg, 128);
    assert_int_equal(l.groups, 528);
    assert_true(l.prefetch);
  }
  l = ng_layernorm_fwd_launch(h2, 1820, 18432, NG_F32, true);
  assert_int_not_equal(l.wg, 128);
  l = ng_layernorm_fwd_launch(h2, 1365, 24576, NG_BF16, true);
  assert_int_not_equal(l.wg, 128);
  l = ng_layernorm_fwd_launch(h1, 1820, 18432, NG_BF16, true);
  assert_int_not_equal(l.wg, 128);
  /* ... and RMSNorm's bf16 forward at 8704-12288 on 512 x 4, two groups a compute unit to
   * 10240 and eight beyond; 13312, f16, f32 and the H100 keep the rules' */
  const size_t rn[] = {8704, 10240, 11264, 12288};
  for (size_t i = 0; i < 4; i++) {
    const size_t rows = (1u << 25) / rn[i];
    l = ng_rmsnorm_fwd_launch(h2, false, rows, rn[i], NG_BF16, true);
    assert_int_equal(l.wg * 8 + l.reg_cols, 512 * 8 + 4);
    assert_int_equal(l.groups, i < 2 ? 264 : 1056);
    assert_true(l.prefetch);
    l = ng_rmsnorm_fwd_launch(h2, false, rows, rn[i], NG_F16, true);
    assert_int_not_equal(l.wg * 8 + l.reg_cols, 512 * 8 + 4);
    l = ng_rmsnorm_fwd_launch(h1, false, rows, rn[i], NG_BF16, true);
    assert_int_not_equal(l.wg * 8 + l.reg_cols, 512 * 8 + 4);
  }
  l = ng_rmsnorm_fwd_launch(h2, false, 2520, 13312, NG_BF16, true);
  assert_int_not_equal(l.wg * 8 + l.reg_cols, 512 * 8 + 4);
  /* ... and the ninth round's fused add at 8704-12288 on W x 2 holding the row exactly (W the
   * smallest multiple of 32 that holds it at the top of each range), a group a compute unit
   * with the prefetch, with dW and frozen alike (dx's bits), bf16 and f16; the forward on that
   * shape to 11264 (bf16 at 9217-10240 on two groups a compute unit; f16 since the tenth
   * round). 13312 and the H100 keep the rules' (the backward's two slices of 256), the forward
   * at 12288-13312 1024 x 2 (the entry before) */
  const struct {
    size_t n;
    unsigned wg, fwd_wg, fwd_groups, fwd16_groups;
  } fa[] = {{8704, 544, 544, 132, 132},   {9216, 576, 576, 132, 132},
            {9728, 640, 640, 264, 132},   {10240, 640, 640, 264, 132},
            {11264, 704, 704, 132, 132},  {12288, 768, 1024, 264, 264},
            {13312, 256, 1024, 264, 264}};
  for (size_t i = 0; i < NG_ARRAY_LEN(fa); i++) {
    const size_t rows = (1u << 25) / fa[i].n;
    for (int g = 0; g < 4; g++) {
      const bool dw = g & 1, held = fa[i].n <= 12288;
      const ng_dtype xd = g < 2 ? NG_BF16 : NG_F16;
      assert_int_equal(ng_rmsnorm_bwd_plan(h2, rows, fa[i].n, xd, true, true, dw, &l, &c2), !held);
      if (held)
        assert_fit_or_rules(&l, fa[i].wg, 2, 132);
      else
        assert_int_equal(c2.l.wg, fa[i].wg);
      (void)ng_rmsnorm_bwd_plan(h1, rows, fa[i].n, xd, true, true, dw, &l, &c1);
      if (held) assert_int_not_equal(l.wg, fa[i].wg);
    }
    l = ng_rmsnorm_fwd_launch(h2, true, rows, fa[i].n, NG_BF16, true);
    assert_fit_or_rules(&l, fa[i].fwd_wg, 2, fa[i].fwd_groups);
    l = ng_rmsnorm_fwd_launch(h2, true, rows, fa[i].n, NG_F16, true);
    assert_fit_or_rules(&l, fa[i].fwd_wg, 2, fa[i].fwd16_groups);
    l = ng_rmsnorm_fwd_launch(h1, true, rows, fa[i].n, NG_BF16, true);
    assert_fit_or_rules(&l, 0, 0, 0);
  }
  /* ... and the tenth round's at 4609-7168 (the twelfth's from 4097): the fused add's forward
   * on W x 2 holding the row exactly (288 to 4608, 320 to 5120, 384 to 6144, 448 to 7168) on
   * two groups a compute unit with the prefetch, its backward so to 6144 (frozen alike),
   * RMSNorm's forward on 160 x 4 to 5120 on the rules' grid for that shape; 4096, 7169 (6145
   * for the backward, 5121 for RMSNorm), f32 and the H100 keep the rules' */
  const struct {
    size_t n;
    unsigned fwd_wg, bwd_wg, rms_wg;
  } fb[] = {{4096, 0, 0, 0},       {4097, 288, 288, 160}, {4352, 288, 288, 160},
            {4608, 288, 288, 160}, {4609, 320, 320, 160}, {4864, 320, 320, 160},
            {5120, 320, 320, 160}, {5121, 384, 384, 0},   {5632, 384, 384, 0},
            {6144, 384, 384, 0},   {6145, 448, 0, 0},     {6656, 448, 0, 0},
            {7168, 448, 0, 0},     {7169, 0, 0, 0}};
  for (size_t i = 0; i < NG_ARRAY_LEN(fb); i++) {
    const size_t rows = (1u << 25) / fb[i].n;
    for (int d = 0; d < 3; d++) {
      const ng_dtype xd = d == 0 ? NG_BF16 : d == 1 ? NG_F16 : NG_F32;
      const bool x16 = d < 2;
      l = ng_rmsnorm_fwd_launch(h2, true, rows, fb[i].n, xd, true);
      assert_fit_or_rules(&l, x16 ? fb[i].fwd_wg : 0, 2, 264);
      l = ng_rmsnorm_fwd_launch(h2, false, rows, fb[i].n, xd, true);
      assert_fit_or_rules(&l, x16 ? fb[i].rms_wg : 0, 4, 0);
      for (int dw = 0; dw < 2; dw++) {
        assert_false(ng_rmsnorm_bwd_plan(h2, rows, fb[i].n, xd, true, true, dw, &l, &c2));
        assert_fit_or_rules(&l, x16 ? fb[i].bwd_wg : 0, 2, 264);
        (void)ng_rmsnorm_bwd_plan(h1, rows, fb[i].n, xd, true, true, dw, &l, &c1);
        assert_fit_or_rules(&l, 0, 0, 0);
      }
    }
    l = ng_rmsnorm_fwd_launch(h1, true, rows, fb[i].n, NG_BF16, true);
    assert_fit_or_rules(&l, 0, 0, 0);
    l = ng_rmsnorm_fwd_launch(h1, false, rows, fb[i].n, NG_BF16, true);
    assert_fit_or_rules(&l, 0, 0, 0);
  }
  /* ... and RMSNorm's bf16 backward at 9217-12288 on 768 x 2 a group a compute unit with the
   * prefetch, its frozen pass on that shape and grid (f16 too since the eleventh round), and at
   * 13312-14336 on 1024 x 2 with that grid; at 8704-9216 on 576 x 2 (the ninth round, f16 too),
   * frozen on two groups a compute unit; 16384 keeps 1024 x 2 (the entry before; frozen, the
   * rules' grid), 8192, f16 past 12288 and the H100 the rules' */
  for (int dw = 0; dw < 2; dw++) {
    const size_t rb[] = {8704, 9216, 9728, 10240, 11264, 12288, 13312, 14336, 16384};
    for (size_t i = 0; i < NG_ARRAY_LEN(rb); i++) {
      const size_t rows = (1u << 25) / rb[i];
      const unsigned wg = rb[i] <= 9216 ? 576 : rb[i] <= 12288 ? 768 : 1024;
      const bool grid = dw || rb[i] <= 14336;
      assert_false(ng_rmsnorm_bwd_plan(h2, rows, rb[i], NG_BF16, false, false, dw, &l, &c2));
      assert_fit_or_rules(&l, wg, 2, grid ? (!dw && rb[i] <= 9216 ? 264 : 132) : 0);
      if (!grid) assert_int_not_equal(l.groups, 132);
      const bool split16 = ng_rmsnorm_bwd_plan(h2, rows, rb[i], NG_F16, false, false, dw, &l, &c2);
      if (rb[i] <= 9216) {
        assert_false(split16);
        assert_fit_or_rules(&l, 576, 2, dw ? 132 : 264);
      } else if (rb[i] <= 12288) { /* the eleventh round: f16 on the bf16 entry's launch */
        assert_false(split16);
        assert_fit_or_rules(&l, 768, 2, 132);
      } else { /* the rules' shape and grid, frozen too */
        assert_int_not_equal((split16 ? c2.l.wg : l.wg), wg);
        assert_int_not_equal((split16 ? c2.l.groups : l.groups), 132);
      }
      (void)ng_rmsnorm_bwd_plan(h1, rows, rb[i], NG_BF16, false, false, dw, &l, &c1);
      assert_int_not_equal(l.wg, wg);
    }
    (void)ng_rmsnorm_bwd_plan(h2, 4096, 8192, NG_BF16, false, false, dw, &l, &c2);
    assert_int_not_equal(l.wg, 576);
  }
  /* ... and LayerNorm's bf16 forward on W x 4 holding the row exactly at the top of each range
   * (288 at 8704-9216, 320 to 10240, f16 too; 384 at 11264-12288, 416 to 13312), on the rules'
   * grid for that shape; 8192, 10752, 14336, f16 past 10240 and the H100 keep theirs */
  const struct {
    size_t n;
    unsigned wg;
  } ln[] = {{8192, 0},     {8704, 288},   {9216, 288},   {9728, 320}, {10240, 320},
            {10752, 0},    {11264, 384},  {12288, 384},  {12800, 416}, {13312, 416},
            {14336, 0}};
  for (size_t i = 0; i < NG_ARRAY_LEN(ln); i++) {
    const size_t rows = (1u << 25) / ln[i].n;
    l = ng_layernorm_fwd_launch(h2, rows, ln[i].n, NG_BF16, true);
    assert_fit_or_rules(&l, ln[i].wg, 4, 0);
    l = ng_layernorm_fwd_launch(h2, rows, ln[i].n, NG_F16, true);
    assert_fit_or_rules(&l, ln[i].n >= 8704 && ln[i].n <= 10240 ? ln[i].wg : 0, 4, 0);
    l = ng_layernorm_fwd_launch(h1, rows, ln[i].n, NG_BF16, true);
    assert_fit_or_rules(&l, 0, 0, 0);
  }
  /* ... and the eleventh round's PolyNorm at 4609-6144 (the twelfth's from 4097): one slice of
   * W/4 x 4 holding the row exactly (160 to 5120, 192 to 6144) with the prefetch, the forward
   * on four groups a compute unit, the backward (dW and dB, dB alone) on four to 5120 and two
   * beyond, both frozen on that grid, bf16 and f16; 4096, 6145, f32 and the H100 keep the
   * rules' power of two */
  const struct {
    size_t n;
    unsigned wg, bwd_groups;
  } pn[] = {{4096, 0, 0},     {4097, 160, 528}, {4352, 160, 528}, {4608, 160, 528},
            {4609, 160, 528}, {4864, 160, 528}, {5120, 160, 528}, {5121, 192, 264},
            {5632, 192, 264}, {6144, 192, 264}, {6145, 0, 0}};
  for (size_t i = 0; i < NG_ARRAY_LEN(pn); i++) {
    const size_t rows = (1u << 25) / pn[i].n;
    for (int d = 0; d < 4; d++) {
      ng_dtype xd;
      unsigned wg;
      ng_context *dev = case_of(d, h2, h1, pn[i].wg, &xd, &wg);
      const bool sp = ng_polynorm_fwd_plan(dev, rows, pn[i].n, xd, &c2);
      if (wg) {
        assert_true(sp);
        assert_int_equal(c2.slices, 1);
        assert_fit_or_rules(&c2.l, wg, 4, 528);
      } else if (sp) {
        assert_fit_or_rules(&c2.l, 0, 0, 0);
      }
      for (int g = 0; g < 3; g++) {
        const bool bsp = ng_polynorm_bwd_plan(dev, rows, pn[i].n, xd, g == 0, g < 2, &l, &c2);
        if (wg) {
          assert_true(bsp);
          assert_int_equal(c2.slices, 1);
          assert_fit_or_rules(&c2.l, wg, 4, pn[i].bwd_groups);
        } else {
          assert_fit_or_rules(bsp ? &c2.l : &l, 0, 0, 0);
        }
      }
    }
  }
  l = ng_rmsnorm_fwd_launch(h2, false, 3276, 10240, NG_F32, true);
  assert_int_equal(l.groups, 1056); /* the f32 entry at 9216-16384 */
  assert_false(l.prefetch);
  ng_context_release(h2);
  ng_context_release(h1);
}

/* A tuned line (tuning.txt) reaches the rows split across groups, as the override does: its
 * group count sets the split grid, its prefetch stands against PolyNorm's single-slice rule.
 * Until 2026-11-29 the split plans read the override alone, so `normgrad-cli tune`'s stored
 * grids for split rows were ignored. A line without values masks the built-in table's entry for
 * its bucket and dtype. */
static void test_tuned_split(void **state) {
  (void)state;
  const char *old = getenv("NORMGRAD_CACHE_DIR");
  char *saved = old ? strdup(old) : NULL;
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/ng-launch-rules-%ld", (long)getpid());
  setenv("NORMGRAD_CACHE_DIR", dir, 1);
  ng_context *c = h100();
  unsigned v[NG_TUNE_SLOTS] = {0};
  v[NG_TUNE_GROUPS] = 640;
  NG_OK(ng_tuning_store(c, "layernorm.bwd_frozen", 65536, v, "test"));
  v[NG_TUNE_GROUPS] = 0;
  v[NG_TUNE_PREFETCH] = 2;
  NG_OK(ng_tuning_store(c, "polynorm", 8192, v, "test"));
  /* a line without values (the rules' choice) masks the built-in table's entry for its bucket */
  const unsigned none[NG_TUNE_SLOTS] = {0};
  NG_OK(ng_tuning_store_dtype(c, "rmsnorm.bwd", NG_BF16, 16384, none, "test"));
  ng_context_release(c);
  c = h200();
  const ng_rows_mode bdw = NG_ROWS_BWD_DW | NG_ROWS_X16 | NG_ROWS_FIT2 | NG_ROWS_F32_1SLOT_512;
  assert_int_not_equal(ng_choose_row_launch_k(c, "rmsnorm.bwd", NG_BF16, 2048, 16384, true, bdw).wg,
                       1024);
  assert_int_equal(ng_choose_row_launch_k(c, "rmsnorm.bwd", NG_BF16, 2520, 13312, true, bdw).wg,
                   1024); /* another bucket: the entry */
  ng_context_release(c);
  c = h100(); /* reads the lines */
  ng_row_launch l;
  ng_coop cp;
  assert_true(ng_layernorm_bwd_plan(c, 512, 65536, NG_BF16, false, false, &l, &cp));
  assert_int_equal(cp.l.groups, 640 / cp.slices * cp.slices);
  assert_int_not_equal(cp.l.groups, 396 / cp.slices * cp.slices); /* the rules' grid */
  assert_true(ng_polynorm_bwd_plan(c, 4096, 8192, NG_BF16, true, true, &l, &cp));
  assert_true(cp.l.prefetch); /* the old kind "polynorm" serves the backward ... */
  const ng_rows_mode pf = NG_ROWS_FWD | NG_ROWS_PAIRS | NG_ROWS_X16;
  assert_true(ng_choose_row_launch_k(c, "polynorm.fwd", NG_BF16, 4096, 8192, true, pf).asked_prefetch);
  /* ... and the forward; lines of the new kinds serve their own pass alone */
  v[NG_TUNE_PREFETCH] = 0;
  v[NG_TUNE_GROUPS] = 7;
  NG_OK(ng_tuning_store(c, "polynorm.fwd", 16384, v, "test"));
  v[NG_TUNE_GROUPS] = 9;
  NG_OK(ng_tuning_store(c, "polynorm.bwd", 16384, v, "test"));
  ng_context_release(c);
  c = h100();
  assert_int_equal(ng_choose_row_launch_k(c, "polynorm.fwd", NG_BF16, 2048, 16384, true, pf).groups,
                   7);
  assert_true(ng_polynorm_bwd_plan(c, 2048, 16384, NG_BF16, true, true, &l, &cp));
  assert_int_equal(cp.l.groups, 9 / cp.slices * cp.slices);
  const unsigned pn_wg = cp.l.wg;
  /* the backward with dB alone shares that line; with both frozen (the LoRA pass) the line
   * gives the shape alone and "polynorm.bwd_frozen" the grid, which had no kind until
   * 2026-11-29 */
  assert_true(ng_polynorm_bwd_plan(c, 2048, 16384, NG_BF16, false, true, &l, &cp));
  assert_int_equal(cp.l.groups, 9 / cp.slices * cp.slices);
  assert_true(ng_polynorm_bwd_plan(c, 2048, 16384, NG_BF16, false, false, &l, &cp));
  assert_int_not_equal(cp.l.groups, 9 / cp.slices * cp.slices);
  v[NG_TUNE_GROUPS] = 22;
  v[NG_TUNE_WORKGROUP] = pn_wg == 64 ? 128 : 64; /* a frozen line's shape is not used */
  NG_OK(ng_tuning_store(c, "polynorm.bwd_frozen", 16384, v, "test"));
  v[NG_TUNE_WORKGROUP] = 0;
  ng_context_release(c);
  c = h100();
  assert_true(ng_polynorm_bwd_plan(c, 2048, 16384, NG_BF16, false, false, &l, &cp));
  assert_int_equal(cp.l.groups, 22 / cp.slices * cp.slices);
  assert_int_equal(cp.l.wg, pn_wg);
  assert_true(ng_polynorm_bwd_plan(c, 2048, 16384, NG_BF16, false, true, &l, &cp));
  assert_int_equal(cp.l.groups, 9 / cp.slices * cp.slices);
  /* the scratch query sizes the split partials by the grid of the pass with gradients, not the
   * frozen line's (here smaller) */
  v[NG_TUNE_GROUPS] = 264;
  NG_OK(ng_tuning_store(c, "polynorm.bwd", 32768, v, "test"));
  v[NG_TUNE_GROUPS] = 8;
  NG_OK(ng_tuning_store(c, "polynorm.bwd_frozen", 32768, v, "test"));
  v[NG_TUNE_GROUPS] = 0;
  ng_context_release(c);
  c = h100();
  for (int g = 0; g < 3; g++) {
    const bool dw = g != 1, db = g != 0;
    assert_true(ng_polynorm_bwd_plan(c, 1024, 32768, NG_BF16, dw, db, &l, &cp));
    assert_int_equal(cp.l.groups, 264 / cp.slices * cp.slices);
    size_t need = 0, got = 0;
    NG_OK(ng_coop_partials(&cp, 4, 1, &need));
    const ng_polynorm_params pp = {1024, 32768, 1e-6f};
    NG_OK(ng_polynorm_backward_scratch_size(c, &pp, dw, db, &got));
    assert_true(got >= need);
  }
  /* the override still comes first */
  NG_OK(ng_context_override(c, NG_TUNE_GROUPS, 264));
  assert_true(ng_layernorm_bwd_plan(c, 512, 65536, NG_BF16, false, false, &l, &cp));
  assert_int_equal(cp.l.groups, 264 / cp.slices * cp.slices);
  ng_context_release(c);
  char path[128];
  snprintf(path, sizeof path, "%s/tuning.txt", dir);
  unlink(path);
  rmdir(dir);
  if (saved) setenv("NORMGRAD_CACHE_DIR", saved, 1);
  else unsetenv("NORMGRAD_CACHE_DIR");
  free(saved);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fwd_128x4),
      cmocka_unit_test(test_half_mid), cmocka_unit_test(test_half_mid_ds),
      cmocka_unit_test(test_poly_f16_3),
      cmocka_unit_test(test_other_rules),
      cmocka_unit_test(test_poly_fwd_split),
      cmocka_unit_test(test_rms_fwd_split),
      cmocka_unit_test(test_coop_slices),
      cmocka_unit_test(test_builtin_entries),
      cmocka_unit_test(test_builtin_launches),
      cmocka_unit_test(test_tuned_split),
  };
  return NG_RUN_GROUP_TESTS(tests, NULL, NULL);
}
