/* `normgrad-cli tune OP`: search the launch parameters of an op's row kernels on this device,
 * check every candidate's outputs against the built-in default's, time the ones that agree, and
 * store each winner in the tuned table (tuning.txt in the cache folder, docs/tuning.md), where
 * contexts created later on this device find it. */
#include "cli.h"
#include "progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CANDIDATES 160
#define MAX_NS 16

const char cli_tune_usage[] =
    "usage: normgrad-cli tune OP [--hidden N[,N...]] [--pass forward|backward|frozen|all]\n"
    "                         [--dtype f32|f16|bf16] [--total E] [--frozen-slack PCT|off]\n"
    "                         [--bucket] [--dry-run] [--json] [--device SEL]\n"
    "\n"
    "OP: rmsnorm, fused-add-rmsnorm, layernorm or polynorm. For each row length N (default\n"
    "1024,4096,16384) and pass (default all: forward, backward with weight gradients, backward\n"
    "with the weights frozen; polynorm's backward with dW or dB alone shares the backward's\n"
    "launch, its frozen pass is the one with both frozen), on random data of E/N rows\n"
    "(default E = 2^25 elements, past a 50 MB cache):\n"
    "  - candidates: work-group size, vector slots per work-item, group count and prefetch\n"
    "    (NVIDIA: each group's next row into L2; CPUs: the rows read from memory, 2 KB\n"
    "    ahead, or 512 B-8 KB on the default grid), chosen around the device's properties;\n"
    "    on GPUs, rows too long for groups of one slot a work-item and too short to stream\n"
    "    also try groups of 128-512 that split them, on 2-8 groups a compute unit, and\n"
    "    every GPU scan the groups that hold the row exactly (two or four slots, a multiple\n"
    "    of 32 that is not a power of two, e.g. 768 x 2 for 1536 vectors);\n"
    "  - each candidate's outputs must match the built-in default's (relative 2^-6 for 16-bit\n"
    "    outputs, 1e-4 for f32); one that does not is rejected and reported;\n"
    "  - the rest are timed (median of OpenCL profiling times); the three fastest that beat\n"
    "    the default by >= 1% are timed again, four times each in turn with the default, and\n"
    "    the one whose median ratio still beats it by >= 1% is stored in the cache folder's\n"
    "    tuning.txt (unless --dry-run);\n"
    "  - a backward's line also serves the passes that share its launch: the frozen backward\n"
    "    takes its work-group shape (so that dx keeps its bits), layernorm's and polynorm's\n"
    "    backwards with one gradient all of it. A candidate is stored only if none\n"
    "    of those passes, timed the same way, takes more than PCT % longer with it (default\n"
    "    1: the LoRA pass must not pay for the trained one; a negative PCT asks them to gain,\n"
    "    off skips the check); the others are reported as kept out. A frozen backward that\n"
    "    stays within it only on the candidate's grid gets a line of its own with that grid\n"
    "    and prefetch, stored beside the backward's. The frozen backward's scan runs on the\n"
    "    shape it will have: the one the backward's scan of the same run chose, else the\n"
    "    tables' (tuning.txt, the built-in table), else the rules'; it stores its grid and\n"
    "    prefetch alone.\n"
    "Stored values apply to the tuned dtype and the tuned N alone (rows of one bucket can\n"
    "want different launches: on the H200 one measured 4.9 % faster at 18432 and 28.9 % slower\n"
    "at 17408); with --bucket, to every row length in [2^k, 2^(k+1)) of the tuned N that has\n"
    "no line of its own (the only kind of line before 2026-11-29; it replaces that bucket's\n"
    "lines of single lengths). Contexts created afterwards use them; NORMGRAD_TUNE and\n"
    "ng_context_override still win. On devices the library has measured (docs/tuning.md) a built-in table applies\n"
    "after tuning.txt; the scans' default is the rules' launch, without either table, and\n"
    "the launch the tables give the pass (if any) is one more candidate: when it wins,\n"
    "nothing is stored (--json: \"table\", \"table_ms\", \"table_won\").\n"
    "  --json   one JSON object per (N, pass) on stdout\n"
    "\n"
    "usage: normgrad-cli tune gemm [--size S] [--dry-run] [--json] [--device SEL]\n"
    "\n"
    "Searches CLBlast's single-precision Xgemm parameters (used by flce): each candidate is\n"
    "timed on C = A·B of S³ (default 8192 on GPUs, 1024 on CPUs; a multiple of 64) and its\n"
    "result checked against the baseline's (exact inputs: any summation order must agree). The\n"
    "fastest is stored in tuning.txt when it gains >= 1%; later contexts on the device apply it.\n"
    "Compare against CLBlast's own defaults with NORMGRAD_TUNE=table=1.\n"
    "Exit: 0, 2 usage, 3 device failure or a failed store.\n";

typedef struct tune_target {
  const char *op;
  /* polynorm: its backward's partials are four floats a group, not a row of sums held for the
   * whole grid, so its candidates take the forward's grids (up to a group a row) */
  bool small_partials;
} tune_target;

static const tune_target targets[] = {
    {"rmsnorm", false}, {"fused-add-rmsnorm", false}, {"layernorm", false}, {"polynorm", true}};

typedef struct candidate {
  unsigned v[7]; /* indexed by ng_tune */
  double ms;
  bool ok;
} candidate;

static int cmp_d(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static ng_status apply(ng_context *ctx, const unsigned v[7]) {
  ng_status s = NG_SUCCESS;
  for (int k = NG_TUNE_WORKGROUP; k <= NG_TUNE_PREFETCH && s == NG_SUCCESS; k++)
    s = ng_context_override(ctx, (ng_tune)k, v[k]);
  if (s == NG_SUCCESS) s = ng_context_override(ctx, NG_TUNE_TABLE, 1); /* measure, not recall */
  return s;
}

/* A scan's fastest candidate is not stored on its one median: on the H100 a launch's median
 * moved by up to 4 % from one timing to the next (a scan once reported 1.04x for the default's
 * own launch, and LayerNorm's both-frozen backward at 1024 1.03x for a launch 3 % slower in A/B
 * runs). The CONFIRM_TOP fastest candidates that beat the default by 1 % are timed again, each
 * alternating with the default CONFIRM_ROUNDS times; the one with the best median of the rounds'
 * ratios wins if that median still beats the default by 1 %. */
#define CONFIRM_TOP 3
#define CONFIRM_ROUNDS 4

/* Median time of `reps` runs (after 2 warm-ups) by the profiling collector. */
static ng_status time_case(cli_env *env, const cli_bench_case *c, void *state, double *ms) {
  double t[31];
  int reps = 0;
  ng_status s = NG_SUCCESS;
  const double start = cli_now_s() * 1e3;
  for (int r = 0; r < 2 + 31 && s == NG_SUCCESS; r++) {
    cl_ulong ns = 0;
    unsigned k = 0;
    s = ng_profile_begin();
    if (s == NG_SUCCESS) s = c->run(env, state);
    ng_status s2 = ng_profile_end(&ns, &k);
    if (s == NG_SUCCESS) s = s2;
    if (s == NG_SUCCESS && r >= 2) t[reps++] = (double)ns * 1e-6;
    if (reps >= 5 && cli_now_s() * 1e3 - start > 400) break;
  }
  if (s != NG_SUCCESS) return s;
  qsort(t, (size_t)reps, sizeof t[0], cmp_d);
  *ms = t[reps / 2];
  return NG_SUCCESS;
}

/* The median over CONFIRM_ROUNDS of default time / candidate time, the two timed in turn. */
static ng_status confirm(cli_env *env, const cli_bench_case *c, void *state, const unsigned def[7],
                         const unsigned cand[7], double *ratio) {
  double r[CONFIRM_ROUNDS];
  ng_status s = NG_SUCCESS;
  for (int k = 0; k < CONFIRM_ROUNDS && s == NG_SUCCESS; k++) {
    double td = 0, tc = 0;
    s = apply(env->ctx, def);
    if (s == NG_SUCCESS) s = time_case(env, c, state, &td);
    if (s == NG_SUCCESS) s = apply(env->ctx, cand);
    if (s == NG_SUCCESS) s = time_case(env, c, state, &tc);
    r[k] = tc > 0 ? td / tc : 0;
  }
  if (s != NG_SUCCESS) return s;
  qsort(r, CONFIRM_ROUNDS, sizeof r[0], cmp_d);
  *ratio = 0.5 * (r[(CONFIRM_ROUNDS - 1) / 2] + r[CONFIRM_ROUNDS / 2]);
  return NG_SUCCESS;
}

/* A launch's work-group shape: its work-group size, slots and vector width (what a frozen kind
 * takes from the kind with gradients). copy_shape copies src's (zeros, the rules', for NULL)
 * into dst; has_shape says whether v sets any. */
static void copy_shape(unsigned dst[7], const unsigned *src) {
  dst[NG_TUNE_WORKGROUP] = src ? src[NG_TUNE_WORKGROUP] : 0;
  dst[NG_TUNE_REG_COLS] = src ? src[NG_TUNE_REG_COLS] : 0;
  dst[NG_TUNE_VECTOR] = src ? src[NG_TUNE_VECTOR] : 0;
}

static bool has_shape(const unsigned v[7]) {
  return v[NG_TUNE_WORKGROUP] || v[NG_TUNE_REG_COLS] || v[NG_TUNE_VECTOR];
}

/* The rest of a launch: its grid and prefetch (what a frozen kind's own line holds). */
static void copy_grid(unsigned dst[7], const unsigned *src) {
  dst[NG_TUNE_GROUPS] = src[NG_TUNE_GROUPS];
  dst[NG_TUNE_PREFETCH] = src[NG_TUNE_PREFETCH];
}

static bool has_grid(const unsigned v[7]) { return v[NG_TUNE_GROUPS] || v[NG_TUNE_PREFETCH]; }

/* One pass's bench tensors (spec's sizes and frozen flags) with the scratch the launches of
 * cs[0..nc) need, and for a backward its statistics from a forward at the default launch. Each
 * launch asks for its own: a row held on many groups needs a partial row a group where the
 * rules' split of it on as many needs far less (the H200's 1024 x 4 candidates at 18432 did not
 * run when the scratch was sized on the rules' shape with the largest grid). Returns a CLI exit
 * code; on failure nothing stays allocated. */
static int open_pass(cli_env *env, const cli_op *op, const cli_bench_spec *spec, bool bwd,
                     const candidate *cs, int nc, cli_bench_case cases[4], void **state,
                     char *err, size_t errlen) {
  static const unsigned none[7] = {0};
  cli_bench_spec sp = *spec;
  ng_status s = NG_SUCCESS;
  for (int i = 0; i < nc && op->bench_scratch && s == NG_SUCCESS; i++) {
    size_t b = 0;
    if (apply(env->ctx, cs[i].v) != NG_SUCCESS) continue; /* refused: never timed either */
    s = op->bench_scratch(env, spec, &b);
    if (b > sp.min_scratch) sp.min_scratch = b;
  }
  if (s == NG_SUCCESS) s = apply(env->ctx, none);
  if (s != NG_SUCCESS) return cli_fail_status(s, "tune", err, errlen);
  cli_options o;
  cli_options_init(&o);
  memset(cases, 0, 4 * sizeof cases[0]);
  int ncases = 0;
  *state = NULL;
  const int rc = op->bench_setup(env, &sp, &o, cases, &ncases, state, err, errlen);
  if (rc) return rc;
  if (bwd) s = cases[0].run(env, *state);
  if (s == NG_SUCCESS && bwd) s = clFinish(env->queue);
  if (s == NG_SUCCESS) return CLI_OK;
  op->bench_cleanup(*state);
  *state = NULL;
  return cli_fail_status(s, "tune", err, errlen);
}

/* A pass that takes what a backward-with-gradients line stores (docs/tuning.md): the frozen
 * backward its work-group shape (the reduction order, so that dx keeps its bits), and the
 * backwards with one gradient of LayerNorm and PolyNorm (the same kind) all of it. */
typedef struct inherited_pass {
  const char *what;
  bool freeze_weight, freeze_bias;
  bool shape_only; /* takes the work-group size, slots and vector width alone */
} inherited_pass;

static int inherited_passes(const tune_target *t, bool dw, inherited_pass out[3]) {
  if (!dw) return 0; /* no other pass reads a forward's or a frozen backward's line */
  out[0] = (inherited_pass){"frozen backward", true, true, true};
  if (strcmp(t->op, "layernorm") && strcmp(t->op, "polynorm")) return 1;
  out[1] = (inherited_pass){"backward with dB alone", true, false, false};
  out[2] = (inherited_pass){"backward with dW alone", false, true, false};
  return 3;
}

/* Default time / candidate time on an inherited pass, confirmed as the pass itself is: its own
 * tensors, the statistics from a forward at the default launch. A shape-only pass runs on the
 * candidate's shape with the rules' grid and prefetch, or with `with_grid` the candidate's.
 * Returns a CLI exit code. */
static int confirm_inherited(cli_env *env, const cli_op *op, size_t rows, size_t n, ng_dtype dt,
                             const inherited_pass *ip, const unsigned cand[7], bool with_grid,
                             double *ratio, char *err, size_t errlen) {
  static const unsigned none[7] = {0};
  candidate c = {{0}, 0, true};
  if (ip->shape_only) {
    copy_shape(c.v, cand);
    if (with_grid) copy_grid(c.v, cand);
  } else {
    memcpy(c.v, cand, sizeof c.v);
  }
  const cli_bench_spec spec = {rows, n, dt, ip->freeze_weight, ip->freeze_bias, 0};
  cli_bench_case cases[4];
  void *state;
  const int rc = open_pass(env, op, &spec, true, &c, 1, cases, &state, err, errlen);
  if (rc) return rc;
  const ng_status s = confirm(env, &cases[1], state, none, c.v, ratio);
  op->bench_cleanup(state);
  return s == NG_SUCCESS ? CLI_OK : cli_fail_status(s, "tune", err, errlen);
}

/* A CPU candidate: one work-item a row, `groups` groups, vector width and prefetch setting. */
static void cpu_candidate(candidate *c, unsigned vec, unsigned groups, unsigned prefetch) {
  memset(c, 0, sizeof *c);
  c->v[NG_TUNE_WORKGROUP] = 1;
  c->v[NG_TUNE_REG_COLS] = 1;
  c->v[NG_TUNE_VECTOR] = vec;
  c->v[NG_TUNE_GROUPS] = groups;
  c->v[NG_TUNE_PREFETCH] = prefetch;
}

/* GPU candidates of one work-group size, slots and group count (0: the rules'), one for each
 * prefetch setting (NVIDIA: off, on; elsewhere none). False once the list is full. */
static bool gpu_candidates(candidate *cs, int *nc, bool nv, unsigned wg, unsigned reg,
                           unsigned groups) {
  for (unsigned pf = nv ? 1 : 0; pf <= (nv ? 2u : 0u); pf++) {
    if (*nc >= MAX_CANDIDATES) return false;
    candidate *c = &cs[(*nc)++];
    memset(c, 0, sizeof *c);
    c->v[NG_TUNE_WORKGROUP] = wg;
    c->v[NG_TUNE_REG_COLS] = reg;
    c->v[NG_TUNE_GROUPS] = groups;
    c->v[NG_TUNE_PREFETCH] = pf;
  }
  return true;
}

/* Candidates around the device's properties; [0] is the built-in default. With `grid_only`
 * (frozen backward: its work-group shape is the trained backward's, so that dx is the same bits)
 * only the group count and the prefetch vary. */
static int make_candidates(cli_env *env, size_t n, size_t rows, bool dw, bool grid_only,
                           candidate *cs) {
  cl_uint cu = 1;
  size_t maxwg = 1;
  cl_device_type type = 0;
  char vendor[256] = "";
  clGetDeviceInfo(env->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
  clGetDeviceInfo(env->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof maxwg, &maxwg, NULL);
  clGetDeviceInfo(env->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  clGetDeviceInfo(env->device, CL_DEVICE_VENDOR, sizeof vendor - 1, vendor, NULL);
  int nc = 0;
  memset(&cs[nc++], 0, sizeof *cs);
  static const unsigned mult_gpu_dw[] = {1, 2, 4, 8}, mult_gpu[] = {2, 4, 8, 16, 0},
                        mult_cpu[] = {1, 2, 4, 8, 16};
  if (type & CL_DEVICE_TYPE_CPU) {
    /* grid_only: one vector width (tune_one sets the shape: the backward's) */
    for (size_t m = 0; m < sizeof mult_cpu / sizeof mult_cpu[0]; m++)
      for (unsigned vec = grid_only ? 8 : 1; vec <= 8; vec += 7)
        for (unsigned pf = 0; pf <= 1; pf++) { /* the far prefetch: default (on), off */
          if (pf && vec == 1) continue; /* only the 16-value chunks prefetch */
          cpu_candidate(&cs[nc++], vec, cu * mult_cpu[m], pf);
        }
    /* the far prefetch's distance, on the default grid (it is the memory's latency that sets
     * it, not the grid): 2 KB is the kernels' own */
    static const unsigned dist[] = {512, 1024, 4096, 8192};
    for (size_t k = 0; k < sizeof dist / sizeof dist[0]; k++)
      cpu_candidate(&cs[nc++], 8, cu * 4, dist[k]);
    return nc;
  }
  const bool nv = strstr(vendor, "NVIDIA") != NULL;
  const size_t nvec = n / 8 ? n / 8 : 1;
  size_t top = 32;
  while (top * 2 <= maxwg && top < 1024) top *= 2;
  /* Rows that no group of one slot a work-item holds and too short for the streamed shapes
   * below (bf16 and f32 N = 8193-32768 on 1024-wide devices): the shapes that fit hold them in
   * two or four slots, and the ops split the longer ones across groups instead, in slices of the
   * group's size. So the scan also tries those groups, with the rules' slots, on grids of 2, 3,
   * 4, 6 and 8 groups a compute unit. H200, bf16: RMSNorm's backward with dW at 18432 on groups
   * of 128 with six a compute unit -9.4 %, where no launch the scan had tried gained (1024 x 4
   * 38-127 % slower; the table's fifth round); PolyNorm's forward at 8704-12288, which the rules
   * hold in 1024 x 2, split on groups of 128 with four a compute unit -8.4 to -15.0 % (the
   * sixth round's last entry, found by hand: the band began at 16385 then; the band's scans at
   * 10240 and 12288 found it again, and PolyNorm's and the fused add's backward on groups of 128,
   * the seventh round). */
  const bool split_band = top >= 512 && nvec > top && nvec <= top * 4;
  /* The frozen scan's grids also take every grid a backward's candidate may give the frozen
   * pass with its line (tune_one: one group a compute unit, and 3 and 6 in the band), so that
   * the frozen scan after it can find that grid again. */
  static const unsigned mult_split[] = {2, 3, 4, 6, 8}, mult_grid_extra[] = {1, 3, 6};
  for (unsigned wg = 128; split_band && !grid_only && wg <= 512; wg *= 2)
    for (size_t m = 0; m < sizeof mult_split / sizeof mult_split[0]; m++)
      if (!gpu_candidates(cs, &nc, nv, wg, 0, (unsigned)(cu * mult_split[m]))) return nc;
  for (size_t m = 0; grid_only && m < (split_band ? 3u : 1u); m++)
    if (!gpu_candidates(cs, &nc, nv, 0, 0, (unsigned)(cu * mult_grid_extra[m]))) return nc;
  /* Groups that hold the row exactly (two or four slots, as wide as the row needs rounded up to
   * a warp) where that is not a power of two, which the loop below never tries: it holds rows of
   * 1025-2048 vectors in 1024 × 2 or 512 × 4, a quarter idle at 1536 (LayerNorm's forward at
   * 12288, 0.62 of copy on the H200, where every power-of-two and split shape tried lost). The
   * rules use such groups for RMSNorm's backward at 4104-6144 (NG_ROWS_FIT2, 0.70 -> 0.84 on the
   * H100). */
  for (unsigned reg = 2; !grid_only && reg <= 4; reg *= 2) {
    const size_t wg = ((nvec + reg - 1) / reg + 31) & ~(size_t)31;
    if (wg < 64 || wg > top || (wg & (wg - 1)) == 0) continue;
    const unsigned *mult = dw ? mult_gpu_dw : mult_gpu;
    for (size_t m = 0; m < 4; m++) /* the first four grids of the loop below */
      if (!gpu_candidates(cs, &nc, nv, (unsigned)wg, reg, (unsigned)(cu * mult[m]))) return nc;
  }
  for (unsigned reg = 1; reg <= 4; reg *= 2)
    for (size_t wg = 32; wg <= top; wg *= 2) {
      const size_t cover = wg * reg;
      /* the register-cached rows: just enough work-items; streamed rows: wide groups */
      const bool fits = cover >= nvec && (cover < 2 * nvec || wg == 32);
      const bool streams = nvec > top * 4 && wg >= 256;
      if (grid_only) {
        if (wg != 32 || reg != 1) continue; /* one pass over the group counts below */
      } else if (!fits && !streams) {
        continue;
      }
      const unsigned *mult = dw ? mult_gpu_dw : mult_gpu;
      const size_t nm = dw ? 4 : 5;
      for (size_t m = 0; m < nm; m++) {
        /* multiples of the compute units, or (0) one group per row */
        const unsigned groups =
            mult[m] ? (unsigned)(cu * mult[m])
                    : (rows > 0xffffffffu / 1024 ? 0xffffffffu / 1024 : (unsigned)rows);
        if (!gpu_candidates(cs, &nc, nv, grid_only ? 0 : (unsigned)wg, grid_only ? 0 : reg,
                            groups))
          return nc;
      }
    }
  return nc;
}

static void describe(const unsigned v[7], char *buf, size_t len) {
  if (!v[NG_TUNE_WORKGROUP] && !v[NG_TUNE_GROUPS] && !v[NG_TUNE_REG_COLS] && !v[NG_TUNE_VECTOR] &&
      !v[NG_TUNE_PREFETCH]) {
    snprintf(buf, len, "default");
    return;
  }
  snprintf(buf, len, "wg=%u reg=%u groups=%u vec=%u prefetch=%u", v[NG_TUNE_WORKGROUP],
           v[NG_TUNE_REG_COLS], v[NG_TUNE_GROUPS], v[NG_TUNE_VECTOR], v[NG_TUNE_PREFETCH]);
}

/* A rejected candidate, named on stderr with the reason. */
static void report_rejected(const cli_op *op, size_t n, const char *pass, const unsigned v[7],
                            const char *why) {
  char d[128];
  describe(v, d, sizeof d);
  cli_progress_clear();
  fprintf(stderr, "normgrad-cli: tune %s N=%zu %s: %s rejected: %s\n", op->name, n, pass, d, why);
}

/* What the command line asks of every (N, pass) */
typedef struct tune_opts {
  ng_dtype dt;
  double slack; /* --frozen-slack, NAN = off */
  bool dry, bucket, json;
} tune_opts;

/* tuning.txt's line for the tuned dtype and N alone, or with `bucket` for N's bucket */
static ng_status store_line(ng_context *ctx, const char *kind, ng_dtype dt, size_t n, bool bucket,
                            const unsigned v[7], const char *comment) {
  return bucket ? ng_tuning_store_dtype(ctx, kind, dt, n, v, comment)
                : ng_tuning_store_range(ctx, kind, dt, n, n, v, comment);
}

/* Tune one (N, pass). A frozen backward's scan runs on `shape` (the work-group size, slots and
 * vector width the backward's scan of the same run chose; NULL: the rules'), the shape it takes
 * at run time. `chosen` gets the values stored (or, with --dry-run, that would be): zeros when
 * none. Returns an exit code; prints its report. */
static int tune_one(cli_env *env, const cli_op *op, const tune_target *t, size_t n, size_t rows,
                    const tune_opts *to, const char *pass, const unsigned *shape,
                    unsigned chosen[7]) {
  const ng_dtype dt = to->dt;
  const double slack = to->slack;
  const bool dry = to->dry, json = to->json;
  char err[1024] = "", kind[64];
  const bool frozen = !strcmp(pass, "frozen"), fwd = !strcmp(pass, "forward");
  snprintf(kind, sizeof kind, "%s.%s", t->op,
           fwd ? "fwd" : frozen ? "bwd_frozen" : "bwd");
  const bool dw = !fwd && !frozen;
  static candidate cs[MAX_CANDIDATES];
  const bool grid_only = frozen;
  int nc = make_candidates(env, n, rows, dw && !t->small_partials, grid_only, cs);
  memset(chosen, 0, 7 * sizeof chosen[0]);
  /* The launch the tables give this pass today (a line of an earlier run, the built-in table)
   * is a candidate too: the scans' default is the rules', so without it a line slower than a
   * table entry could be stored over it. A frozen pass's takes its grid from it. */
  unsigned tv[7] = {0};
  int in_table = 0, table_at = -1;
  if (ng_tuning_lookup(env->ctx, kind, dt, n, tv, &in_table) == NG_SUCCESS && in_table &&
      nc < MAX_CANDIDATES) {
    memset(&cs[nc], 0, sizeof cs[nc]);
    for (int k = NG_TUNE_WORKGROUP; k <= NG_TUNE_PREFETCH; k++) cs[nc].v[k] = tv[k];
    table_at = nc++;
  }
  if (grid_only) /* the default too: it is the frozen pass without a line of its own */
    for (int i = 0; i < nc; i++) copy_shape(cs[i].v, shape);
  for (int i = 0; table_at > 0 && i < table_at; i++) /* already a candidate: time it once */
    if (!memcmp(cs[i].v, cs[table_at].v, sizeof cs[i].v)) table_at = i, nc--;
  const cli_bench_spec spec = {rows, n, dt, frozen, frozen, 0};
  cli_bench_case cases[4];
  void *state, *ref[3] = {0}, *got[3] = {0};
  int rc = open_pass(env, op, &spec, !fwd, cs, nc, cases, &state, err, sizeof err);
  if (rc) return cli_error(rc, "tune %s: %s", op->name, *err ? err : "setup failed");
  const cli_bench_case *c = &cases[fwd ? 0 : 1];
  int rejected = 0, best = 0;
  double worst_ok = 0;
  static const unsigned none[7] = {0};
  ng_status s = NG_SUCCESS;
  char label[128];
  snprintf(label, sizeof label, "tune %s N=%zu %s: candidates", op->name, n, pass);
  cli_progress pr;
  cli_progress_begin(&pr, (uint64_t)nc, label);
  for (int i = 0; i < nc && s == NG_SUCCESS; i++) {
    cli_progress_step(&pr, i ? 1 : 0);
    s = apply(env->ctx, cs[i].v);
    if (s != NG_SUCCESS) { /* a value this device cannot take: skip it */
      s = NG_SUCCESS;
      cs[i].ok = false;
      continue;
    }
    s = time_case(env, c, state, &cs[i].ms);
    if (s != NG_SUCCESS && i > 0) { /* e.g. a work-group the kernel cannot launch with */
      char why[96];
      snprintf(why, sizeof why, "it did not run (%s)", ng_status_name(s));
      report_rejected(op, n, pass, cs[i].v, why);
      s = NG_SUCCESS;
      cs[i].ok = false;
      rejected++;
      continue;
    }
    if (s != NG_SUCCESS) break;
    if (cli_outputs_read(env, c, i == 0 ? ref : got) != CLI_OK) {
      s = NG_ERR_HOST_OUT_OF_MEMORY;
      break;
    }
    if (i == 0) {
      cs[i].ok = true;
      continue;
    }
    int slot = -1;
    const double e = cli_outputs_compare(c, ref, got, &slot);
    cs[i].ok = e <= 1.0;
    if (!cs[i].ok) {
      char why[128];
      snprintf(why, sizeof why, "outputs differ from the default's by %.3g x the tolerance (%s)",
               e, slot >= 0 && c->out[slot].name ? c->out[slot].name : "?");
      report_rejected(op, n, pass, cs[i].v, why);
      rejected++;
      continue;
    }
    if (e > worst_ok) worst_ok = e;
    if (cs[i].ms < cs[best].ms) best = i;
  }
  cli_progress_end(&pr);
  /* confirm the fastest few (CONFIRM_TOP) against the default before one may be stored */
  int top[CONFIRM_TOP], ntop = 0, won = 0;
  double won_ratio = 0;
  for (int i = 1; i < nc && s == NG_SUCCESS; i++) { /* top[]: ascending times */
    if (!cs[i].ok || !(cs[i].ms < 0.99 * cs[0].ms)) continue;
    if (ntop == CONFIRM_TOP && cs[i].ms >= cs[top[CONFIRM_TOP - 1]].ms) continue;
    int at = ntop < CONFIRM_TOP ? ntop++ : CONFIRM_TOP - 1;
    for (; at > 0 && cs[top[at - 1]].ms > cs[i].ms; at--) top[at] = top[at - 1];
    top[at] = i;
  }
  double ratios[CONFIRM_TOP] = {0};
  for (int k = 0; k < ntop && s == NG_SUCCESS; k++)
    s = confirm(env, c, state, cs[0].v, cs[top[k]].v, &ratios[k]);
  for (int i = 0; i < 3; i++) {
    free(ref[i]);
    free(got[i]);
  }
  op->bench_cleanup(state);
  /* the confirmed candidates, best ratio first, until one costs no inherited pass more than
   * the slack */
  inherited_pass ip[3];
  const int nip = s == NG_SUCCESS && !isnan(slack) ? inherited_passes(t, dw, ip) : 0;
  const double floor_ratio = isnan(slack) ? 0 : 1.0 / (1.0 + slack / 100.0);
  int kept_out = 0;
  double inh_worst = 1.0;
  bool frozen_grid = false; /* the frozen pass takes the stored candidate's grid too */
  bool tried[CONFIRM_TOP] = {false};
  for (int round = 0; round < ntop && s == NG_SUCCESS && !rc && !won; round++) {
    int k = -1;
    for (int j = 0; j < ntop; j++)
      if (!tried[j] && (k < 0 || ratios[j] > ratios[k])) k = j;
    tried[k] = true;
    if (!(ratios[k] * 0.99 > 1.0)) break;
    const unsigned *cv = cs[top[k]].v;
    const bool sets_shape = has_shape(cv);
    double worst = 1.0;
    const char *lost = NULL;
    bool with_grid = false;
    for (int j = 0; j < nip && !rc; j++) {
      if (ip[j].shape_only && !sets_shape) continue; /* the frozen pass keeps its launch */
      double r = 0;
      rc = confirm_inherited(env, op, rows, n, dt, &ip[j], cv, false, &r, err, sizeof err);
      /* A shape may need its own grid: on the H200 RMSNorm's frozen backward at 18432 on the
       * split groups of 128 took 26 % longer on the rules' grid and 0.2 % on the backward's six
       * groups a compute unit. The frozen pass may then take the candidate's grid and prefetch
       * in a line of its own, stored with the backward's. */
      if (!rc && ip[j].shape_only && r < floor_ratio && has_grid(cv)) {
        double rg = 0;
        rc = confirm_inherited(env, op, rows, n, dt, &ip[j], cv, true, &rg, err, sizeof err);
        if (!rc && rg > r) r = rg, with_grid = true;
      }
      if (!rc && (!lost || r < worst)) worst = r, lost = ip[j].what;
    }
    if (rc) break;
    if (lost && worst < floor_ratio) {
      char why[160];
      snprintf(why, sizeof why, "%.3fx, but the %s takes %.3fx the time with it (%.3fx at most)",
               ratios[k], lost, 1.0 / worst, 1.0 / floor_ratio);
      report_rejected(op, n, pass, cv, why);
      kept_out++;
      continue;
    }
    won = top[k], won_ratio = ratios[k], inh_worst = worst, frozen_grid = with_grid;
  }
  apply(env->ctx, none);
  ng_context_override(env->ctx, NG_TUNE_TABLE, 0);
  if (rc) return cli_error(rc, "tune %s N=%zu %s: %s", op->name, n, pass, err);
  if (s != NG_SUCCESS) {
    rc = cli_fail_status(s, "tune", err, sizeof err);
    return cli_error(rc, "tune %s N=%zu %s: %s", op->name, n, pass, err);
  }
  const double def = cs[0].ms, win = cs[best].ms;
  /* the tables' launch won: what the pass runs already (nothing to store) */
  const bool table_won = won != 0 && won == table_at;
  const bool store = won != 0 && won_ratio * 0.99 > 1.0 && !table_won;
  char d[128], dc[128], comment[160];
  describe(cs[best].v, d, sizeof d);
  /* nothing confirmed: "default" (a frozen scan's default carries the backward's shape) */
  if (store) describe(cs[won].v, dc, sizeof dc);
  else snprintf(dc, sizeof dc, "default");
  snprintf(comment, sizeof comment, "%.4f ms vs default %.4f ms, confirmed %.3fx (%s)",
           cs[won].ms, def, won_ratio, ng_dtype_name(dt));
  const char *stored = table_won ? "no (the tables' launch is the fastest)"
                       : kept_out  ? "no (slower inherited passes)"
                       : ntop    ? "no (not confirmed)"
                                 : "no (the default is as fast)";
  if (store) { /* a frozen line's shape would be ignored: the backward's line gives it */
    memcpy(chosen, cs[won].v, 7 * sizeof chosen[0]);
    if (grid_only) copy_shape(chosen, NULL);
  }
  if (store && dry) stored = "no (--dry-run)";
  else if (store) {
    s = store_line(env->ctx, kind, dt, n, to->bucket, chosen, comment);
    if (s == NG_SUCCESS && frozen_grid) { /* its line: the grid and prefetch alone */
      unsigned fz[7] = {0};
      char fkind[64];
      copy_grid(fz, chosen);
      snprintf(fkind, sizeof fkind, "%s.bwd_frozen", t->op);
      s = store_line(env->ctx, fkind, dt, n, to->bucket, fz, "the grid of the backward's line");
    }
    if (s != NG_SUCCESS) {
      rc = cli_fail_status(s, "tune: store", err, sizeof err);
      return cli_error(CLI_DEVICE, "tune %s N=%zu %s: %s", op->name, n, pass, err);
    }
    stored = "yes";
  }
  /* the tables' launch and its time in the scan ("table": null where none applies;
   * "table_ms": null where it was rejected, named on stderr above) */
  char tj[192] = "null,\"table_ms\":null", tt[192] = "";
  if (table_at >= 0) {
    char td[128], tm[32] = "null";
    describe(cs[table_at].v, td, sizeof td);
    if (cs[table_at].ok) snprintf(tm, sizeof tm, "%.6f", cs[table_at].ms);
    snprintf(tj, sizeof tj, "\"%s\",\"table_ms\":%s", td, tm);
    snprintf(tt, sizeof tt, "  tables: %s %s ms", td, cs[table_at].ok ? tm : "(rejected)");
  }
  if (json)
    printf("{\"op\":\"%s\",\"kind\":\"%s\",\"pass\":\"%s\",\"hidden\":%zu,\"rows\":%zu,"
           "\"dtype\":\"%s\",\"candidates\":%d,\"rejected\":%d,\"default_ms\":%.6f,"
           "\"best_ms\":%.6f,\"speedup\":%.4f,\"best\":\"%s\",\"confirmed\":\"%s\","
           "\"confirmed_speedup\":%.4f,\"stored\":%s,\"worst_agreement\":%.4f,"
           "\"kept_out\":%d,\"inherited_worst\":%.4f,\"frozen_grid\":%s,\"bucket\":%s,"
           "\"table\":%s,\"table_won\":%s}\n",
           op->name, kind, pass, n, rows, ng_dtype_name(dt), nc, rejected, def, win, def / win, d,
           dc, store ? won_ratio : 1.0, store && !dry ? "true" : "false", worst_ok, kept_out,
           store ? inh_worst : 1.0, store && frozen_grid ? "true" : "false",
           to->bucket ? "true" : "false", tj, table_won ? "true" : "false");
  else
    printf("%-18s %-9s N=%-6zu %3d candidates (%d rejected)  default %.4f ms  best %.4f ms "
           "(%.2fx)  %s  confirmed: %s (%.2fx)  stored: %s%s%s%s\n",
           op->name, pass, n, nc, rejected, def, win, def / win, d, dc,
           store ? won_ratio : 1.0, stored, tt,
           kept_out ? "  (kept out: faster here, slower in a pass that shares the launch)" : "",
           store && frozen_grid ? "  (the frozen backward on its grid too)" : "");
  fflush(stdout);
  return CLI_OK;
}

static int tune_gemm(const char *dev, long long size, bool dry, bool json) {
  if (cli_parse_only) return CLI_OK;
  cli_env env;
  char err[1024];
  int rc = cli_env_open(dev, &env, err, sizeof err);
  if (rc) return cli_error(rc, "tune gemm: %s", err);
  if (size == 0) {
    cl_device_type type = 0;
    clGetDeviceInfo(env.device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    size = (type & CL_DEVICE_TYPE_CPU) ? 1024 : 8192;
  }
  char dir[4096] = "";
  if (!dry && (ng_context_get_cache_dir(env.ctx, dir, sizeof dir) != NG_SUCCESS || !*dir)) {
    cli_env_close(&env);
    return cli_error(CLI_USAGE, "tune gemm: the program cache is off; tuned values are stored "
                     "there — set NORMGRAD_CACHE_DIR or use --dry-run");
  }
  if (!json) fprintf(stderr, "tune gemm: timing CLBlast Xgemm candidates on %lld^3 ...\n", size);
  ng_gemm_tune_result r;
  ng_status s = ng_tune_gemm(env.ctx, env.queue, (size_t)size, !dry, &r);
  cli_env_close(&env);
  if (s != NG_SUCCESS) {
    rc = cli_fail_status(s, "tune gemm", err, sizeof err);
    return cli_error(rc, "%s", err);
  }
  if (json)
    printf("{\"op\":\"gemm\",\"size\":%lld,\"candidates\":%u,\"rejected\":%u,"
           "\"default_ms\":%.4f,\"best_ms\":%.4f,\"default_tflops\":%.3f,\"best_tflops\":%.3f,"
           "\"best\":\"%s\",\"stored\":%s}\n",
           size, r.candidates, r.rejected, r.default_ms, r.best_ms, r.default_tflops,
           r.best_tflops, r.best, r.stored ? "true" : "false");
  else
    printf("gemm %lld^3: %u candidates (%u rejected)  before %.3f ms (%.2f TFLOP/s)  best %.3f ms "
           "(%.2f TFLOP/s)  %s  stored: %s\n",
           size, r.candidates, r.rejected, r.default_ms, r.default_tflops, r.best_ms,
           r.best_tflops, r.best, r.stored ? "yes" : dry ? "no (--dry-run)" : "no");
  return CLI_OK;
}

int cli_cmd_tune(int argc, char **argv) {
  const char *op_name = NULL, *dev = NULL, *pass = "all", *hidden = "1024,4096,16384";
  long long total = 1ll << 25, gemm_size = 0;
  double slack = 1.0; /* --frozen-slack, NAN = off */
  ng_dtype dt = NG_BF16;
  bool dry = false, json = false, bucket = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--dry-run")) dry = true;
    else if (!strcmp(a, "--bucket")) bucket = true;
    else if (!strcmp(a, "--json")) json = true;
    else if (a[0] == '-' && a[1] == '-' && !val)
      return cli_error(CLI_USAGE, "tune: %s needs a value", a);
    else if (!strcmp(a, "--hidden")) hidden = argv[++i];
    else if (!strcmp(a, "--pass")) pass = argv[++i];
    else if (!strcmp(a, "--device")) dev = argv[++i];
    else if (!strcmp(a, "--dtype")) {
      const char *v = argv[++i];
      if (!strcmp(v, "f32")) dt = NG_F32;
      else if (!strcmp(v, "f16")) dt = NG_F16;
      else if (!strcmp(v, "bf16")) dt = NG_BF16;
      else return cli_error(CLI_USAGE, "tune: --dtype: '%s' is not f32, f16 or bf16", v);
    } else if (!strcmp(a, "--size")) {
      char err[256];
      if (cli_parse_ll(a, argv[++i], 64, 16384, &gemm_size, err, sizeof err) || gemm_size % 64)
        return cli_error(CLI_USAGE, "tune: --size: a multiple of 64 in [64, 16384]");
    } else if (!strcmp(a, "--frozen-slack")) {
      const char *v = argv[++i];
      char *end = NULL;
      const double x = strcmp(v, "off") ? strtod(v, &end) : NAN;
      if (!isnan(x) ? (end == v || *end || !(x >= -99 && x <= 100)) : strcmp(v, "off"))
        return cli_error(CLI_USAGE, "tune: --frozen-slack: '%s' is not a percentage in "
                         "[-99, 100] or off", v);
      slack = x;
    } else if (!strcmp(a, "--total")) {
      char err[256];
      if (cli_parse_ll(a, argv[++i], 1, 1ll << 34, &total, err, sizeof err))
        return cli_error(CLI_USAGE, "tune: %s", err);
    } else if (a[0] == '-') return cli_error(CLI_USAGE, "tune: unknown option '%s'", a);
    else if (op_name) return cli_error(CLI_USAGE, "tune: unexpected argument '%s'", a);
    else op_name = a;
  }
  if (!op_name) return cli_error(CLI_USAGE, "tune: missing OP (see `normgrad-cli tune --help`)");
  if (!strcmp(op_name, "gemm")) return tune_gemm(dev, gemm_size, dry, json);
  const tune_target *t = NULL;
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
    if (!strcmp(targets[i].op, op_name)) t = &targets[i];
  const cli_op *op = cli_find_op(op_name);
  if (!t || !op)
    return cli_error(CLI_USAGE, "tune: '%s' has no tunable row kernels (rmsnorm, "
                     "fused-add-rmsnorm, layernorm, polynorm)", op_name);
  const char *passes[3];
  int np = 0;
  if (!strcmp(pass, "all")) {
    passes[np++] = "forward";
    passes[np++] = "backward";
    passes[np++] = "frozen";
  } else if (!strcmp(pass, "forward") || !strcmp(pass, "backward") || !strcmp(pass, "frozen"))
    passes[np++] = pass;
  else return cli_error(CLI_USAGE, "tune: --pass '%s' is not forward, backward, frozen or all", pass);
  size_t ns[MAX_NS];
  int nn = 0;
  for (const char *p = hidden; *p;) {
    char *end = NULL;
    const long long v = strtoll(p, &end, 10);
    if (end == p || v < 1 || v > (1ll << 26) || (*end && *end != ',') || nn == MAX_NS)
      return cli_error(CLI_USAGE, "tune: --hidden: '%s' is not a list of row lengths", hidden);
    ns[nn++] = (size_t)v;
    p = *end ? end + 1 : end;
  }
  if (cli_parse_only) return CLI_OK;
  if (json) cli_progress_enable(false);
  cli_env env;
  char err[1024];
  int rc = cli_env_open(dev, &env, err, sizeof err);
  if (rc) return cli_error(rc, "tune %s: %s", op_name, err);
  char dir[4096] = "";
  if (!dry && (ng_context_get_cache_dir(env.ctx, dir, sizeof dir) != NG_SUCCESS || !*dir)) {
    cli_env_close(&env);
    return cli_error(CLI_USAGE, "tune: the program cache is off (NORMGRAD_CACHE_DIR=off?); "
                     "tuned values are stored there — set a folder or use --dry-run");
  }
  if (!json && !dry) printf("tuned values go to %s/tuning.txt\n", dir);
  const tune_opts to = {dt, slack, dry, bucket, json};
  for (int i = 0; i < nn && !rc; i++) {
    size_t rows = (size_t)total / ns[i];
    if (rows == 0) rows = 1;
    /* the frozen backward runs on the backward's shape: the one its scan just chose, else the
     * one the tables give it (a line of an earlier run, the built-in table), else the rules' */
    unsigned shape[7] = {0}, chosen[7], got[7];
    char bwd[64];
    int found = 0;
    snprintf(bwd, sizeof bwd, "%s.bwd", t->op);
    if (ng_tuning_lookup(env.ctx, bwd, dt, ns[i], got, &found) == NG_SUCCESS && found)
      copy_shape(shape, got);
    bool have_shape = has_shape(shape);
    for (int k = 0; k < np && !rc; k++) {
      rc = tune_one(&env, op, t, ns[i], rows, &to, passes[k], have_shape ? shape : NULL, chosen);
      if (!rc && !strcmp(passes[k], "backward") && has_shape(chosen)) {
        copy_shape(shape, chosen);
        have_shape = true;
      }
    }
  }
  cli_env_close(&env);
  return rc;
}
