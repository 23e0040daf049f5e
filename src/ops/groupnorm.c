/* GroupNorm: validation, work split and enqueue (kernels in cl/groupnorm.cl). */
#include "../ng_internal.h"

/* Units smaller than this are not worth a work-group of their own (unless the caller forces a
 * group count with NG_TUNE_GROUPS, which the tests use to reach the split path on small shapes). */
#define GN_MIN_UNIT 16384u
/* Smallest unit of whole channels of the GPU shape's larger grid (make_plan). */
#define GN_GPU_UNIT 8192u
/* Bound on units per block: every unit of a split block merges all of the block's partials. */
#define GN_MAX_UNITS 1024u

/* How a call is cut into work: U units per block (k channels each, or one of P pieces of Ls
 * elements of a channel), `units` = B·G·U in all, run by l.groups persistent work-groups. */
typedef struct gn_plan {
  ng_row_launch l;
  unsigned U, k, P, Ls, units;
  bool split;
} gn_plan;

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

static ng_status check_params(ng_context *ctx, const ng_groupnorm_params *p, size_t *count) {
  if (!ctx) return ng_fail(NG_ERR_NULL_HANDLE, "ctx is NULL");
  if (!p) return ng_fail(NG_ERR_NULL_HANDLE, "params is NULL");
  if (p->batch == 0 || p->channels == 0 || p->spatial == 0 || p->groups == 0)
    return ng_fail(NG_ERR_INVALID_SHAPE,
                   "batch (%zu), channels (%zu), spatial (%zu) and groups (%zu) must all be at "
                   "least 1",
                   p->batch, p->channels, p->spatial, p->groups);
  if (p->channels % p->groups != 0)
    return ng_fail(NG_ERR_GROUPS_NOT_DIVISIBLE, "channels %zu is not divisible by groups %zu",
                   p->channels, p->groups);
  /* 2^31, not 2^32 − 1: the kernels step 32-bit counters by a work-group or by the grid, and a
   * counter that wrapped past 2^32 would loop for ever */
  const size_t lim = (size_t)1 << 31;
  size_t n, blocks, bc;
  if (ng_mul_overflows(p->channels / p->groups, p->spatial, &n) || n > lim ||
      ng_mul_overflows(p->batch, p->groups, &blocks) || blocks > lim || p->channels > lim ||
      p->spatial > lim ||
      ng_mul_overflows(p->batch, p->channels, &bc) || ng_mul_overflows(bc, p->spatial, count))
    return ng_fail(NG_ERR_INDEX_OVERFLOW,
                   "batch %zu x channels %zu x spatial %zu (groups %zu) exceeds the supported "
                   "index range",
                   p->batch, p->channels, p->spatial, p->groups);
  return ng_check_scalar(p->eps, "eps", true);
}

static gn_plan make_plan(const ng_context *ctx, const ng_groupnorm_params *p, bool vec_ok) {
  gn_plan pl;
  pl.l = ng_choose_row_launch(ctx, SIZE_MAX, p->spatial, vec_ok, false);
  const size_t target = pl.l.groups; /* not clipped: rows was "unbounded" */
  const size_t blocks = p->batch * p->groups, cg = p->channels / p->groups;
  const size_t n = cg * p->spatial;
  const bool forced = ctx->tune[NG_TUNE_GROUPS] != NG_TUNE_AUTO;
  size_t want = ceil_div(target, blocks);
  const size_t cap = forced ? n : (n / GN_MIN_UNIT > 0 ? n / GN_MIN_UNIT : 1);
  if (want > cap) want = cap;
  size_t grid = target;
  if (!forced && pl.l.wg > 1 && want > 1) {
    /* GPU shape, blocks already split: four units per resident group where whole channels
     * give them, down to GN_GPU_UNIT elements. H100, 8192 x 4096 bf16, G = 32 (units of 8
     * channels -> 2): forward 83.8 -> 78.4 us, backward 139.5 -> 130.0, weight frozen 135.0 ->
     * 122.9. Pieces of channels that small measured slower (4x at S = 16384): each unit merges
     * the whole block's partials, and the backward's partial rows multiply. */
    size_t w4 = ceil_div(4 * target, blocks);
    const size_t cap4 = n / GN_GPU_UNIT > 0 ? n / GN_GPU_UNIT : 1;
    if (w4 > cap4) w4 = cap4;
    if (w4 > want && w4 <= cg && w4 <= GN_MAX_UNITS) {
      want = w4;
      grid = 4 * target < UINT32_MAX / 1024 ? 4 * target : UINT32_MAX / 1024;
    }
  }
  if (want > GN_MAX_UNITS) want = GN_MAX_UNITS;
  pl.k = (unsigned)cg;
  pl.P = 1;
  pl.Ls = (unsigned)p->spatial;
  pl.U = 1;
  if (want > 1 && cg >= want) { /* units of whole channels */
    pl.k = (unsigned)ceil_div(cg, want);
    pl.U = (unsigned)ceil_div(cg, pl.k);
  } else if (want > 1) { /* pieces of channels; a multiple of 8 keeps vector rows aligned */
    pl.k = 1;
    size_t ls = ceil_div(ceil_div(p->spatial, ceil_div(want, cg)), 8) * 8;
    pl.P = (unsigned)ceil_div(p->spatial, ls);
    pl.Ls = pl.P > 1 ? (unsigned)ls : (unsigned)p->spatial;
    pl.U = (unsigned)(cg * pl.P);
  }
  size_t units;
  if (ng_mul_overflows(blocks, pl.U, &units) || units > ((size_t)1 << 31)) { /* fall back: U = 1 */
    pl.k = (unsigned)cg, pl.P = 1, pl.Ls = (unsigned)p->spatial, pl.U = 1;
    units = blocks;
  }
  pl.units = (unsigned)units;
  pl.split = pl.U > 1;
  pl.l.groups = (unsigned)(grid < units ? grid : units);
  if (pl.l.groups == 0) pl.l.groups = 1;
  return pl;
}

/* The one-pass kernels (cl/groupnorm.cl, SLOTS > 0): a unit of wg·slots vectors per work-group
 * held in registers, the U units of a block exchanging statistics in global memory. */
typedef struct gn_one {
  ng_row_launch l; /* wg, slots (reg_cols), the grid in groups, the NVIDIA options */
  unsigned U, units;
  unsigned lag;  /* the one-launch kernel's: tickets between a unit's two halves */
  unsigned tags; /* the one-launch forward's tagged statistics: their first counter; 0: none */
} gn_one;

/* Work-items per group of the one-pass kernels unless NG_TUNE_WORKGROUP says otherwise. */
#define GN_ONE_WG 256u

/* Work-items per group of the one-pass kernels: GN_ONE_WG unless NG_TUNE_WORKGROUP says. */
static size_t one_wg(const ng_context *ctx) {
  const size_t maxwg = ng_max_pow2_wg(ctx);
  const size_t wg =
      ng_pow2_floor(ctx->tune[NG_TUNE_WORKGROUP] ? ctx->tune[NG_TUNE_WORKGROUP] : GN_ONE_WG);
  return wg < maxwg ? wg : maxwg;
}

/* The one-pass kernels' launch shape (the grid is set by one_plan). */
static ng_row_launch one_launch(const ng_context *ctx, const ng_row_launch *l, unsigned slots) {
  ng_row_launch o = *l;
  o.wg = (unsigned)one_wg(ctx);
  o.nv_shfl = ctx->info.nv_shfl && o.wg % 32 == 0;
  o.prefetch = false;
  o.reg_cols = slots;
  return o;
}

/* Whether the one-pass forward takes this call, and its plan: vector rows of a GPU-shaped launch
 * `l`; NG_TUNE_FUSED_REDUCE 1 / 2 forces it off / on, and by default it takes f32 x on NVIDIA,
 * the one case where it measured faster than the two kernels (H100, 8192 x 4096, G = 32: f32
 * 141 us against 189 us, 149 us with the grid of make_plan; bf16 83.2 against 83.6 us, then
 * 78.4 us with that grid; f16 90.7 against 83.4 us). A block's U units wait for each other, so
 * all of them must be resident at once: U is kept to half the compute units (one on a CPU), as
 * for the in-kernel reductions, and the grid to at least U groups. */
static bool one_plan(const ng_context *ctx, const ng_groupnorm_params *p, const ng_row_launch *l,
                     ng_dtype x_dtype, gn_one *o) {
  if (l->wg < 2 || l->vec != 8 || !ng_reduce_on(ctx, ctx->info.nv_shfl && x_dtype == NG_F32))
    return false;
  const size_t wg = one_wg(ctx);
  if (wg < 2) return false;
  const size_t umax = ng_max_waiting_groups(ctx);
  const size_t nvb = p->channels / p->groups * (p->spatial / 8);
  const size_t blocks = p->batch * p->groups;
  size_t slots = 0, U = 0;
  for (size_t sl = 1; sl <= 8; sl *= 2) {
    if (ctx->tune[NG_TUNE_REG_COLS] && sl != ctx->tune[NG_TUNE_REG_COLS]) continue;
    U = ceil_div(nvb, wg * sl);
    if (U <= umax) {
      slots = sl;
      break;
    }
  }
  size_t units;
  if (!slots || blocks > ((size_t)1 << 20) || ng_mul_overflows(blocks, U, &units) ||
      units > ((size_t)1 << 30))
    return false;
  o->l = one_launch(ctx, l, (unsigned)slots);
  size_t g = ctx->tune[NG_TUNE_GROUPS] ? ctx->tune[NG_TUNE_GROUPS]
                                       : (size_t)ctx->info.compute_units * (2048 / wg ? 2048 / wg : 1);
  if (g > units) g = units;
  if (g < U) g = U; /* a block's units wait for each other: each needs a group of its own */
  o->l.groups = o->l.grid = (unsigned)g;
  o->U = (unsigned)U;
  o->units = (unsigned)units;
  return true;
}

/* Work-items per group of the one-launch backward unless NG_TUNE_WORKGROUP says otherwise. H100,
 * bf16, 2^25 elements, G = 32, whole backward with dW: make_plan's work-group size gave 131.6 us
 * at S = 1024 and 142.8 at 65536 (units of make_plan); with the kernel's own units, 256 against
 * 512 work-items: S = 8192 113.0 / 113.9, 16384 112.4 / 114.1, 32768 113.2 / 113.9, 65536
 * 111.8 / 112.7. */
#define GN_LAG_WG 256u

/* The one-launch kernel's launch shape for a plan's launch l (the grid is set by lag_plan). */
static ng_row_launch lag_launch(const ng_context *ctx, const ng_row_launch *l) {
  ng_row_launch o = *l;
  if (!ctx->tune[NG_TUNE_WORKGROUP]) {
    const size_t maxwg = ng_max_pow2_wg(ctx);
    o.wg = (unsigned)(GN_LAG_WG < maxwg ? GN_LAG_WG : maxwg);
    o.nv_shfl = ctx->info.nv_shfl && o.wg % 32 == 0;
  }
  return o;
}

/* The kernel's chunks: GN_M vectors per lane, at most GN_MAX_CHUNKS per unit (cl/groupnorm.cl). */
#define GN_LAG_M 4u
#define GN_LAG_MAX_CHUNKS 1024u

/* The one-launch backward's plan for base plan pl: its launch (lag_launch, no grid yet) and its
 * units, each one round of the kernel's chunks (wg · GN_LAG_M vectors of 8: every lane loads
 * GN_LAG_M vectors of x and of dy at once): whole channels up to that, else pieces of a channel;
 * pl's own units where NG_TUNE_GROUPS forces the grid (and with it make_plan's units). H100,
 * bf16, 256 work-items, whole backward with dW, units of 8192 / 16384 / 32768 / 65536 elements:
 * N = 1024 113.7 / 122.9 / 129.0 / 130.0 us; 4096 114.2 / 122.4 / 129.0 / 130.0; 16384 113.7 /
 * 122.5 / 129.8 / 129.9. 8 vectors a lane with units of 16384: 111.9 at 4096 and 112.2 at
 * 16384, for twice the registers. */
static gn_plan lag_units(const ng_context *ctx, const ng_groupnorm_params *p, const gn_plan *pl) {
  gn_plan q = *pl;
  q.l = lag_launch(ctx, &pl->l);
  if (ctx->tune[NG_TUNE_GROUPS]) return q;
  const size_t E = (size_t)q.l.wg * GN_LAG_M * 8;
  const size_t S = p->spatial, cg = p->channels / p->groups, blocks = p->batch * p->groups;
  if (S <= E) {
    q.k = (unsigned)(E / S < cg ? E / S : cg);
    q.P = 1, q.Ls = (unsigned)S, q.U = (unsigned)ceil_div(cg, q.k);
  } else {
    const size_t ls = ceil_div(ceil_div(S, ceil_div(S, E)), 8) * 8;
    q.k = 1, q.P = (unsigned)ceil_div(S, ls), q.Ls = (unsigned)ls, q.U = (unsigned)(cg * q.P);
  }
  size_t units;
  if (q.U < 2 || ng_mul_overflows(blocks, q.U, &units) || units > ((size_t)1 << 30)) {
    const ng_row_launch l = q.l;
    q = *pl;
    q.l = l;
    return q;
  }
  q.units = (unsigned)units;
  q.split = true;
  return q;
}

/* Whether the one-launch backward is wanted where a call splits its blocks (the base plan pl):
 * NG_TUNE_FUSED_REDUCE 1 / 2 forces it off / on, and by default it takes NVIDIA devices, where
 * it was measured. */
static bool lag_wanted(const ng_context *ctx, const gn_plan *pl) {
  return ng_reduce_on(ctx, ctx->info.nv_shfl) && pl->split && pl->l.wg > 1;
}

/* The grid of a one-launch kernel (base plan pl, wg work-items, `units` units): as many groups
 * as a compute unit holds threads (2048 on NVIDIA), or what the caller forced. H100, bf16, whole
 * backward with dW, 264 / 528 / 1056 groups: N = 1024 119.8 / 113.7 / 113.2 us, 4096 118.0 /
 * 113.7 / 114.6, 65536 116.6 / 113.0 / 112.7. A longer lag than U (U + grid/2 up to U + 2·grid,
 * so that a block's sums are done a wave earlier) was slower with every grid: 121–141 us. */
static unsigned lag_grid(const ng_context *ctx, const gn_plan *pl, size_t wg, size_t units) {
  size_t g = ctx->tune[NG_TUNE_GROUPS] ? pl->l.groups
                                       : (size_t)ctx->info.compute_units * (2048 / wg);
  if (g == 0) g = 1;
  return (unsigned)(g < units ? g : units);
}

/* Whether a split backward takes the one-launch kernel (ng_groupnorm_bwd_lag), and its plan q:
 * units, work-group size and grid. GPU-shaped launches where lag_wanted, whose units fit the
 * kernel's chunks (a unit of one channel, or of channels a whole number of chunks long; at most
 * GN_LAG_MAX_CHUNKS chunks). Its lag is q's U, the least the kernel's deadlock argument allows. */
static bool lag_plan(const ng_context *ctx, const ng_groupnorm_params *p, const gn_plan *pl,
                     gn_plan *q) {
  if (!lag_wanted(ctx, pl) || p->batch * p->groups > ((size_t)1 << 24)) return false;
  *q = lag_units(ctx, p, pl);
  if ((size_t)q->units * 2 > UINT32_MAX / 2 || q->l.wg < 2) return false;
  const size_t lw = q->l.nv_shfl && q->l.wg % 32 == 0 ? 32 : 1, chunk = lw * GN_LAG_M;
  const size_t vec = q->l.vec, lv = p->spatial / vec;
  size_t nv; /* vectors of the largest unit */
  if (q->P > 1) {
    nv = q->Ls / vec;
  } else {
    if (q->k > 1 && lv % chunk != 0) return false;
    nv = (size_t)q->k * lv;
  }
  if ((nv + chunk - 1) / chunk > GN_LAG_MAX_CHUNKS) return false;
  q->l.groups = q->l.grid = lag_grid(ctx, pl, q->l.wg, q->units);
  return true;
}

/* Register slots of the one-launch split forward: units of wg · 4 vectors, one round each, as
 * the backward's. */
#define GN_LAG_SLOTS 4u
/* Units whose values the one-launch kernels may publish as tagged words (1 MiB of them). */
#define GN_TAG_MAX_UNITS 65536u

/* Where a one-launch kernel's tagged words start in the queue's counter area, after its
 * `counters` (16-byte aligned), or 0 (none) where they are not `wanted` or units exceed
 * GN_TAG_MAX_UNITS. They take 16 bytes a unit (cl/groupnorm.cl, gn_tag_put). */
static unsigned tags_at(bool wanted, size_t counters, size_t units) {
  return wanted && units <= GN_TAG_MAX_UNITS ? (unsigned)((counters + 3) & ~(size_t)3) : 0u;
}
/* The counter area a one-launch call needs: its counters, and its tagged words where tags_at
 * placed them (four counters a unit). */
static size_t tagged_area(unsigned tags, size_t counters, size_t units) {
  return tags ? tags + 4 * units : counters;
}

/* Whether a split forward takes the one-launch kernel (ng_groupnorm_fwd_lag), and its launch,
 * U, units and lag: where lag_wanted, on vector rows (the kernel holds 16-byte slots), for blocks
 * of at most wg units. */
static bool fwd_lag_plan(const ng_context *ctx, const ng_groupnorm_params *p, const gn_plan *pl,
                         gn_one *o) {
  if (!lag_wanted(ctx, pl) || pl->l.vec != 8 || p->batch * p->groups > ((size_t)1 << 20))
    return false;
  o->l = lag_launch(ctx, &pl->l);
  o->l.reg_cols = GN_LAG_SLOTS;
  o->l.prefetch = false;
  if (o->l.wg < 2) return false;
  const size_t nvb = p->channels / p->groups * (p->spatial / 8);
  const size_t U = ceil_div(nvb, (size_t)o->l.wg * GN_LAG_SLOTS);
  /* Every ticket merges its block's U statistics, a work-item each; larger blocks take the two
   * kernels, which merge them once a unit without waiting (H100, bf16, [1, 8192, 4096] with G = 1
   * / 2 / 4 / 8, U = 4096 / 2048 / 1024 / 512: 162.1 / 107.0 / 89.6 / 83.0 us in one launch
   * against 84.5 / 83.4 / 82.6 / 78.2 us). */
  if (U > o->l.wg) return false;
  size_t units;
  if (ng_mul_overflows(p->batch * p->groups, U, &units) || units > ((size_t)1 << 30))
    return false;
  o->l.groups = o->l.grid = lag_grid(ctx, pl, o->l.wg, units);
  o->U = (unsigned)U;
  o->units = (unsigned)units;
  /* A ticket's y waits for the whole block of the unit `lag` tickets back, whose last units are
   * taken just before it at lag = U; a ticket per compute unit more lets them finish first, at
   * the cost of as many units more in L2 between a unit's two reads (bf16, H100, G = 32, blocks
   * of 2^20 elements: U + 64 / 96–192 / 256 / 528 / 1056 / 2048 took 72–74 / 70–72 / 72–73 /
   * 78–79 / 79–80 / 83–88 us, against 74–76 at U). At most a quarter of the units: a call of 256
   * units (32 blocks of 8) measured slower with 64 more. */
  o->lag = (unsigned)U + (unsigned)(ctx->info.compute_units < units / 4 ? ctx->info.compute_units
                                                                          : units / 4);
  /* On NVIDIA the statistics go through tagged words in the queue's counter area after the
   * blocks' counters (a size the context keeps for the queue); past GN_TAG_MAX_UNITS, through
   * the scratch behind a fence and a count. H100, [1, R, N], old and new binaries alternating,
   * two runs: bf16, G = 32, N = 1024-65536 63.8-64.7 -> 59.3-60.5 us; f16 at 4096 66.0-66.2 ->
   * 62.1-62.9; G = 16 at [1, 8192, 4096] 65.1-65.4 -> 61.7-62.1. */
  o->tags = tags_at(o->l.nv_shfl, 2 + 2 * p->batch * p->groups, units);
  return true;
}

/* Build options of the forward and backward programs; the launch path and
 * ng_groupnorm_for_each_variant both use these, so ng_prebuild builds exactly what calls use. */
static void pass_opts(ng_opts *o, const ng_row_launch *l, ng_dtype x_dtype, bool bwd) {
  ng_opts_init(o);
  ng_opts_add(o, "DTYPE", x_dtype);
  ng_opts_add(o, "VEC", l->vec);
  ng_opts_add(o, "WG", l->wg);
  ng_launch_opts(o, l);
  ng_opts_add(o, "BWD", bwd);
}

/* Slots of the split forward's statistics kernel (GPU shape, vector rows), 0 elsewhere. */
static unsigned stats_slots(const ng_row_launch *l) {
  return l->wg > 1 && l->vec == 8 ? 4u : 0u;
}

static void fwd_opts(ng_opts *o, const ng_row_launch *l, ng_dtype x_dtype) {
  pass_opts(o, l, x_dtype, false);
  if (stats_slots(l)) ng_opts_add(o, "SLOTS", stats_slots(l));
}

/* Options of the one-pass forward, launched as one_launch gives. */
static void one_fwd_opts(ng_opts *o, const ng_row_launch *l, ng_dtype x_dtype) {
  pass_opts(o, l, x_dtype, false);
  ng_opts_add(o, "SLOTS", l->reg_cols);
}

static void bwd_opts(ng_opts *o, const ng_row_launch *l, ng_dtype x_dtype, bool dw, bool db) {
  pass_opts(o, l, x_dtype, true);
  ng_opts_add(o, "COMPUTE_DW", dw);
  ng_opts_add(o, "COMPUTE_DB", db);
}

/* Options of the one-launch backward launched as l. With dw or db trained it writes them itself
 * (GN_FUSED_GRAD; their dtype is a kernel argument, as the weight's is), so that no
 * ng_reduce_partials launch follows: directly where a channel has one partial row (B = 1, whole
 * channels in a unit), else the last of a run's units sums its rows, in 64 registers (bf16).
 * H100, rows·N = 2^25 ([1, R, N], G = 32, f32 weights, with dW and dB), separate -> in-kernel,
 * same binary (the tail's loop not yet unrolled four times): bf16 at N = 1024 96.8-97.5 ->
 * 93.4-93.9 us, 4096 96.0-97.4 -> 93.4-93.5, 16384 97.7-100.4 -> 94.5-95.3, 65536 96.6-97.1 ->
 * 94.4-94.5; f16 at 1024 98.7-99.4 -> 95.1-96.9, 4096 97.5-97.6 -> 95.3-96.8, 16384 and 65536
 * even; f32 at 1024 172.5-173.2 -> 168.4-169.1, 4096 172.5-172.7 -> 168.3-169.4, 65536 even. */
static void lag_bwd_opts(ng_opts *o, const ng_row_launch *l, ng_dtype x_dtype, bool dw,
                         bool db) {
  bwd_opts(o, l, x_dtype, dw, db);
  if (dw || db) ng_opts_add(o, "GN_FUSED_GRAD", 1);
}

/* The held kernels (cl/groupnorm.cl, ng_groupnorm_fwd_held / ng_groupnorm_bwd_held): whole
 * blocks (plan pl unsplit, U = 1, or wide blocks however make_plan splits them) of vector rows on
 * a GPU-shaped launch, held in one work-group's registers. Their launch is the row ops' for rows
 * as long as a block: the forward's, and for the backward the frozen backward's (no partial rows
 * need a resident grid here), so that dx has the same bits whatever is frozen (grads, whether
 * the backward has a gradient, changes only the grid). Blocks beyond its registers keep the
 * kernels below. Forcing the
 * waiting kernels on (NG_TUNE_FUSED_REDUCE 2) keeps them for blocks this would take, so that they
 * stay measurable and tested. */
#define GN_HELD_MAX_VECS 2048u
#define GN_HELD_WIDE_FWD 5120u /* held_max_vecs */
#define GN_HELD_WIDE_BWD 4096u
static ng_row_launch held_launch(const ng_context *ctx, size_t blocks, size_t n, ng_dtype x_dtype,
                                 bool bwd, bool grads) {
  const ng_rows_mode mode = bwd ? ng_bwd_mode(false, x_dtype) : ng_fwd_raw_mode(x_dtype);
  ng_row_launch l = ng_choose_row_launch(ctx, blocks, n, true, mode);
  const size_t nv = n / 8;
  const bool pf_set = ctx->tune[NG_TUNE_PREFETCH] != 0;
  if (!ctx->info.nv_shfl || l.wg < 2 || l.vec != 8) return l;
  if (x_dtype == NG_F32) {
    /* f32 blocks on NVIDIA without the prefetch of each group's next block. H100, f32, [1, R, N],
     * rows·N = 2^25, kernel times in one run, forced through NORMGRAD_TUNE: blocks of 8192
     * (G = 4096 at N = 4096) forward 131.2 -> 113.7 us, both frozen 172.9 -> 146.2, with dW
     * even (153.9 / 153.8); of 16384 (G = 2048 at N = 2048 and 4096) forward 129.1 / 126.5 ->
     * 117.0 / 116.1, with dW 169.2 / 173.0 -> 144.0 / 148.3, both frozen 168.9 / 168.0 ->
     * 147.4 / 148.2; of 4096 even. */
    if (!pf_set) l.prefetch = false;
    return l;
  }
  if (nv <= 256) return l;
  /* On NVIDIA, 16-bit blocks, where the row ops' launch measured slower (H100, [1, R, N] bf16,
   * rows·N = 2^25, kernel times in one run, forced through NORMGRAD_TUNE):
   *  - forward of 513-2048 vectors: 4 a work-item, 8 groups a compute unit, no prefetch. Blocks
   *    of 8192 (G = 4096 at N = 1024 and 4096): 512 × 2 with 528 groups, prefetching, 59.4 /
   *    58.1 us, 256 × 4 with 1056 53.2 / 52.8 (54.9 / 54.3 prefetching); of 16384: 1024 × 2 with
   *    264, prefetching, 69.2, 512 × 4 with 1056 55.6 (72.2 prefetching). Blocks of 4096 keep a
   *    group a block (51.5, against 53.2 with 1056 groups);
   *  - backward of 513 vectors and more, without the prefetch: blocks of 8192 with dW 78.0 / 80.4
   *    -> 75.9 / 77.2 us, of 16384 88.8 -> 81.0; of 257-512 vectors (4096), a group per block
   *    -> 8 groups of 256 a compute unit: 85.0 -> 75.6;
   *  - f16's backward of 513-2048 vectors on 256 work-items, 4 or 8 vectors each: its kernel
   *    takes 84 registers with dW (bf16's 64), so 512 × 2 fits one group a compute unit. With dW,
   *    blocks of 8192 (G = 4096 at N = 4096 and 1024) 109.1 / 100.4 -> 78.2 / 77.2 us, of 16384
   *    83.2 -> 78.4; bf16 was even or slower (76.8 / 75.7 -> 77.0 / 76.8, 82.3 -> 88.8). */
  const bool wg_set = ctx->tune[NG_TUNE_WORKGROUP] || ctx->tune[NG_TUNE_REG_COLS];
  const bool grid_set = ctx->tune[NG_TUNE_GROUPS] != 0;
  size_t g = 0;
  if (nv > GN_HELD_MAX_VECS) {
    /* Wide blocks (held_max_vecs): as many vectors a work-item as the block needs, on 512
     * work-items, no prefetch, a group a block, but two groups a compute unit for a backward
     * with gradients; a forward past 2560 vectors on 1024 work-items, two groups a compute
     * unit, each prefetching its next block (F, below). H100,
     * bf16, [1, R, S], rows·N = 2^25, kernel times against the kernels these blocks took
     * before (ng_groupnorm_fwd / _bwd, or the one-launch ones where make_plan split them):
     *  - forward, blocks of 20480 (S = 1024, 20 channels a group) 85.7 -> 56.0 us with 512 × 5
     *    (256 × 10 60.8, 1024 × 3 73.5); 24576 88.2 -> 70.4 with 1024 × 3 (512 × 6 72.6);
     *    32768 74.2 -> 66.4 with 1024 × 4 (512 × 8 68.9); 40960 (S = 4096) 73.4 -> 62.5 with
     *    1024 × 5 (512 × 10 64.4); 132 blocks of 40960 22.4 -> 16.1;
     *  - F: the 1024-wide forward with two groups a compute unit, prefetching, against a group a
     *    block: 24576 70.7 -> 66.6, 32768 66.6 -> 64.4, 40960 63.5 -> 62.4 (four a compute unit
     *    66.7, 65.6, 60.0; three 67.9, 75.3, 62.5; at 20480 on 512 × 5 57.3 -> 69.9);
     *  - backward with dW, blocks of 20480 132.7 -> 84.9 (a group a block 89.7), 24576 137.8
     *    -> 90.7, 28672 142.6 -> 91.0, 32768 108.1 -> 98.0 (weight frozen 98.0 -> 99.6, both
     *    frozen 91.8 -> 83.7); 40960 on 512 × 10 lost (107.4 -> 121.3, both frozen 92.1 ->
     *    97.3), hence GN_HELD_WIDE_BWD. */
    const bool wide_fwd = !bwd && nv > 2560;
    if (!wg_set) {
      l.wg = wide_fwd ? 1024u : 512u;
      l.reg_cols = (unsigned)((nv + l.wg - 1) / l.wg);
    }
    if (!pf_set) l.prefetch = wide_fwd;
    g = grads || wide_fwd ? (size_t)ctx->info.compute_units * 2 : blocks;
  } else if (!bwd && nv > 512 && nv <= 2048) {
    if (!wg_set) {
      l.wg = nv <= 1024 ? 256u : 512u;
      l.reg_cols = 4;
    }
    g = (size_t)ctx->info.compute_units * 8;
    if (!pf_set) l.prefetch = false;
  } else if (bwd && nv > 512) {
    if (!pf_set) l.prefetch = false;
    if (x_dtype == NG_F16 && !wg_set && nv <= 2048) {
      l.wg = 256;
      l.reg_cols = nv <= 1024 ? 4 : 8;
    }
  } else if (bwd) {
    g = (size_t)ctx->info.compute_units * (2048 / l.wg ? 2048 / l.wg : 1);
  }
  if (g && !grid_set) {
    l.grid = (unsigned)g;
    l.groups = (unsigned)(g < blocks ? g : blocks);
  }
  return l;
}

/* Largest block of the held kernels, in vectors of 8: 16384 elements (2048 vectors), the largest
 * measured with the row ops' launch; on NVIDIA, 16-bit blocks of up to 40960 elements forward
 * and 32768 backward with the wide launch (held_launch), as measured there. */
static size_t held_max_vecs(const ng_context *ctx, ng_dtype x_dtype, bool bwd) {
  if (!ctx->info.nv_shfl || x_dtype == NG_F32) return GN_HELD_MAX_VECS;
  return bwd ? GN_HELD_WIDE_BWD : GN_HELD_WIDE_FWD;
}

/* Buffers of the held backward's per-vector pairs (HELD_BUFS) in launch l: two (no barrier
 * between blocks) for at most 2560 vectors a group, where they fit beside the work-group sum's
 * pair and the channel sums' pair a work-item (red, lt); else one where it fits (also where
 * local memory is larger, so that a launch gets the same kernel on every device); 0: neither. */
static unsigned held_bufs(const ng_context *ctx, const ng_row_launch *l) {
  const size_t cap = (size_t)l->wg * l->reg_cols, pair = 8, other = 2 * (size_t)l->wg * pair;
  if (cap <= 2560 && 2 * cap * pair + other <= ctx->info.local_mem) return 2;
  return cap * pair + other <= ctx->info.local_mem ? 1 : 0;
}

/* Whether launch l holds blocks of n elements: a GPU shape whose registers take the block, and
 * for the backward local memory for the per-vector pairs (held_bufs). */
static bool held_fits(const ng_context *ctx, const ng_row_launch *l, size_t n, ng_dtype x_dtype,
                      bool bwd) {
  return l->wg > 1 && l->vec == 8 && n / 8 <= held_max_vecs(ctx, x_dtype, bwd) &&
         !ng_row_beyond_regs(l, n) && (!bwd || held_bufs(ctx, l) > 0);
}

static bool held_plan(const ng_context *ctx, const ng_groupnorm_params *p, const gn_plan *pl,
                      ng_dtype x_dtype, bool bwd, bool grads, ng_row_launch *l) {
  if (pl->l.wg < 2 || pl->l.vec != 8 || ng_reduce_on(ctx, false)) return false;
  const size_t n = p->channels / p->groups * p->spatial;
  /* make_plan splits blocks to fill the device; wide blocks measured faster held even with a
   * block per compute unit (H100, bf16, 132 blocks of 40960: forward 22.4 -> 16.1 us) */
  if (pl->split && n / 8 <= GN_HELD_MAX_VECS) return false;
  *l = held_launch(ctx, p->batch * p->groups, n, x_dtype, bwd, grads);
  return held_fits(ctx, l, n, x_dtype, bwd);
}

/* Options of the held backward, launched as held_plan gives; `fused`: several samples whose
 * partial rows the kernel sums itself (held_fused_wanted). */
static void held_bwd_opts(const ng_context *ctx, ng_opts *o, const ng_row_launch *l,
                          ng_dtype x_dtype, bool dw, bool db, bool fused) {
  bwd_opts(o, l, x_dtype, dw, db);
  ng_opts_add(o, "SLOTS", l->reg_cols);
  if ((dw || db) && held_bufs(ctx, l) == 1) ng_opts_add(o, "HELD_BUFS", 1);
  if ((dw || db) && fused) ng_opts_add(o, "FUSED_RED", 1);
}

/* Whether the held backward of several samples sums their partial rows of dweight / dbias itself
 * (FUSED_RED, gn_held_reduce) instead of an ng_reduce_partials launch after it: on NVIDIA, where
 * it measured faster on grids of at most GN_HELD_FUSED_PER_CU groups a compute unit, and on a
 * CPU, where held launches come only from forced launch shapes (the tests);
 * NG_TUNE_FUSED_REDUCE = 1 turns it off (2 and 3 keep blocks off the held kernels altogether:
 * held_plan). held_fused_device: whether a program with it can be asked for on ctx's device. */
#define GN_HELD_FUSED_PER_CU 4u
static bool held_fused_device(const ng_context *ctx) {
  const bool cpu = (ctx->info.type & CL_DEVICE_TYPE_CPU) != 0;
  return ng_reduce_on(ctx, ctx->info.nv_shfl || cpu);
}

static bool held_fused_wanted(const ng_context *ctx, const ng_row_launch *l) {
  const bool resident = l->groups <= GN_HELD_FUSED_PER_CU * ctx->info.compute_units;
  return held_fused_device(ctx) && (resident || (ctx->info.type & CL_DEVICE_TYPE_CPU));
}

/* Floats of forward scratch: the split's unit statistics, or the one-pass kernel's. */
static size_t fwd_scratch_floats(const gn_plan *pl, const gn_one *one) {
  const size_t a = pl->split ? (size_t)pl->units * 4 : 0, b = one ? (size_t)one->units * 4 : 0;
  return a > b ? a : b;
}

/* Float offsets of the backward scratch regions: [unit sums][dw partials][db partials]. */
typedef struct gn_bwd_layout {
  size_t stats, dw, db, total; /* floats */
  size_t prows;                /* partial rows: B·P */
} gn_bwd_layout;

/* The layout of plan `used` (make_plan's, base, or the one-launch kernel's), for rows aligned as
 * vec_ok says. Its regions are sized for
 * whichever plan a call of these parameters can take, with aligned rows or not, so the scratch
 * size queries (which cannot know the alignment) give enough for every call. Unaligned rows get
 * larger work-groups from the launch choice, hence a smaller grid, and usually fewer units; but
 * where the aligned plan's fourfold units exceed GN_MAX_UNITS and the unaligned plan's do not,
 * the unaligned plan has more. */
static ng_status bwd_layout(const ng_context *ctx, const ng_groupnorm_params *p,
                            const gn_plan *base, bool vec_ok, const gn_plan *used, bool dw,
                            bool db, gn_bwd_layout *out) {
  size_t units = 0, P = 1;
  const gn_plan other = make_plan(ctx, p, !vec_ok); /* base is make_plan's for vec_ok */
  for (int i = 0; i < 2; i++) {
    const gn_plan pl = i ? other : *base;
    gn_plan q = pl;
    if (lag_wanted(ctx, &pl)) q = lag_units(ctx, p, &pl);
    const size_t u = pl.split ? pl.units : 0, uq = q.split ? q.units : 0;
    units = u > units ? u : units;
    units = uq > units ? uq : units;
    P = pl.P > P ? pl.P : P;
    P = q.P > P ? q.P : P;
  }
  size_t prows, pcount;
  if (ng_mul_overflows(p->batch, P, &prows) || prows > ((size_t)1 << 31) ||
      ng_mul_overflows(prows, p->channels, &pcount) || pcount > SIZE_MAX / 16)
    return ng_fail(NG_ERR_INDEX_OVERFLOW, "scratch size overflows");
  out->prows = p->batch * used->P;
  out->stats = 0;
  out->dw = units * 2;
  out->db = out->dw + (dw ? pcount : 0);
  out->total = out->db + (db ? pcount : 0);
  return NG_SUCCESS;
}

ng_status ng_groupnorm_forward_scratch_size(ng_context *ctx, const ng_groupnorm_params *p,
                                            size_t *bytes) {
  ng_clear_detail();
  if (!bytes) return ng_fail(NG_ERR_NULL_HANDLE, "bytes is NULL");
  size_t count;
  ng_status s = check_params(ctx, p, &count);
  if (s != NG_SUCCESS) return s;
  /* the larger of the aligned and unaligned plans (see bwd_layout); the one-pass kernel's
   * share, for the x dtype that can take it (it needs aligned rows) */
  size_t f = 0;
  for (int aligned = 0; aligned < 2; aligned++) {
    const gn_plan pl = make_plan(ctx, p, aligned != 0);
    gn_one one;
    const size_t a = fwd_scratch_floats(&pl, one_plan(ctx, p, &pl.l, NG_F32, &one) ? &one : NULL);
    const size_t b = fwd_scratch_floats(&pl, fwd_lag_plan(ctx, p, &pl, &one) ? &one : NULL);
    f = a > f ? a : f;
    f = b > f ? b : f;
  }
  *bytes = f * 4;
  return NG_SUCCESS;
}

ng_status ng_groupnorm_backward_scratch_size(ng_context *ctx, const ng_groupnorm_params *p,
                                             int compute_dweight, int compute_dbias,
                                             size_t *bytes) {
  ng_clear_detail();
  if (!bytes) return ng_fail(NG_ERR_NULL_HANDLE, "bytes is NULL");
  size_t count;
  ng_status s = check_params(ctx, p, &count);
  if (s != NG_SUCCESS) return s;
  const gn_plan pl = make_plan(ctx, p, true);
  gn_bwd_layout lay = {0, 0, 0, 0, 0};
  s = bwd_layout(ctx, p, &pl, true, &pl, compute_dweight != 0, compute_dbias != 0, &lay);
  if (s == NG_SUCCESS) *bytes = lay.total * 4;
  return s;
}

/* Optional per-channel parameter: absent, or C elements of a float dtype. */
static ng_status check_param(ng_context *ctx, ng_tensor t, const char *what, size_t c) {
  return t.mem ? ng_check_tensor(ctx, t, what, c, true) : NG_SUCCESS;
}

static ng_status check_stat(ng_context *ctx, ng_tensor t, const char *what, size_t count) {
  ng_status s = ng_check_tensor(ctx, t, what, count, true);
  if (s == NG_SUCCESS && t.dtype != NG_F32)
    s = ng_fail(NG_ERR_UNSUPPORTED_DTYPE, "%s must be f32", what);
  return s;
}

/* The forward of held blocks (held_plan): one launch, no scratch. */
static ng_status fwd_held(ng_context *ctx, cl_command_queue queue, const ng_groupnorm_params *p,
                          const ng_row_launch *l, ng_tensor x, ng_tensor weight, ng_tensor bias,
                          ng_tensor y, ng_tensor mean, ng_tensor rstd, cl_uint nwait,
                          const cl_event *wait, cl_event *event) {
  ng_opts o;
  one_fwd_opts(&o, l, x.dtype);
  cl_program prog;
  ng_status s = ng_get_program(ctx, "groupnorm", &o, &prog);
  if (s != NG_SUCCESS) return s;
  cl_ulong xo = x.offset, wo = weight.offset, bo = bias.offset, yo = y.offset;
  cl_ulong mo = mean.offset, ro = rstd.offset;
  cl_int pdt = weight.mem ? weight.dtype : bias.mem ? bias.dtype : NG_F32;
  cl_int has_w = weight.mem != NULL, has_b = bias.mem != NULL;
  cl_uint blocks = (cl_uint)(p->batch * p->groups), G = (cl_uint)p->groups;
  cl_uint Cg = (cl_uint)(p->channels / p->groups), S = (cl_uint)p->spatial;
  float eps = p->eps;
  const ng_arg args[] = {NG_ARG(x.mem),    NG_ARG(xo),    NG_ARG(weight.mem), NG_ARG(wo),
                         NG_ARG(bias.mem), NG_ARG(bo),    NG_ARG(pdt),        NG_ARG(has_w),
                         NG_ARG(has_b),    NG_ARG(y.mem), NG_ARG(yo),         NG_ARG(mean.mem),
                         NG_ARG(mo),       NG_ARG(rstd.mem), NG_ARG(ro),      NG_ARG(blocks),
                         NG_ARG(G),        NG_ARG(Cg),    NG_ARG(S),          NG_ARG(eps)};
  return ng_enqueue(ctx, queue, prog, "ng_groupnorm_fwd_held", (size_t)l->groups * l->wg, l->wg,
                    args, NG_ARRAY_LEN(args), nwait, wait, event);
}

ng_status ng_groupnorm_forward(ng_context *ctx, cl_command_queue queue,
                               const ng_groupnorm_params *p, ng_tensor x, ng_tensor weight,
                               ng_tensor bias, ng_tensor y, ng_tensor mean, ng_tensor rstd,
                               ng_tensor scratch, cl_uint nwait, const cl_event *wait,
                               cl_event *event) {
  ng_clear_detail();
  size_t count = 0;
  ng_status s = check_params(ctx, p, &count);
  if (s == NG_SUCCESS) s = ng_check_queue(ctx, queue);
  if (s == NG_SUCCESS) s = ng_check_wait_list(nwait, wait);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, x, "x", count, true);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, y, "y", count, true);
  if (s == NG_SUCCESS) s = ng_check_same_dtype(x, "x", y, "y");
  if (s == NG_SUCCESS) s = check_param(ctx, weight, "weight", p->channels);
  if (s == NG_SUCCESS) s = check_param(ctx, bias, "bias", p->channels);
  if (s == NG_SUCCESS && weight.mem && bias.mem)
    s = ng_check_same_dtype(weight, "weight", bias, "bias");
  if (s == NG_SUCCESS) s = check_stat(ctx, mean, "mean", p->batch * p->groups);
  if (s == NG_SUCCESS) s = check_stat(ctx, rstd, "rstd", p->batch * p->groups);
  if (s != NG_SUCCESS) return s;

  const bool vec_ok =
      ng_vec_aligned(ctx, x, p->spatial, 8) && ng_vec_aligned(ctx, y, p->spatial, 8);
  const gn_plan pl = make_plan(ctx, p, vec_ok);
  ng_row_launch hl;
  if (held_plan(ctx, p, &pl, x.dtype, false, false, &hl))
    return fwd_held(ctx, queue, p, &hl, x, weight, bias, y, mean, rstd, nwait, wait, event);
  gn_one one;
  cl_mem sync = NULL; /* the one-pass or one-launch kernel's counters; NULL: the two kernels */
  /* By default the one-launch kernel first, for f32 x too, then the one-pass kernel (f32 x on
   * NVIDIA, for blocks of more units than the one-launch kernel takes); forced on (reduce=2,
   * as the tests do), the one-pass kernel first, so that it stays reachable. H100, f32, the
   * one-pass kernel -> the one-launch kernel, three runs: [1, R, N] with G = 32 at N = 1024 /
   * 4096 / 65536 137.9-138.9 / 135.3-136.3 / 133.5-134.7 us -> 131.3-132.7 / 131.2-132.3 /
   * 131.2-132.6 (0.66-0.68 -> 0.69-0.70), [4, 320, 16384] 93.7-94.7 -> 76.1-76.9 (0.61 ->
   * 0.75); blocks too large for it, [1, 4096, 4096] with G = 4, one-pass against the two
   * kernels 85.9-86.7 / 85.8-87.2. */
  bool lagf = false, onepass = false;
  if (ctx->fused_reduce == 0) {
    lagf = fwd_lag_plan(ctx, p, &pl, &one);
    onepass = !lagf && one_plan(ctx, p, &pl.l, x.dtype, &one);
  } else {
    onepass = one_plan(ctx, p, &pl.l, x.dtype, &one);
    lagf = !onepass && fwd_lag_plan(ctx, p, &pl, &one);
  }
  if (onepass || lagf) {
    const size_t n = 2 + 2 * p->batch * p->groups;
    s = ng_sync_area(ctx, queue, lagf ? tagged_area(one.tags, n, one.units) : n, &sync);
    if (s != NG_SUCCESS) return s;
  }
  ng_opts o;
  if (sync)
    one_fwd_opts(&o, &one.l, x.dtype);
  else
    fwd_opts(&o, &pl.l, x.dtype);
  cl_program prog;
  s = ng_get_program(ctx, "groupnorm", &o, &prog);
  ng_scratch sc;
  if (s == NG_SUCCESS)
    s = ng_scratch_acquire(ctx, scratch, fwd_scratch_floats(&pl, sync ? &one : NULL) * 4, &sc);
  if (s != NG_SUCCESS) {
    if (sync) clReleaseMemObject(sync);
    return s;
  }
  if (sync) {
    cl_ulong xo = x.offset, wo = weight.offset, bo = bias.offset, yo = y.offset;
    cl_ulong mo = mean.offset, ro = rstd.offset, po = sc.offset_bytes / 4, so = 0;
    cl_int pdt = weight.mem ? weight.dtype : bias.mem ? bias.dtype : NG_F32;
    cl_int has_w = weight.mem != NULL, has_b = bias.mem != NULL;
    cl_uint units = one.units, G = (cl_uint)p->groups, Cg = (cl_uint)(p->channels / p->groups);
    cl_uint S = (cl_uint)p->spatial, U = one.U;
    float eps = p->eps;
    cl_uint lag = lagf ? one.lag : 0, tags = lagf ? one.tags : 0;
    const ng_arg args[] = {
        NG_ARG(x.mem),    NG_ARG(xo),    NG_ARG(weight.mem), NG_ARG(wo),       NG_ARG(bias.mem),
        NG_ARG(bo),       NG_ARG(pdt),   NG_ARG(has_w),      NG_ARG(has_b),    NG_ARG(y.mem),
        NG_ARG(yo),       NG_ARG(mean.mem), NG_ARG(mo),      NG_ARG(rstd.mem), NG_ARG(ro),
        NG_ARG(sc.mem),   NG_ARG(po),    NG_ARG(sync),       NG_ARG(so),       NG_ARG(units),
        NG_ARG(G),        NG_ARG(Cg),    NG_ARG(S),          NG_ARG(U),        NG_ARG(eps),
        NG_ARG(lag),      NG_ARG(tags)}; /* the one-launch kernel's, its last two arguments */
    s = ng_enqueue(ctx, queue, prog, lagf ? "ng_groupnorm_fwd_lag" : "ng_groupnorm_fwd_one",
                   (size_t)one.l.groups * one.l.wg, one.l.wg, args,
                   NG_ARRAY_LEN(args) - (lagf ? 0 : 2), nwait, wait, event);
    clReleaseMemObject(sync);
    ng_scratch_release(&sc);
    return s;
  }

  const ng_dtype pdt_ = weight.mem ? weight.dtype : bias.mem ? bias.dtype : NG_F32;
  cl_int pdt = pdt_, has_w = weight.mem != NULL, has_b = bias.mem != NULL, split = pl.split;
  cl_ulong xo = x.offset, wo = weight.offset, bo = bias.offset, yo = y.offset;
  cl_ulong mo = mean.offset, ro = rstd.offset, po = sc.offset_bytes / 4;
  cl_uint units = pl.units, G = (cl_uint)p->groups, Cg = (cl_uint)(p->channels / p->groups);
  cl_uint S = (cl_uint)p->spatial, U = pl.U, k = pl.k, P = pl.P, Ls = pl.Ls;
  float eps = p->eps;
  const ng_arg args[] = {NG_ARG(x.mem),    NG_ARG(xo),       NG_ARG(weight.mem), NG_ARG(wo),
                         NG_ARG(bias.mem), NG_ARG(bo),       NG_ARG(pdt),        NG_ARG(has_w),
                         NG_ARG(has_b),    NG_ARG(y.mem),    NG_ARG(yo),         NG_ARG(mean.mem),
                         NG_ARG(mo),       NG_ARG(rstd.mem), NG_ARG(ro),         NG_ARG(sc.mem),
                         NG_ARG(po),       NG_ARG(units),    NG_ARG(G),          NG_ARG(Cg),
                         NG_ARG(S),        NG_ARG(U),        NG_ARG(k),          NG_ARG(P),
                         NG_ARG(Ls),       NG_ARG(eps),      NG_ARG(split)};
  const size_t global = (size_t)pl.l.groups * pl.l.wg;
  if (pl.split && stats_slots(&pl.l)) {
    const ng_arg sargs[] = {NG_ARG(x.mem), NG_ARG(xo), NG_ARG(sc.mem), NG_ARG(po), NG_ARG(units),
                            NG_ARG(Cg),    NG_ARG(S),  NG_ARG(U),      NG_ARG(k),  NG_ARG(P),
                            NG_ARG(Ls)};
    /* a group per unit: a plain grid, so groups that finish make room for the next ones */
    const size_t sg = units < (1u << 20) ? units : (1u << 20);
    s = ng_enqueue(ctx, queue, prog, "ng_groupnorm_fwd_stats", sg * pl.l.wg, pl.l.wg,
                   sargs, NG_ARRAY_LEN(sargs), nwait, wait, NULL);
  } else {
    s = ng_enqueue(ctx, queue, prog, "ng_groupnorm_fwd", global, pl.l.wg, args,
                   NG_ARRAY_LEN(args), nwait, wait, pl.split ? NULL : event);
  }
  if (s == NG_SUCCESS && pl.split) /* same arguments but the last */
    s = ng_enqueue(ctx, queue, prog, "ng_groupnorm_fwd_apply", global, pl.l.wg, args,
                   NG_ARRAY_LEN(args) - 1, 0, NULL, event);
  ng_scratch_release(&sc);
  return s;
}

/* The backward of held blocks (held_plan): one launch, which with one sample also writes
 * dweight / dbias; with more, their partial rows (one per sample) go to one reduction launch. */
static ng_status bwd_held(ng_context *ctx, cl_command_queue queue, const ng_groupnorm_params *p,
                          const ng_row_launch *l, ng_tensor dy, ng_tensor x, ng_tensor weight,
                          ng_tensor mean, ng_tensor rstd, ng_tensor dx, ng_tensor dweight,
                          ng_tensor dbias, unsigned flags, ng_tensor scratch, cl_uint nwait,
                          const cl_event *wait, cl_event *event) {
  const bool dw = dweight.mem != NULL, db = dbias.mem != NULL, grads = dw || db;
  const bool direct = p->batch == 1, acc = (flags & NG_ACCUMULATE_GRAD) != 0;
  const ng_dtype gdt = dw ? dweight.dtype : dbias.dtype;
  /* several samples: their partial rows summed in the kernel where wanted and this queue has
   * counters (at most NG_SYNC_QUEUES queues), else by ng_reduce_partials */
  ng_fused f;
  size_t reducers = 0;
  if (grads && !direct && held_fused_wanted(ctx, l)) {
    /* a column a work-item: as many of the last groups as that takes, at most those that may
     * wait */
    const size_t cols = ((dw ? 1u : 0u) + (db ? 1u : 0u)) * p->channels;
    reducers = (cols + l->wg - 1) / l->wg;
    if (reducers > ng_max_waiting_groups(ctx)) reducers = ng_max_waiting_groups(ctx);
    if (reducers > l->groups) reducers = l->groups;
  }
  ng_status s = ng_fused_plan_own(ctx, queue, reducers, dweight, dbias, acc, &f);
  if (s != NG_SUCCESS) return s;
  ng_opts o;
  held_bwd_opts(ctx, &o, l, x.dtype, dw, db, f.on);
  cl_program prog, rprog = NULL;
  s = ng_get_program(ctx, "groupnorm", &o, &prog);
  if (s == NG_SUCCESS && grads && !direct && !f.on) s = ng_reduce_program(ctx, gdt, &rprog);
  /* B·C partials per trained parameter (B·C·S was checked to fit) */
  const size_t pc = grads && !direct ? p->batch * p->channels : 0;
  ng_scratch sc;
  if (s == NG_SUCCESS)
    s = ng_scratch_acquire(ctx, scratch, ((dw ? pc : 0) + (db ? pc : 0)) * 4, &sc);
  if (s != NG_SUCCESS) return s;
  cl_int pdt = weight.mem ? weight.dtype : NG_F32, has_w = weight.mem != NULL;
  cl_ulong dyo = dy.offset, xo = x.offset, wo = weight.offset, mo = mean.offset;
  cl_ulong ro = rstd.offset, dxo = dx.offset, dwo = sc.offset_bytes / 4, dbo = dwo + (dw ? pc : 0);
  cl_ulong gwo = dweight.offset, gbo = dbias.offset;
  cl_mem dwp = dw && pc ? sc.mem : NULL, dbp = db && pc ? sc.mem : NULL;
  cl_uint blocks = (cl_uint)(p->batch * p->groups), G = (cl_uint)p->groups;
  cl_uint Cg = (cl_uint)(p->channels / p->groups), S = (cl_uint)p->spatial;
  cl_int gdti = gdt, gacc = acc, gdirect = direct;
  const ng_arg args[] = {
      NG_ARG(dy.mem),      NG_ARG(dyo),  NG_ARG(x.mem),     NG_ARG(xo),   NG_ARG(weight.mem),
      NG_ARG(wo),          NG_ARG(pdt),  NG_ARG(has_w),     NG_ARG(mean.mem), NG_ARG(mo),
      NG_ARG(rstd.mem),    NG_ARG(ro),   NG_ARG(dx.mem),    NG_ARG(dxo),  NG_ARG(dwp),
      NG_ARG(dwo),         NG_ARG(dbp),  NG_ARG(dbo),       NG_ARG(blocks), NG_ARG(G),
      NG_ARG(Cg),          NG_ARG(S),    NG_ARG(dweight.mem), NG_ARG(gwo), NG_ARG(dbias.mem),
      NG_ARG(gbo),         NG_ARG(gdti), NG_ARG(gacc),      NG_ARG(gdirect),  NG_ARG(f.sync),
      NG_ARG(f.sync_off),  NG_ARG(f.reducers)};
  s = ng_enqueue(ctx, queue, prog, "ng_groupnorm_bwd_held", (size_t)l->groups * l->wg, l->wg,
                 args, NG_ARRAY_LEN(args), nwait, wait, pc && !f.on ? NULL : event);
  if (s == NG_SUCCESS && pc && !f.on) { /* both gradients in one launch */
    const ng_reduce_section sw = {dwo, p->channels, dweight}, sb = {dbo, p->channels, dbias};
    s = ng_enqueue_reduce_sections(ctx, queue, rprog, sc.mem, (unsigned)p->batch, &sw, &sb, acc,
                                   0, NULL, event);
  }
  ng_scratch_release(&sc);
  return s;
}

ng_status ng_groupnorm_backward(ng_context *ctx, cl_command_queue queue,
                                const ng_groupnorm_params *p, ng_tensor dy, ng_tensor x,
                                ng_tensor weight, ng_tensor mean, ng_tensor rstd, ng_tensor dx,
                                ng_tensor dweight, ng_tensor dbias, unsigned flags,
                                ng_tensor scratch, cl_uint nwait, const cl_event *wait,
                                cl_event *event) {
  ng_clear_detail();
  size_t count = 0;
  ng_status s = check_params(ctx, p, &count);
  if (s == NG_SUCCESS) s = ng_check_queue(ctx, queue);
  if (s == NG_SUCCESS) s = ng_check_wait_list(nwait, wait);
  if (s == NG_SUCCESS && (flags & ~NG_ACCUMULATE_GRAD))
    s = ng_fail(NG_ERR_INVALID_VALUE, "unknown flags 0x%x", flags & ~NG_ACCUMULATE_GRAD);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, dy, "dy", count, true);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, x, "x", count, true);
  if (s == NG_SUCCESS) s = ng_check_tensor(ctx, dx, "dx", count, true);
  if (s == NG_SUCCESS) s = ng_check_same_dtype(x, "x", dy, "dy");
  if (s == NG_SUCCESS) s = ng_check_same_dtype(x, "x", dx, "dx");
  if (s == NG_SUCCESS) s = check_param(ctx, weight, "weight", p->channels);
  if (s == NG_SUCCESS) s = check_stat(ctx, mean, "mean", p->batch * p->groups);
  if (s == NG_SUCCESS) s = check_stat(ctx, rstd, "rstd", p->batch * p->groups);
  const bool compute_dw = dweight.mem != NULL, compute_db = dbias.mem != NULL;
  if (s == NG_SUCCESS && compute_dw && !weight.mem)
    s = ng_fail(NG_ERR_INVALID_VALUE, "dweight given but the op has no weight");
  if (s == NG_SUCCESS && compute_dw)
    s = ng_check_tensor(ctx, dweight, "dweight", p->channels, true);
  if (s == NG_SUCCESS && compute_dw) s = ng_check_same_dtype(weight, "weight", dweight, "dweight");
  if (s == NG_SUCCESS && compute_db) s = ng_check_tensor(ctx, dbias, "dbias", p->channels, true);
  if (s == NG_SUCCESS && compute_db && weight.mem)
    s = ng_check_same_dtype(weight, "weight", dbias, "dbias");
  if (s != NG_SUCCESS) return s;

  const bool vec_ok = ng_vec_aligned(ctx, x, p->spatial, 8) &&
                      ng_vec_aligned(ctx, dy, p->spatial, 8) &&
                      ng_vec_aligned(ctx, dx, p->spatial, 8);
  const gn_plan pl = make_plan(ctx, p, vec_ok);
  ng_row_launch hl;
  if (held_plan(ctx, p, &pl, x.dtype, true, compute_dw || compute_db, &hl))
    return bwd_held(ctx, queue, p, &hl, dy, x, weight, mean, rstd, dx, dweight, dbias, flags,
                    scratch, nwait, wait, event);
  gn_plan lq;
  const bool one = lag_plan(ctx, p, &pl, &lq);
  const gn_plan *u = one ? &lq : &pl; /* the plan the launches follow */
  gn_bwd_layout lay = {0, 0, 0, 0, 0};
  s = bwd_layout(ctx, p, &pl, vec_ok, u, compute_dw, compute_db, &lay);
  if (s != NG_SUCCESS) return s;
  const bool grads = compute_dw || compute_db;
  const ng_dtype gdt = compute_dw ? dweight.dtype : dbias.dtype;
  const bool fused_grad = one && grads; /* the one-launch kernel writes them (lag_bwd_opts) */
  ng_opts o;
  if (one) lag_bwd_opts(&o, &u->l, x.dtype, compute_dw, compute_db);
  else bwd_opts(&o, &u->l, x.dtype, compute_dw, compute_db);
  cl_program prog, rprog = NULL;
  s = ng_get_program(ctx, "groupnorm", &o, &prog);
  if (s == NG_SUCCESS && grads && !fused_grad) s = ng_reduce_program(ctx, gdt, &rprog);
  if (s != NG_SUCCESS) return s;
  cl_mem lsync = NULL; /* the one-launch kernel's counters; NULL: the two kernels */
  cl_uint tags = 0; /* the one-launch kernel's tagged sums: their first counter; 0: none */
  if (one) {
    /* the ticket and its pair, a pair per block, (fused_grad) one per run of channels, and on
     * NVIDIA, for blocks of at most wg units, 16 bytes a unit of tagged sums (cl/groupnorm.cl,
     * gn_tag_put: no fence, no count; a block of more units polls too many words and zeroes
     * them from one work-item: [1, 8192, 4096] with G = 1, U = 4096, 129.7 -> 157.5 us).
     * H100, [1, R, N], G = 32, old and new binaries alternating, two runs: bf16 with dW at
     * N = 1024-4096 91.0-91.8 -> 88.3-88.8 us, both frozen 91.6-93.1 -> 86.8-88.1, f16
     * 95.3-95.8 -> 91.3; blocks of 40960 (U = 5) even. */
    const size_t runs = fused_grad ? p->groups * (lq.U / lq.P) : 0;
    const size_t n = 2 + 2 * p->batch * p->groups + runs;
    tags = tags_at(lq.l.nv_shfl && lq.U <= lq.l.wg, n, lq.units);
    s = ng_sync_area(ctx, queue, tagged_area(tags, n, lq.units), &lsync);
    if (s != NG_SUCCESS) return s;
  }
  ng_scratch sc;
  s = ng_scratch_acquire(ctx, scratch, lay.total * 4, &sc);
  if (s != NG_SUCCESS) {
    if (lsync) clReleaseMemObject(lsync);
    return s;
  }

  cl_int pdt = weight.mem ? weight.dtype : NG_F32, has_w = weight.mem != NULL, split = u->split;
  cl_ulong dyo = dy.offset, xo = x.offset, wo = weight.offset, mo = mean.offset;
  cl_ulong ro = rstd.offset, dxo = dx.offset, base = sc.offset_bytes / 4;
  cl_ulong po = base + lay.stats, dwo = base + lay.dw, dbo = base + lay.db;
  cl_mem part = u->split ? sc.mem : NULL, dwp = compute_dw ? sc.mem : NULL;
  cl_mem dbp = compute_db ? sc.mem : NULL;
  cl_uint units = u->units, G = (cl_uint)p->groups, Cg = (cl_uint)(p->channels / p->groups);
  cl_uint S = (cl_uint)p->spatial, U = u->U, k = u->k, P = u->P, Ls = u->Ls;
  const ng_arg args[] = {
      NG_ARG(dy.mem), NG_ARG(dyo),   NG_ARG(x.mem),    NG_ARG(xo), NG_ARG(weight.mem), NG_ARG(wo),
      NG_ARG(pdt),    NG_ARG(has_w), NG_ARG(mean.mem), NG_ARG(mo), NG_ARG(rstd.mem),   NG_ARG(ro),
      NG_ARG(dx.mem), NG_ARG(dxo),   NG_ARG(part),     NG_ARG(po), NG_ARG(dwp),        NG_ARG(dwo),
      NG_ARG(dbp),    NG_ARG(dbo),   NG_ARG(units),    NG_ARG(G),  NG_ARG(Cg),         NG_ARG(S),
      NG_ARG(U),      NG_ARG(k),     NG_ARG(P),        NG_ARG(Ls), NG_ARG(split)};
  const ng_arg dx_args[] = {
      NG_ARG(dy.mem), NG_ARG(dyo),   NG_ARG(x.mem),    NG_ARG(xo), NG_ARG(weight.mem), NG_ARG(wo),
      NG_ARG(pdt),    NG_ARG(has_w), NG_ARG(mean.mem), NG_ARG(mo), NG_ARG(rstd.mem),   NG_ARG(ro),
      NG_ARG(dx.mem), NG_ARG(dxo),   NG_ARG(part),     NG_ARG(po), NG_ARG(units),      NG_ARG(G),
      NG_ARG(Cg),     NG_ARG(S),     NG_ARG(U),        NG_ARG(k),  NG_ARG(P),          NG_ARG(Ls)};
  const size_t global = (size_t)pl.l.groups * pl.l.wg;
  const bool acc = (flags & NG_ACCUMULATE_GRAD) != 0;
  if (lsync) {
    cl_ulong so = 0, gwo = dweight.offset, gbo = dbias.offset;
    cl_uint lag = U; /* the least the kernel allows, and the fastest measured */
    cl_int gacc = acc ? 1 : 0, gdti = gdt;
    const ng_arg largs[] = {
        NG_ARG(dy.mem), NG_ARG(dyo),   NG_ARG(x.mem),    NG_ARG(xo), NG_ARG(weight.mem), NG_ARG(wo),
        NG_ARG(pdt),    NG_ARG(has_w), NG_ARG(mean.mem), NG_ARG(mo), NG_ARG(rstd.mem),   NG_ARG(ro),
        NG_ARG(dx.mem), NG_ARG(dxo),   NG_ARG(part),     NG_ARG(po), NG_ARG(dwp),        NG_ARG(dwo),
        NG_ARG(dbp),    NG_ARG(dbo),   NG_ARG(lsync),    NG_ARG(so), NG_ARG(units),      NG_ARG(G),
        NG_ARG(Cg),     NG_ARG(S),     NG_ARG(U),        NG_ARG(k),  NG_ARG(P),          NG_ARG(Ls),
        NG_ARG(lag),    NG_ARG(tags),  NG_ARG(dweight.mem), NG_ARG(gwo), NG_ARG(dbias.mem),
        NG_ARG(gbo),    NG_ARG(gdti),  NG_ARG(gacc)}; /* the last six only with fused_grad */
    s = ng_enqueue(ctx, queue, prog, "ng_groupnorm_bwd_lag", (size_t)u->l.groups * u->l.wg,
                   u->l.wg, largs, (cl_uint)NG_ARRAY_LEN(largs) - (fused_grad ? 0 : 6), nwait,
                   wait, grads && !fused_grad ? NULL : event);
    clReleaseMemObject(lsync);
  } else {
    s = ng_enqueue(ctx, queue, prog, "ng_groupnorm_bwd", global, pl.l.wg, args,
                   NG_ARRAY_LEN(args), nwait, wait, pl.split || grads ? NULL : event);
    if (s == NG_SUCCESS && pl.split)
      s = ng_enqueue(ctx, queue, prog, "ng_groupnorm_bwd_dx", global, pl.l.wg, dx_args,
                     NG_ARRAY_LEN(dx_args), 0, NULL, grads ? NULL : event);
  }
  if (s == NG_SUCCESS && grads && !fused_grad) { /* both gradients in one launch */
    const ng_reduce_section sw = {dwo, p->channels, dweight}, sb = {dbo, p->channels, dbias};
    s = ng_enqueue_reduce_sections(ctx, queue, rprog, sc.mem, (unsigned)lay.prows, &sw, &sb, acc,
                                   0, NULL, event);
  }
  ng_scratch_release(&sc);
  return s;
}

/* Every program a call can use on ctx's device: per x dtype and alignment, the forward and the
 * four frozen combinations of the backward, for every work-group size the launch choice can give
 * (spatial lengths of every power of two are asked for), and the gradient reductions. */
ng_status ng_groupnorm_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user) {
  static const ng_dtype fl[] = {NG_F32, NG_F16, NG_BF16};
  ng_status s = NG_SUCCESS;
  for (int aligned = 1; aligned >= 0; aligned--)
    for (size_t S = 1; S <= ((size_t)1 << 26); S *= 2) {
      const ng_row_launch l = ng_choose_row_launch(ctx, SIZE_MAX, S, aligned != 0, false);
      for (size_t xi = 0; xi < NG_ARRAY_LEN(fl); xi++)
        for (int v = 0; v < 5 && s == NG_SUCCESS; v++) { /* forward, then dw × db */
          ng_opts o;
          if (v == 0) {
            fwd_opts(&o, &l, fl[xi]);
            /* the one-launch split forward, where the default takes it (NVIDIA) */
            if (ctx->info.nv_shfl && l.wg > 1 && l.vec == 8) {
              ng_row_launch ll = lag_launch(ctx, &l);
              ll.reg_cols = GN_LAG_SLOTS;
              ll.prefetch = false;
              ng_opts lo;
              one_fwd_opts(&lo, &ll, fl[xi]);
              s = fn(ctx, "groupnorm", &lo, user);
              if (s != NG_SUCCESS) break;
            }
            /* the one-pass forward, where the default takes it (f32 on NVIDIA) */
            const bool one = ctx->info.nv_shfl && fl[xi] == NG_F32 && l.wg > 1 && l.vec == 8;
            for (unsigned sl = 1; one && sl <= 8 && s == NG_SUCCESS; sl *= 2) {
              const ng_row_launch ol = one_launch(ctx, &l, sl);
              ng_opts oo;
              one_fwd_opts(&oo, &ol, fl[xi]);
              s = fn(ctx, "groupnorm", &oo, user);
            }
            if (s != NG_SUCCESS) break;
          } else {
            bwd_opts(&o, &l, fl[xi], (v - 1) & 1, (v - 1) >> 1);
            /* the one-launch backward's own work-group size, where the default takes it */
            const ng_row_launch ll = lag_launch(ctx, &l);
            const bool dw = (v - 1) & 1, db = (v - 1) >> 1;
            /* its options differ from o's by the size, or by writing the gradients itself */
            if (ctx->info.nv_shfl && l.wg > 1 && (ll.wg != l.wg || dw || db)) {
              ng_opts lo;
              lag_bwd_opts(&lo, &ll, fl[xi], dw, db);
              s = fn(ctx, "groupnorm", &lo, user);
              if (s != NG_SUCCESS) break;
            }
          }
          s = fn(ctx, "groupnorm", &o, user);
        }
    }
  /* the held kernels, per block length (a block's launch is that of the next power of two, but
   * for the prefetch, which the rules give some lengths in between and not the power: both);
   * then wide blocks every 512 vectors, which meets each of their slot counts */
  for (size_t n = 8; n <= 8 * (size_t)GN_HELD_WIDE_FWD && s == NG_SUCCESS;
       n = n < 8 * GN_HELD_MAX_VECS ? 2 * n : n + 8 * 512)
    for (size_t xi = 0; xi < NG_ARRAY_LEN(fl) && s == NG_SUCCESS; xi++)
      for (int v = 0; v < 5 && s == NG_SUCCESS; v++) { /* forward, then dw × db */
        ng_row_launch l = held_launch(ctx, (size_t)1 << 20, n, fl[xi], v > 0, v > 1);
        if (!held_fits(ctx, &l, n, fl[xi], v > 0)) continue;
        for (int pf = 0; pf < (l.nv_shfl ? 2 : 1) && s == NG_SUCCESS; pf++) {
          l.prefetch = pf == 1;
          ng_opts o;
          if (v == 0) one_fwd_opts(&o, &l, fl[xi]);
          else held_bwd_opts(ctx, &o, &l, fl[xi], (v - 1) & 1, (v - 1) >> 1, false);
          s = fn(ctx, "groupnorm", &o, user);
          if (s == NG_SUCCESS && v > 1 && held_fused_device(ctx)) { /* several samples */
            held_bwd_opts(ctx, &o, &l, fl[xi], (v - 1) & 1, (v - 1) >> 1, true);
            s = fn(ctx, "groupnorm", &o, user);
          }
        }
      }
  return s == NG_SUCCESS ? ng_reduce_for_each_variant(ctx, fn, user) : s;
}
