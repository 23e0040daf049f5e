/* Launch-parameter overrides from the environment: NORMGRAD_TUNE="wg=512,reg=1,groups=264,
 * vec=8,prefetch=2" applies ng_context_override to every context the process creates, so a
 * tuning experiment needs no rebuild of the application (docs/tuning.md). */
#include "ng_internal.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *name;
  ng_tune what;
} tune_names[] = {{"wg", NG_TUNE_WORKGROUP},   {"groups", NG_TUNE_GROUPS},
                  {"vec", NG_TUNE_VECTOR},     {"reg", NG_TUNE_REG_COLS},
                  {"prefetch", NG_TUNE_PREFETCH}, {"table", NG_TUNE_TABLE}};

/* Decimal digits at *p, no sign or space, at most max; advances *p. The one number syntax of
 * NORMGRAD_TUNE and tuning.txt: sscanf's %u and strtoul take a sign and a leading space, and %u
 * wraps a value past UINT_MAX, so a damaged line could mean another value than it shows
 * (groups=4294967299 read as 3). */
static bool parse_uint(const char **p, unsigned max, unsigned *out) {
  const char *q = *p;
  unsigned v = 0;
  if (*q < '0' || *q > '9') return false;
  for (; *q >= '0' && *q <= '9'; q++) {
    const unsigned d = (unsigned)(*q - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *p = q;
  *out = v;
  return true;
}

ng_status ng_tune_apply_string(ng_context *ctx, const char *spec, const char *origin) {
  const char *p = spec;
  while (p && *p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char item[64];
    if (len == 0 || len >= sizeof item)
      return ng_fail(NG_ERR_INVALID_VALUE, "%s: malformed item in '%s'", origin, spec);
    memcpy(item, p, len);
    item[len] = '\0';
    char *eq = strchr(item, '=');
    if (!eq) return ng_fail(NG_ERR_INVALID_VALUE, "%s: '%s' is not NAME=VALUE", origin, item);
    *eq = '\0';
    const char *num = eq + 1;
    unsigned v = 0;
    if (!parse_uint(&num, UINT_MAX, &v) || *num != '\0')
      return ng_fail(NG_ERR_INVALID_VALUE, "%s: '%s' is not a number", origin, eq + 1);
    size_t k = 0;
    while (k < sizeof tune_names / sizeof tune_names[0] && strcmp(tune_names[k].name, item)) k++;
    /* reduce= is an override only: the tuned table's lines have no such field */
    const bool reduce = strcmp(item, "reduce") == 0;
    if (k == sizeof tune_names / sizeof tune_names[0] && !reduce)
      return ng_fail(NG_ERR_INVALID_VALUE,
                     "%s: unknown name '%s' (wg, groups, vec, reg, prefetch, table, reduce)",
                     origin, item);
    ng_status s = ng_context_override(ctx, reduce ? NG_TUNE_FUSED_REDUCE : tune_names[k].what, v);
    if (s != NG_SUCCESS) {
      char why[256];
      snprintf(why, sizeof why, "%s", ng_last_error_detail());
      return ng_fail(s, "%s: %s", origin, why);
    }
    p = end ? end + 1 : NULL;
  }
  return NG_SUCCESS;
}

ng_status ng_tune_from_env(ng_context *ctx) {
  const char *v = getenv("NORMGRAD_TUNE");
  if (!v || !*v) return NG_SUCCESS;
  return ng_tune_apply_string(ctx, v, "NORMGRAD_TUNE");
}

/* ---- the tuned-parameter table ------------------------------------------------------------------
 * `<cache folder>/tuning.txt`, written by ng_tuning_store (normgrad-cli tune) and read when a
 * context is created. One line per device, kernel kind, row-length bucket (floor(log2 n)) and,
 * where the line names one, x dtype and row lengths:
 *   ng-tune-1 DEVICE-ID KIND LOG2N [dtype=bf16] [n=LO[-HI]] wg=.. groups=.. vec=.. reg=.. …  # …
 * A line without a dtype serves every dtype (the only kind before 2026-11-29); one with a dtype
 * comes first for that dtype: on the H200 one launch measured 6 % faster in bf16 and 25 % and
 * 46 % slower in f16 and f32 (docs/tuning.md, "The built-in table"). A line with n= serves rows
 * of LO..HI elements alone (LOG2N is LO's bucket) and comes before the bucket's lines: in one
 * bucket the H200's LayerNorm backward on split rows of 128 measured 4.9 % faster at 18432 and
 * 28.9 % slower at 17408, so `tune` stores the length it measured. DEVICE-ID hashes the
 * platform, device and driver (the disk cache's device key), so a driver update retires old
 * entries. Lines that do not parse, or name values the device cannot take, are ignored: a
 * damaged file costs speed, never a failed call. */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const tuned_kinds[] = {
    "rmsnorm.fwd",   "rmsnorm.bwd",   "rmsnorm.bwd_frozen",   "fused-add-rmsnorm.fwd",
    "fused-add-rmsnorm.bwd", "fused-add-rmsnorm.bwd_frozen", "layernorm.fwd", "layernorm.bwd",
    "layernorm.bwd_frozen", "polynorm", "polynorm.fwd", "polynorm.bwd", "polynorm.bwd_frozen"};

static int kind_index(const char *kind) {
  for (size_t i = 0; i < NG_ARRAY_LEN(tuned_kinds); i++)
    if (kind && !strcmp(kind, tuned_kinds[i])) return (int)i;
  return -1;
}

static unsigned log2_floor(size_t n) {
  unsigned b = 0;
  while (n > 1) {
    n >>= 1;
    b++;
  }
  return b;
}

void ng_tuning_device_id(const ng_context *ctx, char out[17]) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
  for (const char *p = ctx->disk.device_key ? ctx->disk.device_key : ctx->info.name; *p; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211ull;
  snprintf(out, 17, "%016llx", (unsigned long long)h);
}

static char *tuning_path(const char *dir) {
  size_t len = strlen(dir) + sizeof "/tuning.txt";
  char *p = malloc(len);
  if (p) snprintf(p, len, "%s/tuning.txt", dir);
  return p;
}

/* The dtypes a tuned line may name */
static const ng_dtype line_dtypes[] = {NG_F32, NG_F16, NG_BF16};

static bool line_dtype_ok(ng_dtype d) {
  for (size_t i = 0; i < NG_ARRAY_LEN(line_dtypes); i++)
    if (line_dtypes[i] == d) return true;
  return false;
}

/* Whether c ends an item of a line (a dtype's name, a range of lengths) */
static bool item_end(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || !c; }

/* " n=LO" or " n=LO-HI" at *p (advanced past it): rows of LO..HI elements, LO in bucket log2n;
 * none: *lo = *hi = 0. False when it is there but malformed. */
static bool parse_rows(const char **p, unsigned log2n, unsigned *lo, unsigned *hi) {
  *lo = *hi = 0;
  if (strncmp(*p, " n=", 3)) return true;
  *p += 3;
  if (!parse_uint(p, UINT_MAX, lo)) return false;
  *hi = *lo;
  if (**p == '-') {
    (*p)++;
    if (!parse_uint(p, UINT_MAX, hi)) return false;
  }
  return *lo >= 1 && *hi >= *lo && log2_floor(*lo) == log2n && item_end(**p);
}

/* Parse one line; true when it is an entry for device `id` with valid values (*dtype -1 when
 * the line names none). */
static bool parse_line(const ng_context *ctx, const char *line, const char *id, int *kind,
                       unsigned *log2n, int *dtype, unsigned *lo, unsigned *hi,
                       unsigned v[NG_TUNE_SLOTS]) {
  char dev[32], kname[40];
  int used = 0;
  if (sscanf(line, "ng-tune-1 %31s %39s %n", dev, kname, &used) != 2 || used == 0) return false;
  const char *p = line + used;
  if (!parse_uint(&p, 40, log2n)) return false;
  if (strcmp(dev, id) || (*kind = kind_index(kname)) < 0) return false;
  *dtype = -1;
  if (!strncmp(p, " dtype=", 7)) { /* first, so that it is part of the line's key */
    p += 7;
    size_t i = 0, len = 0;
    for (; i < NG_ARRAY_LEN(line_dtypes); i++) {
      len = strlen(ng_dtype_name(line_dtypes[i]));
      if (!strncmp(p, ng_dtype_name(line_dtypes[i]), len) && item_end(p[len]))
        break;
    }
    if (i == NG_ARRAY_LEN(line_dtypes)) return false;
    *dtype = (int)line_dtypes[i];
    p += len;
  }
  if (!parse_rows(&p, *log2n, lo, hi)) return false; /* after the dtype: part of the key too */
  memset(v, 0, sizeof(unsigned) * NG_TUNE_SLOTS);
  for (;;) {
    const char *item = p;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p || *p == '#' || *p == '\n' || *p == '\r') break;
    if (p == item) return false; /* "9groups=3" */
    char name[16];
    unsigned val;
    int u = 0;
    if (sscanf(p, "%15[a-z]=%n", name, &u) != 1 || u == 0) return false;
    p += u;
    if (!parse_uint(&p, UINT_MAX, &val)) return false;
    size_t k = 0;
    while (k < NG_ARRAY_LEN(tune_names) && strcmp(tune_names[k].name, name)) k++;
    if (k == NG_ARRAY_LEN(tune_names)) return false;
    v[tune_names[k].what] = val;
  }
  const unsigned wg = v[NG_TUNE_WORKGROUP];
  if (wg && !ng_wg_asked_ok(ctx, wg)) return false;
  if (v[NG_TUNE_VECTOR] && v[NG_TUNE_VECTOR] != 1 && v[NG_TUNE_VECTOR] != 8) return false;
  const unsigned r = v[NG_TUNE_REG_COLS];
  if (r && r != 1 && r != 2 && r != 4 && r != 8) return false;
  if (!ng_tune_prefetch_ok(v[NG_TUNE_PREFETCH])) return false;
  return true;
}

static bool owned_private_file(FILE *f) {
  struct stat st;
  return fstat(fileno(f), &st) == 0 && ng_file_private(&st);
}

void ng_tuning_load(ng_context *ctx) {
  free(ctx->tuned);
  ctx->tuned = NULL;
  ctx->n_tuned = 0;
  ctx->xgemm[0] = '\0';
  if (!ctx->disk.dir) return;
  char *path = tuning_path(ctx->disk.dir);
  FILE *f = path ? fopen(path, "r") : NULL;
  free(path);
  if (!f) return;
  if (!owned_private_file(f)) {
    fclose(f);
    return;
  }
  char id[17], line[512];
  ng_tuning_device_id(ctx, id);
  while (fgets(line, sizeof line, f)) {
    char gemm_key[64];
    snprintf(gemm_key, sizeof gemm_key, "ng-clblast-1 %s Xgemm ", id);
    if (!strncmp(line, gemm_key, strlen(gemm_key))) { /* CLBlast's Xgemm parameters */
      char *hash = strchr(line, '#');
      if (hash) *hash = '\0';
      snprintf(ctx->xgemm, sizeof ctx->xgemm, "%s", line + strlen(gemm_key));
      continue;
    }
    ng_tuned_entry e;
    int kind;
    if (!parse_line(ctx, line, id, &kind, &e.log2n, &e.dtype, &e.lo, &e.hi, e.v)) continue;
    e.kind = kind;
    ng_tuned_entry *grown = realloc(ctx->tuned, (ctx->n_tuned + 1) * sizeof *grown);
    if (!grown) break;
    ctx->tuned = grown;
    /* a later line for the same key wins */
    size_t i = 0;
    while (i < ctx->n_tuned && !(ctx->tuned[i].kind == e.kind && ctx->tuned[i].log2n == e.log2n &&
                                 ctx->tuned[i].dtype == e.dtype && ctx->tuned[i].lo == e.lo &&
                                 ctx->tuned[i].hi == e.hi))
      i++;
    ctx->tuned[i] = e;
    if (i == ctx->n_tuned) ctx->n_tuned++;
  }
  fclose(f);
}

/* ---- the built-in table ------------------------------------------------------------------------
 * Launches that `normgrad-cli tune` found on one device model and alternating runs confirmed
 * faster than the rules, shipped by device name as CLBlast ships its tuned parameters: the rules
 * were set on the H100, and nothing OpenCL reports (it gives no bandwidth) tells an H200 from it.
 * An entry names the device exactly (CL_DEVICE_NAME) with its compute units, a kind and the row
 * lengths it was measured on, and serves every dtype that measured even or faster
 * (docs/tuning.md, "The built-in table"). tuning.txt's lines come first and an override before
 * both; table=1 turns both off.
 * A frozen kind takes its group shape from the kind with dW, as from tuning.txt. */
#define NG_BUILTIN_V(wg_, groups_, reg_, pf_)                                                      \
  {[NG_TUNE_WORKGROUP] = (wg_), [NG_TUNE_GROUPS] = (groups_), [NG_TUNE_REG_COLS] = (reg_),         \
   [NG_TUNE_PREFETCH] = (pf_)}
/* the measured device: a MIG slice has its name and fewer compute units, for which grids of
 * 528 or 1056 groups were not measured */
#define H200 "NVIDIA H200", 132
#define BF16 NG_DTYPE_BIT(NG_BF16)
#define X16 (NG_DTYPE_BIT(NG_BF16) | NG_DTYPE_BIT(NG_F16))
#define ALL (X16 | NG_DTYPE_BIT(NG_F32))
#define F32 NG_DTYPE_BIT(NG_F32)
#define F16 NG_DTYPE_BIT(NG_F16)
static const ng_builtin_tune builtin[] = {
    /* RMSNorm's backward with dW on 1024 x 2, a group a compute unit, instead of 512 x 4: bf16
     * 9216-16384 -4.5 to -9.7 % (8704 -1.1 %; its frozen pass, on the same shape for dx's bits,
     * even to -4.8 %); f16 +11 to +25 % and f32 +46 %, so bf16 alone (10240-12288 since the
     * eighth round's entry below, 8704-12288 since the ninth's) */
    {H200, "rmsnorm.bwd", BF16, 12289, 16384, NG_BUILTIN_V(1024, 132, 2, 2)},
    /* the fused add's forward on 1024 x 2, two groups a compute unit with the prefetch, instead
     * of 512 x 4 (NG_ROWS_512X4): bf16 and f16 8704-16384 -4.8 to -8.6 %, f32 +10 % (8704-11264
     * since the ninth and tenth rounds' entries below) */
    {H200, "fused-add-rmsnorm.fwd", X16, 11265, 16384, NG_BUILTIN_V(1024, 264, 2, 2)},
    /* LayerNorm's both-frozen backward of split rows on four groups a compute unit instead of
     * three: -3.4 to -7.3 % in bf16 and f16 at 32768-131072, f32 -12.8 % at 65536, even at
     * 131072 */
    {H200, "layernorm.bwd_frozen", ALL, 32768, 131072, NG_BUILTIN_V(0, 528, 0, 2)},
    /* ... and at 2048, a persistent grid of 16 groups a compute unit with the next-row prefetch
     * instead of a group a row (NG_ROWS_FULL1): bf16 -5.6 to -6.1 %, f16 -7.1 %; f32 lost 16 %,
     * 1792, 2304 and 2560 lost 1-8.5 % */
    {H200, "layernorm.bwd_frozen", X16, 2048, 2048, NG_BUILTIN_V(0, 2112, 0, 2)},
    /* PolyNorm's backward: the single slice with the next-row prefetch, which the H100 measured
     * 4-5 % slower (coop_plan in src/ops/polynorm.c): -2.8 to -6.3 % in bf16 and f16 at
     * 7936-8192, f32 even (the forward, on which it was measured too, even) */
    {H200, "polynorm.bwd", ALL, 7681, 8192, NG_BUILTIN_V(0, 0, 0, 2)},
    /* ... measured on every frozen pass when one kind served them: its both-frozen pass, a kind
     * of its own since (the shape is the backward's), keeps the prefetch it was measured with */
    {H200, "polynorm.bwd_frozen", ALL, 7681, 8192, NG_BUILTIN_V(0, 0, 0, 2)},
    /* f32 rows, whose rules were set on the H100 from fewer measurements (tuner scans in f32,
     * 2026-11-29): RMSNorm's forward on 512 x 4, 1056 groups, no prefetch, at 9216-16384
     * (-12.5 to -18.4 %) and on 256 x 4, 4096 groups, at 6144-8192 (-9 to -15 %) */
    {H200, "rmsnorm.fwd", F32, 9216, 16384, NG_BUILTIN_V(512, 1056, 4, 1)},
    {H200, "rmsnorm.fwd", F32, 6144, 8192, NG_BUILTIN_V(256, 4096, 4, 2)},
    /* LayerNorm's forward on 512 x 2, 2112 groups, no prefetch: -16.5 to -25 % at 4608-8192 */
    {H200, "layernorm.fwd", F32, 4608, 8192, NG_BUILTIN_V(512, 2112, 2, 1)},
    /* RMSNorm's backward with dW on 128 x 4, 264 groups: -23 to -27 % at 2560-4096; its frozen
     * pass on the same shape -16 to -31 % (in f16 the scan's 256 x 4 at 8192 gained 11 % with dW
     * and lost 32 % frozen, so f16 keeps the rules) */
    {H200, "rmsnorm.bwd", F32, 2560, 4096, NG_BUILTIN_V(128, 264, 4, 2)},
    /* LayerNorm's both-frozen f16 backward on four groups a compute unit: -3.3 to -7.9 % (from
     * 6145 since the twelfth round's entry at the end took 6144) */
    {H200, "layernorm.bwd_frozen", F16, 6145, 8192, NG_BUILTIN_V(0, 528, 0, 2)},
    /* A second round of scans (the same day; measured under NORMGRAD_TUNE with the entry's
     * values, each frozen pass with the shape alone, as the table gives it):
     * RMSNorm's f32 forward on 128 x 4, 8192 groups: -7.6 to -8.7 % at 3072-4096 */
    {H200, "rmsnorm.fwd", F32, 3072, 4096, NG_BUILTIN_V(128, 8192, 4, 2)},
    /* the fused add's f32 forward on 1024 x 4, 1056 groups, no prefetch: -8 to -15 % at
     * 24576-32768 */
    {H200, "fused-add-rmsnorm.fwd", F32, 24576, 32768, NG_BUILTIN_V(1024, 1056, 4, 1)},
    /* LayerNorm's f32 backward on 256 x 2, 264 groups, no prefetch at 3072-4096 (with dW and dB
     * -19 to -20 %; on that shape dB alone -13 %, both frozen -13 %) and on 128 x 2 with the
     * prefetch at 2048 (-12.5 %; dB alone -11 %, both frozen -8 %; 1536 even) */
    {H200, "layernorm.bwd", F32, 3072, 4096, NG_BUILTIN_V(256, 264, 2, 1)},
    {H200, "layernorm.bwd", F32, 2048, 2048, NG_BUILTIN_V(128, 264, 2, 2)},
    /* LayerNorm's f16 forward on 128 x 4 a group a row at 4096 (-6.3 %; 3072 +1 %) and on
     * 64 x 2, 32768 groups, at 768-1024 (-4.2 to -5.3 %) */
    {H200, "layernorm.fwd", F16, 4096, 4096, NG_BUILTIN_V(128, 8192, 4, 1)},
    {H200, "layernorm.fwd", F16, 768, 1024, NG_BUILTIN_V(64, 32768, 2, 2)},
    /* A third round (2026-11-29, later; measured through this table against the binary
     * before it, three alternating rounds): LayerNorm's bf16 forward on 128 x 4 a group a row
     * with the prefetch at 4096 (-4.6 %; 3072 +4.2 % under the override) */
    {H200, "layernorm.fwd", BF16, 4096, 4096, NG_BUILTIN_V(128, 8192, 4, 2)},
    /* PolyNorm's f32 backward on 128 x 4 with the prefetch: -8.9 to -12.7 % with dW or dB at
     * 3072-3584, both frozen -3.7 % / -0.8 %; at 4096 both frozen lost 2.4 %, and bf16 (-2 to
     * -12 % with gradients) lost 4-6.5 % with both frozen, f16 6-37 % in every pass */
    {H200, "polynorm.bwd", F32, 3072, 3584, NG_BUILTIN_V(128, 0, 4, 2)},
    {H200, "polynorm.bwd_frozen", F32, 3072, 3584, NG_BUILTIN_V(0, 0, 0, 2)},
    /* RMSNorm's f32 backward on 128 x 2, 264 groups, at 1792-2048 (with dW -3.5 to -11.4 %,
     * frozen -11.3 to -12.7 %) and on 64 x 2, 1056 groups, no prefetch, at 896-1024 (-2.6 to
     * -11.6 %, frozen -3.2 to -7.8 %; 768 +1.9 % under the override) */
    {H200, "rmsnorm.bwd", F32, 1792, 2048, NG_BUILTIN_V(128, 264, 2, 2)},
    {H200, "rmsnorm.bwd", F32, 896, 1024, NG_BUILTIN_V(64, 1056, 2, 1)},
    /* LayerNorm's f32 backward on 64 x 2, 1056 groups, no prefetch, at 1024: with dW and dB
     * -8.6 %, dB alone -8.3 %, both frozen -2.7 % (896 gained 2.5-3.2 % with gradients but lost
     * 1 % with both frozen) */
    {H200, "layernorm.bwd", F32, 1024, 1024, NG_BUILTIN_V(64, 1056, 2, 1)},
    /* the fused add's f32 forward on 128 x 4 a group a row: -2.7 to -7.8 % at 3584-4096 */
    {H200, "fused-add-rmsnorm.fwd", F32, 3584, 4096, NG_BUILTIN_V(128, 8192, 4, 2)},
    /* PolyNorm's f32 forward on 512 x 4, 2112 groups, no prefetch: -10.6 to -22.2 % at
     * 9216-16384 */
    {H200, "polynorm.fwd", F32, 9216, 16384, NG_BUILTIN_V(512, 2112, 4, 1)},
    /* A fourth round (2026-11-29, scans with the frozen passes guarded; measured under
     * NORMGRAD_TUNE, then through this table against the binary before it): RMSNorm's f32
     * backward on 256 x 4, a group a compute unit, at 4097-8192 (with dW -11 to -21 % at
     * 4352-8192, frozen on the same shape -3 to -14 %; 9216-16384 lost 25-40 %) */
    {H200, "rmsnorm.bwd", F32, 4097, 8192, NG_BUILTIN_V(256, 132, 4, 2)},
    /* RMSNorm's f32 forward on 1024 x 4, 1056 groups, no prefetch: -2.5 to -5.5 % at
     * 17408-32768 (40960-65536 lost 6-17 %) */
    {H200, "rmsnorm.fwd", F32, 16385, 32768, NG_BUILTIN_V(1024, 1056, 4, 1)},
    /* the fused add's f32 backward on 1024 x 1, a group a compute unit, no prefetch: with dW
     * -10.7 to -16.2 % at 4352-8192, frozen on the same shape -5.7 to -27.9 % (9216-12288 lost
     * 37-39 % with dW) */
    {H200, "fused-add-rmsnorm.bwd", F32, 4097, 8192, NG_BUILTIN_V(1024, 132, 1, 1)},
    /* A fifth round (2026-11-29, at the hidden sizes of common models, bf16; scans, then this
     * table against the binary before it, three alternating rounds): RMSNorm's backward with dW
     * on 512 x 2 with two groups a compute unit instead of one at 6144-8192 (-4.3 % at 6144,
     * -13.0 % at 6656, -9.1 % at 7168, -5.6 % at 8192; the frozen pass keeps its launch, but at
     * 6144, whose shape was 384 x 2: -3.1 %) */
    {H200, "rmsnorm.bwd", BF16, 6144, 8192, NG_BUILTIN_V(512, 264, 2, 2)},
    /* ... and its split rows at 17408-18432 on slices of 128 x 2 (nine, whole at 18432) with six
     * groups a compute unit, frozen too: with dW -8.4 % and -9.4 %, frozen +0.4 % and +0.2 %
     * (20480: -4.0 % with dW, frozen +3.4 %, so not there) */
    {H200, "rmsnorm.bwd", BF16, 17408, 18432, NG_BUILTIN_V(128, 792, 0, 0)},
    {H200, "rmsnorm.bwd_frozen", BF16, 17408, 18432, NG_BUILTIN_V(0, 792, 0, 0)},
    /* the fused add's forward holding the row on 1024 x 4, two groups a compute unit, instead
     * of splitting it: -12.4 % at 17408, -11.8 % at 18432, -11.0 % at 20480, -6.7 % at 24576,
     * -2.4 % at 28672 (32768 even) */
    {H200, "fused-add-rmsnorm.fwd", BF16, 17408, 28672, NG_BUILTIN_V(1024, 264, 4, 2)},
    /* LayerNorm's forward on 256 x 4, four groups a compute unit: -6.8 % at 5120, -2.5 % at
     * 5632 (4608 and 6144 even) */
    {H200, "layernorm.fwd", BF16, 5120, 5632, NG_BUILTIN_V(256, 528, 4, 2)},
    /* LayerNorm's both-frozen backward on a grid of two groups a compute unit with the prefetch
     * instead of a group a row: -10.8 % at 5632, -9.2 % at 6144, -5.7 % at 6656, -2.4 % at 7168
     * (5120 +9.9 %, 8192 +1.2 %); of split rows on four groups a compute unit at 17408-28672
     * (-1.7 to -5.0 %), as from 32768 (above); 5632-6144 since the twelfth round's entry */
    {H200, "layernorm.bwd_frozen", BF16, 6145, 7168, NG_BUILTIN_V(0, 264, 0, 2)},
    {H200, "layernorm.bwd_frozen", BF16, 17408, 32767, NG_BUILTIN_V(0, 528, 0, 2)},
    /* PolyNorm's forward on slices of 128 x 4 with six groups a compute unit: -4.3 % at 17408,
     * -5.9 % at 18432, -3.4 % at 20480 (the same shape cost LayerNorm's backward 30 % at 17408
     * and its frozen pass 12 % at 18432, so not there) */
    {H200, "polynorm.fwd", BF16, 17408, 20480, NG_BUILTIN_V(128, 792, 0, 0)},
    /* A sixth round (2026-11-29: `tune`'s split candidates at 18432, then this table against the
     * binary before it in three alternating rounds, f16 against the same launch set by
     * override in two): LayerNorm's forward on slices of 128 with four groups a compute unit
     * and the prefetch, bf16 -7.0, -7.1, -8.9, -4.6 % at 17408, 18432, 19456, 20480 (21504
     * +0.4 %, 24576 +5.5 %), f16 -8.1, -7.1, -7.7, -4.9 % */
    {H200, "layernorm.fwd", X16, 17408, 20480, NG_BUILTIN_V(128, 528, 0, 2)},
    /* PolyNorm's backward likewise, bf16 -4.0, -3.3, -4.0, -2.4 % (dB alone -5.6 to -3.0 %;
     * 21504 +2.1 %, 24576 +3.6 %), f16 -3.8, -3.4, -4.0, -3.7 %; its both-frozen pass on that
     * shape with six groups a compute unit, bf16 -8.2, -7.4, -7.7, -5.6 %, f16 -8.3, -5.8, -7.9,
     * -5.8 % */
    {H200, "polynorm.bwd", X16, 17408, 20480, NG_BUILTIN_V(128, 528, 0, 2)},
    {H200, "polynorm.bwd_frozen", X16, 17408, 20480, NG_BUILTIN_V(0, 792, 0, 2)},
    /* PolyNorm's forward at 8704-12288, held in one group by the rules, split instead on
     * slices of 128 with four groups a compute unit and the prefetch: under the override that
     * gives this launch (two alternating rounds) bf16 -15.0, -14.0, -12.9, -11.3, -8.4 % at
     * 8704, 9216, 10240, 11264, 12288 (13312 -0.1 %, 14336 +0.8 %, 16384 +2.6 %), f16 -13.6,
     * -11.6, -12.5, -10.9 % at 9216-12288; through this table against the binary before it
     * (three rounds, the next session) bf16 -14.7, -13.8, -11.2, -11.1, -9.2 %, f16 -15.1,
     * -13.2, -11.7, -11.6, -9.5 % (8192 and 13312 even) */
    {H200, "polynorm.fwd", X16, 8704, 12288, NG_BUILTIN_V(128, 528, 0, 2)},
    /* A seventh round (2026-11-29, `tune`'s split band from 8193 at 10240 and 12288, then this
     * table against the binary before it, three alternating rounds, outputs compared):
     * PolyNorm's backward, held by the rules in two slices of 256 x 4 on two groups a compute
     * unit, on slices of 128 with four groups a compute unit, as its forward above: with dW and
     * dB bf16 -12.4, -12.4, -9.2, -10.7, -6.8, -1.7, +0.2 % at 8704, 9216, 10240, 11264, 12288,
     * 13312, 14336 (16384 +0.6 %), f16 -12.3, -9.2, -6.3, -0.8 % at 8704, 10240, 12288, 14336,
     * dB alone (bf16) -12.3, -8.5, -6.9, -1.0 %; both frozen with six groups a compute unit bf16
     * -17.6, -16.9, -11.6, -11.2, -5.0, -6.2, -1.9 % (16384 -0.4 %), f16 -18.2, -10.3, -4.3,
     * -3.2 %. The frozen line needs the shape of the line with dW, so both end at 14336. */
    {H200, "polynorm.bwd", X16, 8704, 14336, NG_BUILTIN_V(128, 528, 0, 2)},
    {H200, "polynorm.bwd_frozen", X16, 8704, 14336, NG_BUILTIN_V(0, 792, 0, 2)},
    /* RMSNorm's forward on 512 x 4 instead of 1024 x 2, two groups a compute unit at
     * 8704-10240 (bf16 -11.5, -9.8, -9.2 %), eight at 11264-12288 (-5.3, -3.1 %, then -4.4,
     * -4.1 % through this table; two groups -4.7, -1.7 %); 13312 and longer lost 0.3-6.5 % on
     * either grid, f16 7.5-15 % at 8704-12288, so bf16 alone */
    {H200, "rmsnorm.fwd", BF16, 8704, 10240, NG_BUILTIN_V(512, 264, 4, 2)},
    {H200, "rmsnorm.fwd", BF16, 11264, 12288, NG_BUILTIN_V(512, 1056, 4, 2)},
    /* An eighth round (2026-11-29, a work-group of a multiple of 32 that is not a power of
     * two): LayerNorm's forward at 11264-12288 (1408-1536 vectors) on 384 x 4, which holds
     * 12288's row exactly, instead of 1024 x 2, which leaves a quarter of it idle: under the
     * override bf16 -5.8, -3.2 % (13312 +15.8 %; 768 x 2 +15 to +81 %), through this table
     * against the binary before it (three alternating rounds, outputs compared) -7.2, -2.9 %
     * (10240 and 13312 even); f16 lost 1.2 and 3.5 %, so bf16 alone */
    {H200, "layernorm.fwd", BF16, 11264, 12288, NG_BUILTIN_V(384, 0, 4, 0)},
    /* RMSNorm's bf16 backward on 768 x 2 (a row of up to 1536 vectors, 12288's exactly)
     * instead of 1024 x 2, a group a compute unit with the prefetch; its frozen pass on that
     * shape, and on 1024 x 2 at 13312-14336, on the same grid instead of the rules' 264. Under
     * the override (three rounds): with dW -4.2, -4.8, -0.5 % at 10240, 11264, 12288, frozen
     * -6.5, -7.6, -5.7 % (9216 -9.1 %, but its dW was not measured; 13312 and beyond +33 to
     * +41 %, past the registers); the grid alone frozen -2.4 to -3.3 % at 11264-13312, -2.0 %
     * at 14336, even at 16384. Through this table against the binary before it (three
     * alternating rounds, outputs compared): with dW 74.1-74.7 -> 70.9-71.5 us at 10240
     * (-4.2 %), -0.3 % at 12288; frozen 69.6 -> 64.4-65.5 at 10240 (-7.2 %), -5.0 % at 12288,
     * -3.4 % at 13312; 13312 with dW even. The range 9216-16384 of the entry before keeps
     * 1024 x 2 beyond 12288; 9217 since the ninth round (through the table: with dW 81.3-82.5
     * -> 74.2-74.9 us at 9216 before 576 x 2 took it, -9.6 % at 9728; frozen -8.9, -9.4 %);
     * f16 too to 12288 since the eleventh round (below). */
    {H200, "rmsnorm.bwd", X16, 9217, 12288, NG_BUILTIN_V(768, 132, 2, 2)},
    {H200, "rmsnorm.bwd_frozen", X16, 9217, 12288, NG_BUILTIN_V(0, 132, 0, 2)},
    {H200, "rmsnorm.bwd_frozen", BF16, 12289, 14336, NG_BUILTIN_V(0, 132, 0, 2)},
    /* A ninth round (2026-11-29): a work-group of the smallest multiple of 32 that holds the
     * row exactly at the top of each range (W x 4 for LayerNorm's forward, W x 2 for the
     * backwards), where the power of two or the split leaves much of it idle. Through this table
     * against the binary before it, outputs compared: bf16 three alternating rounds, f16 two
     * (one at 11264-12288 and for LayerNorm's and RMSNorm's f16, where the time ran out).
     *  - LayerNorm's forward on 288 x 4 to 9216 and 320 x 4 to 10240: bf16 -19.2, -15.8, -15.3,
     *    -10.3 % at 8704, 9216, 9728, 10240 (0.55 -> 0.68 of copy at 8704); f16 -12.2, -7.7,
     *    -6.6 % at 8704, 9216, 10240. 416 x 4 at 12289-13312: bf16 -4.5 % at 13312, -2.4 % at
     *    12800, f16 even (so bf16 alone); 448 x 4 at 14336 even, 480 x 4 at 15360 +20.6 %.
     *  - RMSNorm's backward on 576 x 2 at 8704-9216 with dW on a group a compute unit, frozen
     *    on two: bf16 with dW -16.6, -15.4, -0.5 % at 8704, 8960, 9216, frozen -19.0, -13.3 % at
     *    8704, 9216 (against 768 x 2 at 9216, itself -8.9 % on 1024 x 2); f16 at 9216 -14.7 %,
     *    frozen -9.6 % (8704 in f16, against the rules the next session: -18.8 % with dW).
     *    640 x 2 at 10240 and 704 x 2 at 11264 were even under the override, 768 x 2 frozen on
     *    two groups a compute unit +0.9 to +3.2 %.
     *  - The fused add's backward on W x 2, a group a compute unit with the prefetch, instead
     *    of three slices of 128 x 4 on three (bf16) or the rules' two of 256 (f16); frozen on
     *    that shape and grid: bf16 with dW -15.6, -6.2, -4.7, -3.9, -1.3, -0.5 % at 8704, 9216,
     *    9728, 10240, 11264, 12288, frozen -16.4, -10.0, -8.9, -6.5, -5.1, -3.0 %; without ds_out
     *    (RMSNorm's kernel on the fused add's launch) -29.2 % at 10240; f16 with dW -16.5,
     *    -15.9, -10.2, -8.5, -6.3 % at 8704, 9216, 10240, 11264, 12288, frozen -16.6, -17.3,
     *    -13.7, -8.1, -6.4 %. 13312 on 832 x 2 -2.0 % with dW, frozen even: not taken.
     *  - The fused add's bf16 forward on that shape to 11264 (10240 on two groups a compute
     *    unit, what `tune` found there): -3.9, -5.4, -2.5, -5.5 % at 8704, 9216, 10240, 11264;
     *    12288 even; f16 since the tenth round (below).
     * RMSNorm's forward lost on W x 2 (+6 to +12 %) and W/2 x 4 (+0.2 to +3.4 %) at
     * 8704-11264, LayerNorm's backward on W x 4 at 11264-14336 (+1.3 to +2.9 %). */
    {H200, "layernorm.fwd", X16, 8704, 9216, NG_BUILTIN_V(288, 0, 4, 0)},
    {H200, "layernorm.fwd", X16, 9217, 10240, NG_BUILTIN_V(320, 0, 4, 0)},
    {H200, "layernorm.fwd", BF16, 12289, 13312, NG_BUILTIN_V(416, 0, 4, 0)},
    {H200, "rmsnorm.bwd", X16, 8704, 9216, NG_BUILTIN_V(576, 132, 2, 2)},
    {H200, "rmsnorm.bwd_frozen", X16, 8704, 9216, NG_BUILTIN_V(0, 264, 0, 2)},
    {H200, "fused-add-rmsnorm.bwd", X16, 8704, 8704, NG_BUILTIN_V(544, 132, 2, 2)},
    {H200, "fused-add-rmsnorm.bwd", X16, 8705, 9216, NG_BUILTIN_V(576, 132, 2, 2)},
    {H200, "fused-add-rmsnorm.bwd", X16, 9217, 10240, NG_BUILTIN_V(640, 132, 2, 2)},
    {H200, "fused-add-rmsnorm.bwd", X16, 10241, 11264, NG_BUILTIN_V(704, 132, 2, 2)},
    {H200, "fused-add-rmsnorm.bwd", X16, 11265, 12288, NG_BUILTIN_V(768, 132, 2, 2)},
    {H200, "fused-add-rmsnorm.bwd_frozen", X16, 8704, 12288, NG_BUILTIN_V(0, 132, 0, 2)},
    {H200, "fused-add-rmsnorm.fwd", X16, 8704, 8704, NG_BUILTIN_V(544, 132, 2, 2)},
    {H200, "fused-add-rmsnorm.fwd", X16, 8705, 9216, NG_BUILTIN_V(576, 132, 2, 2)},
    {H200, "fused-add-rmsnorm.fwd", BF16, 9217, 10240, NG_BUILTIN_V(640, 264, 2, 2)},
    {H200, "fused-add-rmsnorm.fwd", F16, 9217, 10240, NG_BUILTIN_V(640, 132, 2, 2)},
    {H200, "fused-add-rmsnorm.fwd", X16, 10241, 11264, NG_BUILTIN_V(704, 132, 2, 2)},
    /* A tenth round (2026-11-29, the next session): exact fits at the models' shorter lengths,
     * where the forwards hold the row on 256 x 4 a group a row (5120 is 640 vectors: 37.5 % of
     * the slots idle) and the fused add's backward on 1024 x 1. Through this table against the
     * binary before it (two to four alternating rounds, one for the f16 backward at
     * 5632-6144; outputs compared):
     *  - the fused add's forward on 320, 384, 448 x 2 to 5120, 6144, 7168 on two groups a
     *    compute unit with the prefetch: bf16 -6.6, -7.5, -4.7, -2.8, -7.6, -4.8 % at 4864,
     *    5120, 5632, 6144, 6656, 7168 (0.83 -> 0.90 of copy at 5120), f16 -7.3, -6.8, -3.1,
     *    -3.0, -8.0, -6.2 %; and its f16 forward on the ninth round's shapes above (10240 on one
     *    group a compute unit: -5.5 % under the override, -1.9 % on two): -3.5, -6.0, -5.5,
     *    -5.8, -4.4 % at 8704, 9216, 9728, 10240, 11264;
     *  - its backward on 320 x 2 to 5120 and 384 x 2 to 6144 on two groups a compute unit with
     *    the prefetch, frozen alike: bf16 with dW -11.2, -8.2, -4.1, +0.5 % at 4864, 5120, 5632,
     *    6144, frozen -12.2, -8.7, -5.5, -1.5 %; f16 -14.0, -11.0, -7.5, -4.3 %, frozen -13.7,
     *    -11.2, -7.3, -5.5 % (448 x 2 at 7168 lost 9 % on one group a compute unit, 14.5 % on
     *    two);
     *  - RMSNorm's forward on 160 x 4 to 5120, on the rules' grid for that shape: bf16 -2.3 % at
     *    4864, +0.3 % at 5120 (-3.0 % under the override), f16 -3.4, -2.7 % (192 x 4 and
     *    224 x 4 at 6144 and 7168 lost 5-6 %).
     * Not taken (under the override): LayerNorm's forward on W/4 x 4 and W/2 x 2 at 5120-7168
     * (-2.6 % at 5120 on 320 x 2 in bf16 but f16 +10.7 %, -1.1 % at 6144 in f16 on 192 x 4,
     * else +0.1 to +17 %), RMSNorm's backward on W/2 x 2 at 5120-7168 with dW (-0.6 % at 5120,
     * whose frozen pass lost 7.7 %, else +3.9 to +32 %; frozen -6.8 % at 6144, which dx's
     * shared shape forbids), every op on W x 4 at 18432-24576 but LayerNorm's both-frozen
     * backward (-5.4 % at 18432 on 576 x 4, the shape of a backward with dW that lost 11.9 %),
     * PolyNorm on W x 2 at 8704-12288 (+5.5 to +33 %). The fused add's frozen grid and
     * RMSNorm's forward reach down to 4097 since the twelfth round (below). */
    {H200, "fused-add-rmsnorm.fwd", X16, 4609, 5120, NG_BUILTIN_V(320, 264, 2, 2)},
    {H200, "fused-add-rmsnorm.fwd", X16, 5121, 6144, NG_BUILTIN_V(384, 264, 2, 2)},
    {H200, "fused-add-rmsnorm.fwd", X16, 6145, 7168, NG_BUILTIN_V(448, 264, 2, 2)},
    {H200, "fused-add-rmsnorm.bwd", X16, 4609, 5120, NG_BUILTIN_V(320, 264, 2, 2)},
    {H200, "fused-add-rmsnorm.bwd", X16, 5121, 6144, NG_BUILTIN_V(384, 264, 2, 2)},
    {H200, "fused-add-rmsnorm.bwd_frozen", X16, 4097, 6144, NG_BUILTIN_V(0, 264, 0, 2)},
    {H200, "rmsnorm.fwd", X16, 4097, 5120, NG_BUILTIN_V(160, 0, 4, 0)},
    /* An eleventh round (2026-11-29, a third session). Through this table against the binary
     * before it (three alternating rounds, outputs compared):
     *  - PolyNorm on W/4 x 4 (its plans keep four slots; W/2 would leave half idle), the row held
     *    exactly at the top of each range (160 to 5120, 192 to 6144) where the rules' 256 x 4 left
     *    37.5 % of 5120's slots idle: the forward on four groups a compute unit, the backward on
     *    four to 5120 and two to 6144 with the prefetch, both-frozen on that grid: bf16 -10.0,
     *    -8.5, -4.4, -1.5 % forward at 4864, 5120, 5632, 6144, with dW and dB -14.4, -11.1,
     *    -4.0, -3.0 %, dB alone -11.1 % at 5120 and -2.6 % at 6144, both frozen -13.8, -10.4,
     *    -3.3, -1.3 %; f16 -11.6, -7.8, -3.8, -1.6 %, -12.8, -10.5, -3.8, -2.5 %, -11.7, -8.8,
     *    -2.9, -0.8 %. 224 x 4 at 7168 lost 0.6-17 % on two and four groups a compute unit,
     *    28-54 % on one;
     *  - RMSNorm's f16 backward on the bf16 entry's 768 x 2 at 9217-12288 (above), a group a
     *    compute unit with the prefetch, frozen on that grid (past 12288 f16 keeps the rules',
     *    where 1024 x 2 lost 11-25 %): with dW -8.9, -8.6, -4.6, -1.1 % at 9728, 10240, 11264,
     *    12288, frozen -8.6, -9.5, -9.9, -7.5 %.
     * Not taken (under the override): the exact fits W/2 x 2 at 2560-3584 for RMSNorm's and the
     * fused add's backward and the fused add's forward (+1.8 to +33 % on two groups a compute
     * unit, +35 to +120 % on one, but the fused add's backward with dW at 2560, -1.9 %);
     * LayerNorm's forward on 320 x 2 at 4864-5120 (even); LayerNorm's backward on W/2 x 2 at
     * 6144-7168 (dB alone -16.5 and -10.4 % on two groups a compute unit, with dW +12.8 %: dx's
     * shared shape forbids it; on one group +1.9 to +20 %), on W/4 x 4 at 5632-6144 (with dW
     * -4.2 to -5.5 %, dB alone -14.5 to -21.4 %, but both frozen, the LoRA pass that shares the
     * shape, +1.7 to +31 % on every grid tried; 5120 and 7168 lost with dW), on 768 x 2 and
     * 384 x 4 at 12288 (with dW -3.2 % on 768 x 2, dB alone +1.8 %, both frozen +12.9 %), and
     * W x 1 for LayerNorm's and RMSNorm's backward at 5120-7168 (+10 to +55 %). */
    {H200, "polynorm.fwd", X16, 4097, 5120, NG_BUILTIN_V(160, 528, 4, 2)},
    {H200, "polynorm.bwd", X16, 4097, 5120, NG_BUILTIN_V(160, 528, 4, 2)},
    {H200, "polynorm.bwd_frozen", X16, 4097, 5120, NG_BUILTIN_V(0, 528, 0, 2)},
    {H200, "polynorm.fwd", X16, 5121, 6144, NG_BUILTIN_V(192, 528, 4, 2)},
    {H200, "polynorm.bwd", X16, 5121, 6144, NG_BUILTIN_V(192, 264, 4, 2)},
    {H200, "polynorm.bwd_frozen", X16, 5121, 6144, NG_BUILTIN_V(0, 264, 0, 2)},
    /* A twelfth round (2026-11-30). Through this table against the binary before it (three
     * alternating rounds, outputs compared):
     *  - PolyNorm's 160 x 4 (above) from 4097, where the rules' 256 x 4 left 44-50 % of the
     *    slots idle: bf16 forward -15.2, -15.4, -13.9 % at 4160, 4352, 4608, with dW and dB
     *    -18.6, -17.5, -16.7 %, both frozen -19.7, -16.3, -16.1 %; f16 at 4352 -15.9, -17.4,
     *    -16.9 %;
     *  - the fused add's forward and backward on 288 x 2 (4608 exactly) at 4097-4608, two
     *    groups a compute unit with the prefetch, frozen on that grid (the tenth round's entry
     *    above, from 4097), where the forward held the row on 256 x 4 and the backward on
     *    1024 x 1: forward bf16 -7.3, -7.0, -7.1 % at 4160, 4352, 4608, f16 -7.7, -6.8 % at 4352,
     *    4608; with dW -18.0, -15.7, -13.9 % (f16 -15.6 % at 4608), frozen -14.6, -12.5 % at
     *    4352, 4608 (f16 -13.0 %); and RMSNorm's forward on the tenth round's 160 x 4 from 4097:
     *    -7.1, -6.1, -3.8 % (f16 -7.3 % at 4608);
     *  - LayerNorm's backward on 192 x 4 (6144's row exactly) at 5632-6144, with dW or dB on
     *    two groups a compute unit with the prefetch, both frozen (dx's shared shape) on four
     *    without it: bf16 with dW -5.0, -3.7, -2.8 % at 5632, 5888, 6144, dB alone -18.9, -17.5,
     *    -15.3 %, both frozen -1.4, -1.6, +0.4 %; f16 at 5632 and 6144 -4.7, -3.1 %, -22.3,
     *    -20.7 %, -14.1, -6.3 %. Under the override, both frozen on 192 x 4 with the prefetch had
     *    lost 1.7-31 % on every grid (the eleventh round); without it on two groups a compute
     *    unit +10.6 %, on four -2.2 %, on eight -0.5 % at 6144.
     * Not taken (under the override): RMSNorm's and the fused add's backward at 7168 on 224 x 4
     * (+5.9 to +24.1 % with dW, +0.1 to +18.8 % frozen); RMSNorm's forward at 4608 on 288 x 2 (even
     * on two groups a compute unit, +3.0 % on four). */
    {H200, "fused-add-rmsnorm.fwd", X16, 4097, 4608, NG_BUILTIN_V(288, 264, 2, 2)},
    {H200, "fused-add-rmsnorm.bwd", X16, 4097, 4608, NG_BUILTIN_V(288, 264, 2, 2)},
    {H200, "layernorm.bwd", X16, 5632, 6144, NG_BUILTIN_V(192, 264, 4, 2)},
    {H200, "layernorm.bwd_frozen", X16, 5632, 6144, NG_BUILTIN_V(0, 528, 0, 1)},
};
#undef H200
#undef BF16
#undef X16
#undef ALL
#undef F32
#undef F16
#undef NG_BUILTIN_V

const ng_builtin_tune *ng_tuning_builtin(size_t *count) {
  *count = NG_ARRAY_LEN(builtin);
  return builtin;
}

static bool builtin_serves(const ng_context *ctx, const ng_builtin_tune *e) {
  return ctx->info.compute_units == e->compute_units && !strcmp(ctx->info.name, e->device);
}

size_t ng_tuned_length(const ng_context *ctx, size_t i) {
  if (!ctx || ctx->tune[NG_TUNE_TABLE] == 1) return 0;
  if (i < 2 * ctx->n_tuned) { /* a line's first and last lengths: its range's, or its bucket's */
    const ng_tuned_entry *e = &ctx->tuned[i / 2];
    if (e->lo) return i % 2 ? e->hi : e->lo;
    return i % 2 ? ((size_t)2 << e->log2n) - 1 : (size_t)1 << e->log2n;
  }
  i -= 2 * ctx->n_tuned;
  for (size_t k = 0; k < NG_ARRAY_LEN(builtin); k++)
    if (builtin_serves(ctx, &builtin[k])) {
      if (i < 2) return i ? builtin[k].hi : builtin[k].lo;
      i -= 2;
    }
  return 0;
}

/* tuning.txt's line for kind and rows of n elements of xd: the narrowest line of lengths
 * that holds n (xd's, else one for every dtype; of two as narrow the later), else the line of
 * n's bucket (xd's, else every dtype's) */
static bool file_lookup(const ng_context *ctx, const char *kind, ng_dtype xd, size_t n,
                        unsigned v[NG_TUNE_SLOTS]) {
  const int k = kind_index(kind);
  if (k < 0) return false;
  const unsigned b = log2_floor(n ? n : 1);
  /* the best line of each rank: 0 lengths and xd, 1 lengths, 2 bucket and xd, 3 bucket */
  const ng_tuned_entry *best[4] = {NULL, NULL, NULL, NULL};
  for (size_t i = 0; i < ctx->n_tuned; i++) {
    const ng_tuned_entry *e = &ctx->tuned[i];
    if (e->kind != k || (e->dtype >= 0 && e->dtype != (int)xd)) continue;
    const bool any = e->dtype < 0;
    if (e->lo) {
      if (n < e->lo || n > e->hi) continue;
      const ng_tuned_entry **r = &best[any ? 1 : 0];
      if (!*r || e->hi - e->lo <= (*r)->hi - (*r)->lo) *r = e;
    } else if (e->log2n == b) {
      best[any ? 3 : 2] = e;
    }
  }
  for (int r = 0; r < 4; r++)
    if (best[r]) {
      memcpy(v, best[r]->v, sizeof(unsigned) * NG_TUNE_SLOTS);
      return true;
    }
  return false;
}

static bool builtin_lookup(const ng_context *ctx, const char *kind, ng_dtype xd, size_t n,
                           unsigned v[NG_TUNE_SLOTS]) {
  for (size_t i = 0; i < NG_ARRAY_LEN(builtin); i++)
    if (n >= builtin[i].lo && n <= builtin[i].hi && (builtin[i].dtypes & NG_DTYPE_BIT(xd)) &&
        !strcmp(kind, builtin[i].kind) && builtin_serves(ctx, &builtin[i])) {
      memcpy(v, builtin[i].v, sizeof(unsigned) * NG_TUNE_SLOTS);
      return true;
    }
  return false;
}

bool ng_tuned_lookup(const ng_context *ctx, const char *kind, ng_dtype xd, size_t n,
                     unsigned v[NG_TUNE_SLOTS]) {
  if (!kind || ctx->tune[NG_TUNE_TABLE] == 1) return false;
  /* "polynorm.fwd", "polynorm.bwd" and "polynorm.bwd_frozen" also take the lines of
   * "polynorm", the one kind of every pass before 2026-11-29: tuning.txt's lines of either before
   * the built-in table's */
  const char *parent = !strncmp(kind, "polynorm.", 9) ? "polynorm" : NULL;
  return file_lookup(ctx, kind, xd, n, v) || (parent && file_lookup(ctx, parent, xd, n, v)) ||
         builtin_lookup(ctx, kind, xd, n, v) || (parent && builtin_lookup(ctx, parent, xd, n, v));
}

/* dtype -1: a line for every dtype; hi 0: for n's bucket, else for rows of n..hi elements */
static ng_status store(ng_context *ctx, const char *kind, int dtype, size_t n, size_t hi,
                       const unsigned *values, const char *comment) {
  if (!ctx || !values) return ng_fail(NG_ERR_NULL_HANDLE, "ctx or values is NULL");
  if (kind_index(kind) < 0)
    return ng_fail(NG_ERR_INVALID_VALUE, "unknown kernel kind '%s'", kind ? kind : "(null)");
  if (n == 0) return ng_fail(NG_ERR_INVALID_VALUE, "row length is 0");
  if (hi && (hi < n || hi > UINT_MAX))
    return ng_fail(NG_ERR_INVALID_VALUE, "row lengths %zu..%zu: not a range of row lengths", n, hi);
  char line[512], id[17], tail[48] = ""; /* the key after the bucket: dtype, lengths */
  int dl = 0;
  if (dtype >= 0) dl = snprintf(tail, sizeof tail, " dtype=%s", ng_dtype_name((ng_dtype)dtype));
  if (hi == n) snprintf(tail + dl, sizeof tail - (size_t)dl, " n=%zu", n);
  else if (hi) snprintf(tail + dl, sizeof tail - (size_t)dl, " n=%zu-%zu", n, hi);
  ng_tuning_device_id(ctx, id);
  int len = snprintf(line, sizeof line, "ng-tune-1 %s %s %u%s", id, kind, log2_floor(n), tail);
  for (size_t k = 0; k < NG_ARRAY_LEN(tune_names); k++)
    if (values[tune_names[k].what])
      len += snprintf(line + len, sizeof line - (size_t)len, " %s=%u", tune_names[k].name,
                      values[tune_names[k].what]);
  len += snprintf(line + len, sizeof line - (size_t)len, "  # %s, n=%zu%s%s\n", ctx->info.name, n,
                  comment ? ", " : "", comment ? comment : "");
  if (len <= 0 || (size_t)len >= sizeof line)
    return ng_fail(NG_ERR_INVALID_VALUE, "tuning comment too long");
  {
    int kk, d;
    unsigned b, l, h, v[NG_TUNE_SLOTS];
    if (!parse_line(ctx, line, id, &kk, &b, &d, &l, &h, v))
      return ng_fail(NG_ERR_INVALID_VALUE, "values the device cannot take");
  }
  /* the key: a line for one dtype replaces that dtype's line; a line for every dtype replaces
   * all of the bucket's lines, and a bucket's line those of its lengths (every older key
   * starts with its key); a line of lengths replaces that range's alone */
  char key[128];
  snprintf(key, sizeof key, "ng-tune-1 %s %s %u%s ", id, kind, log2_floor(n), tail);
  return ng_tuning_write_line(ctx, key, line);
}

ng_status ng_tuning_store(ng_context *ctx, const char *kind, size_t n, const unsigned *values,
                          const char *comment) {
  ng_clear_detail();
  return store(ctx, kind, -1, n, 0, values, comment);
}

ng_status ng_tuning_store_dtype(ng_context *ctx, const char *kind, ng_dtype dtype, size_t n,
                                const unsigned *values, const char *comment) {
  ng_clear_detail();
  if (!line_dtype_ok(dtype))
    return ng_fail(NG_ERR_UNSUPPORTED_DTYPE, "the row kernels take f32, f16 or bf16 x");
  return store(ctx, kind, (int)dtype, n, 0, values, comment);
}

ng_status ng_tuning_store_range(ng_context *ctx, const char *kind, ng_dtype dtype, size_t lo,
                                size_t hi, const unsigned *values, const char *comment) {
  ng_clear_detail();
  if (!line_dtype_ok(dtype))
    return ng_fail(NG_ERR_UNSUPPORTED_DTYPE, "the row kernels take f32, f16 or bf16 x");
  if (lo == 0 || hi < lo)
    return ng_fail(NG_ERR_INVALID_VALUE, "row lengths %zu..%zu: not a range of row lengths", lo,
                   hi);
  return store(ctx, kind, (int)dtype, lo, hi, values, comment);
}

ng_status ng_tuning_lookup(const ng_context *ctx, const char *kind, ng_dtype dtype, size_t n,
                           unsigned *values, int *found) {
  ng_clear_detail();
  if (!ctx || !kind || !values || !found)
    return ng_fail(NG_ERR_NULL_HANDLE, "ctx, kind, values or found is NULL");
  if (kind_index(kind) < 0) return ng_fail(NG_ERR_INVALID_VALUE, "unknown kernel kind '%s'", kind);
  if (n == 0) return ng_fail(NG_ERR_INVALID_VALUE, "row length is 0");
  if (!line_dtype_ok(dtype))
    return ng_fail(NG_ERR_UNSUPPORTED_DTYPE, "the row kernels take f32, f16 or bf16 x");
  unsigned v[NG_TUNE_SLOTS] = {0};
  *found = ng_tuned_lookup(ctx, kind, dtype, n, v) ? 1 : 0;
  memcpy(values, v, sizeof v); /* NG_TUNE_SLOTS = the 7 entries of the public arrays */
  return NG_SUCCESS;
}

/* Replace the line starting with `key` (or add it) in the context's tuning.txt, atomically. */
ng_status ng_tuning_write_line(ng_context *ctx, const char *key, const char *line) {
  pthread_mutex_lock(&ctx->lock);
  char *dir = ctx->disk.dir ? strdup(ctx->disk.dir) : NULL;
  pthread_mutex_unlock(&ctx->lock);
  if (!dir) return ng_fail(NG_ERR_INVALID_VALUE, "the context has no cache folder");
  ng_status s = NG_SUCCESS;
  char *path = tuning_path(dir), *tmp = NULL;
  FILE *in = NULL, *out = NULL;
  if (!path || !(tmp = malloc(strlen(path) + 32))) {
    s = ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "path");
    goto done;
  }
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    s = ng_fail(NG_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    goto done;
  }
  snprintf(tmp, strlen(path) + 32, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || !(out = fdopen(fd, "w"))) {
    if (fd >= 0) close(fd);
    s = ng_fail(NG_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    goto done;
  }
  /* keep every other line; drop this key's older entry */
  bool header = false;
  if ((in = fopen(path, "r")) != NULL) {
    char buf[512];
    while (fgets(buf, sizeof buf, in)) {
      if (!strncmp(buf, key, strlen(key))) continue;
      if (buf[0] == '#') header = true;
      fputs(buf, out);
    }
    fclose(in);
  }
  if (!header)
    fputs("# normgrad tuned launch parameters (normgrad-cli tune, docs/tuning.md)\n", out);
  fputs(line, out);
  if (fflush(out) != 0 || fsync(fileno(out)) != 0) s = ng_fail(NG_ERR_IO, "writing %s", tmp);
  if (fclose(out) != 0 && s == NG_SUCCESS) s = ng_fail(NG_ERR_IO, "writing %s", tmp);
  if (s == NG_SUCCESS && rename(tmp, path) != 0)
    s = ng_fail(NG_ERR_IO, "cannot rename %s: %s", tmp, strerror(errno));
  if (s != NG_SUCCESS) unlink(tmp);
done:
  free(dir);
  free(path);
  free(tmp);
  return s;
}
