/* normgrad-cli internals: the per-op interface (one tools/cli/op_*.c file per op family) and the
 * shared helpers that main.c, safetensors.c and bench.c provide. */
#ifndef NG_CLI_H
#define NG_CLI_H

#include "normgrad.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exit codes (SPEC.md): 0 ok, 2 usage or bad input, 3 device or OpenCL failure. */
enum { CLI_OK = 0, CLI_USAGE = 2, CLI_DEVICE = 3 };

/* ---- tensors (host side, as read from / written to safetensors) ---------------------------- */
#define CLI_MAX_DIMS 8
typedef struct cli_tensor {
  char name[128];
  ng_dtype dtype;
  int ndim;
  int64_t shape[CLI_MAX_DIMS];
  void *data; /* owned, nbytes long */
  size_t nbytes;
} cli_tensor;

typedef struct cli_tensors {
  cli_tensor *items;
  size_t count, cap;
} cli_tensors;

const cli_tensor *cli_tensors_find(const cli_tensors *ts, const char *name);
/* Append a tensor holding a copy of `data` (product(shape)·dtype size bytes; data NULL = zeros).
 * Returns 0, or -1 when out of memory. */
int cli_tensors_add(cli_tensors *ts, const char *name, ng_dtype dtype, int ndim,
                    const int64_t *shape, const void *data);
void cli_tensors_free(cli_tensors *ts);
/* Number of elements (product of the shape; 1 for a scalar). */
size_t cli_tensor_numel(const cli_tensor *t);

/* ---- options shared by all ops --------------------------------------------------------------- */
typedef enum { CLI_RED_MEAN = 0, CLI_RED_SUM = 1, CLI_RED_NONE = 2 } cli_reduction;
typedef struct cli_options {
  float eps;                  /* --eps, default 1e-6 */
  float offset;               /* --offset, default 0 */
  ng_casting_mode casting_mode; /* --casting-mode, default llama */
  long long groups;           /* --groups, 0 = not given */
  bool freeze_weight, freeze_bias, no_input_grad;
  long long ignore_index;     /* default -100 */
  float label_smoothing;
  cli_reduction reduction;
  float softcap;              /* 0 = off */
  float lse_square_scale;
  float grad_output;          /* --grad-output, default 1 */
  bool grad_output_set;
  /* added for flce (0 = not given: the op chooses) */
  long long vocab;            /* --vocab V: bench flce's vocabulary size (default 32000) */
  long long chunk_rows;       /* --chunk-rows N */
  long long scratch_budget;   /* --scratch-budget BYTES */
  long long batch;            /* --batch B: bench groupnorm's samples (0 = not given: 1) */
  bool no_ds_out;             /* --no-ds-out: bench fused-add-rmsnorm's backward without ds_out */
} cli_options;

/* Monotonic wall time in seconds (common.c), for the subcommands' own timing and progress. */
double cli_now_s(void);

/* ---- device environment ---------------------------------------------------------------------- */
typedef struct cli_env {
  ng_context *ctx;
  cl_context cl_ctx;
  cl_device_id device;
  cl_command_queue queue; /* in-order, profiling enabled */
} cli_env;

/* Device buffer holding `t`'s data (exactly its bytes). NULL on failure, with err filled. */
cl_mem cli_upload(cli_env *env, const cli_tensor *t, char *err, size_t errlen);
/* Device buffer of `bytes` bytes, uninitialized (NULL on failure, err filled). */
cl_mem cli_alloc(cli_env *env, size_t bytes, char *err, size_t errlen);
/* Read a device buffer (blocking) into a new output tensor. Returns CLI_OK or CLI_DEVICE. */
int cli_download(cli_env *env, cl_mem mem, const char *name, ng_dtype dtype, int ndim,
                 const int64_t *shape, cli_tensors *out, char *err, size_t errlen);
/* Format "NAME: message (detail)" for a failed normgrad call into err and return the exit code
 * that fits it: CLI_USAGE for argument errors (NG_ERR_* other than build/device ones), else
 * CLI_DEVICE. */
int cli_fail_status(ng_status s, const char *what, char *err, size_t errlen);
/* The same with a detail message the caller kept (the library's is replaced by the next call). */
int cli_fail_status_detail(ng_status s, const char *what, const char *detail, char *err,
                           size_t errlen);

/* ---- benchmarks -------------------------------------------------------------------------------- */
typedef struct cli_bench_spec {
  size_t rows, hidden;
  ng_dtype dtype; /* activations; weights are f32 unless the op says otherwise */
  bool freeze_weight, freeze_bias;
  /* scratch bytes to allocate at least (0: what the context's launch settings need); `tune`
   * passes the most any of its candidates needs, each launch asking for its own */
  size_t min_scratch;
} cli_bench_spec;

/* A buffer a pass writes (for `tune`, which checks every candidate's outputs). */
typedef struct cli_bench_output {
  cl_mem mem; /* NULL = unused slot */
  const char *name; /* the tensor's name in the op's API ("dx", "dweight"): reports name it */
  size_t count;
  ng_dtype dtype;
  /* `tune`'s absolute tolerance where the values are small against the data they come from
   * (0: 1e-5 of the largest value) */
  double atol;
} cli_bench_output;

typedef struct cli_bench_case {
  const char *pass; /* "forward", "backward", … */
  double bytes;     /* bytes the pass must move: every input read once, every output written once */
  /* Enqueue one pass on env->queue. Returns an ng_status. */
  ng_status (*run)(cli_env *env, void *state);
  cli_bench_output out[3]; /* what the pass writes (optional; `tune` needs it) */
} cli_bench_case;

/* ---- one op family ----------------------------------------------------------------------------- */
typedef struct cli_op {
  const char *name; /* as on the command line: "rmsnorm", "layernorm", … */
  /* Validate the inputs (names, dtypes, shapes: CLI_USAGE with a message naming the tensor),
   * run the forward and, when `dy` (or the op's gradient input) is present, the backward, and
   * append the outputs SPEC.md lists (frozen parameters' gradients absent). */
  int (*run)(cli_env *env, const cli_options *o, const cli_tensors *in, cli_tensors *out,
             char *err, size_t errlen);
  /* Allocate and fill buffers for a benchmark of `spec`; describe up to 4 passes in `cases`.
   * Returns CLI_OK or an exit code with err filled. */
  int (*bench_setup)(cli_env *env, const cli_bench_spec *spec, const cli_options *o,
                     cli_bench_case *cases, int *ncases, void **state, char *err,
                     size_t errlen);
  void (*bench_cleanup)(void *state);
  /* The scratch bytes the backward of `spec` needs with the context's launch settings as they
   * are (the ops `tune` scans; NULL elsewhere); bench_setup allocates that or spec->min_scratch,
   * the more (cli_bench_scratch). Returns an ng_status. */
  ng_status (*bench_scratch)(cli_env *env, const cli_bench_spec *spec, size_t *bytes);
} cli_op;

/* The registry (generated cli_ops.c, from the op_*.c file names): NULL-terminated. */
extern const cli_op *const cli_ops[];
/* The op called `name`, or NULL. */
const cli_op *cli_find_op(const char *name);

/* =============================================================================================
 * Helpers added by the CLI core (everything below is additive; the declarations above are the
 * interface op files were first written against).
 * ============================================================================================= */

/* ---- subcommands (main.c) --------------------------------------------------------------------
 * A subcommand is one row of the table in main.c: {name, function, summary, usage}. The core
 * handles `--help`/`-h` for every row (it prints `usage`), then calls fn(argc, argv) with
 * argv[0] = the subcommand's name. fn returns the process exit code (CLI_OK/CLI_USAGE/
 * CLI_DEVICE) and prints its own messages (errors on stderr, prefixed "normgrad-cli: "). */
typedef int (*cli_command_fn)(int argc, char **argv);
typedef struct cli_command {
  const char *name;
  cli_command_fn fn;
  const char *summary; /* one line for `normgrad-cli --help` */
  const char *usage;   /* full text for `normgrad-cli NAME --help` */
} cli_command;

/* `cache list|clear|prebuild` (cache_cmd.c): its function and usage text for the table. */
int cli_cmd_cache(int argc, char **argv);
extern const char cli_cache_usage[];
/* `tune OP` (tune.c). */
int cli_cmd_tune(int argc, char **argv);
extern const char cli_tune_usage[];

/* Print "normgrad-cli: <message>\n" on stderr; returns `code` so callers can `return cli_error(…)`. */
int cli_error(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- strict number parsing (main.c) ------------------------------------------------------------
 * The whole string must be the number (no trailing text, no empty string); NaN is rejected, and
 * the value must lie in [lo, hi] (so ±Inf is rejected unless the range admits it). On failure
 * err gets "OPT: 'TEXT' is not …" and CLI_USAGE is returned. */
int cli_parse_double(const char *opt, const char *text, double lo, double hi, double *out,
                     char *err, size_t errlen);
int cli_parse_ll(const char *opt, const char *text, long long lo, long long hi, long long *out,
                 char *err, size_t errlen);
/* The defaults SPEC.md gives (eps 1e-6, ignore_index -100, grad_output 1, llama, mean). */
void cli_options_init(cli_options *o);

/* ---- host tensors and dtypes (tensors.c; no OpenCL needed) ----------------------------------- */
/* Safetensors dtype names: "F32", "F16", "BF16", "I32", "I64"; NULL for anything else. */
const char *cli_st_dtype_name(ng_dtype dt);
/* Parse a safetensors dtype name (exact, upper case). Returns 0, or -1 when unknown. */
int cli_st_dtype_parse(const char *name, ng_dtype *out);
static inline bool cli_dtype_is_float(ng_dtype dt) {
  return dt == NG_F32 || dt == NG_F16 || dt == NG_BF16;
}
/* Element i of a tensor as double (integers converted, f16/bf16 widened exactly). */
double cli_tensor_get(const cli_tensor *t, size_t i);
/* Round-to-nearest-even conversions (NaN stays NaN), as the kernels do them. */
uint16_t cli_f32_to_bf16(float f);
float cli_bf16_to_f32(uint16_t b);
uint16_t cli_f32_to_f16(float f);
float cli_f16_to_f32(uint16_t h);
/* Store `count` floats as dtype `dt` (f32/f16/bf16) at dst. */
void cli_pack_floats(ng_dtype dt, const float *src, void *dst, size_t count);
/* "[8, 256]" (or "[]" for a scalar) into buf. Returns buf. */
const char *cli_shape_str(const cli_tensor *t, char *buf, size_t len);
/* Product of dims in *out; -1 when a dim is negative or the product (times elem_size, when not 0)
 * overflows size_t. */
int cli_shape_numel(int ndim, const int64_t *shape, size_t elem_size, size_t *out);

/* ---- input checking for op files (tensors.c). Each returns CLI_OK, or CLI_USAGE with err
 * naming the tensor and the problem. ------------------------------------------------------------ */
/* The input called `name`: *t = it, or NULL when absent. Missing and `required` → CLI_USAGE
 * ("OP: missing required tensor 'NAME'"). */
int cli_input(const cli_tensors *in, const char *op, const char *name, bool required,
              const cli_tensor **t, char *err, size_t errlen);
/* Every input name must be one of `allowed` (NULL-terminated): a misspelt "dY" must not silently
 * skip the backward. */
int cli_check_names(const cli_tensors *in, const char *op, const char *const *allowed, char *err,
                    size_t errlen);
/* t's dtype is one of the dtypes whose bit (1u << dtype) is set in `mask`. */
#define CLI_FLOAT_DTYPES ((1u << NG_F32) | (1u << NG_F16) | (1u << NG_BF16))
#define CLI_INDEX_DTYPES ((1u << NG_I32) | (1u << NG_I64))
int cli_expect_dtype(const cli_tensor *t, unsigned mask, char *err, size_t errlen);
/* t has dtype exactly like `like`'s. */
int cli_expect_same_dtype(const cli_tensor *t, const cli_tensor *like, char *err, size_t errlen);
/* View t (rank ≥ 1, no zero dims) as rows × n with n = its last dim. */
int cli_rows_n(const cli_tensor *t, size_t *rows, size_t *n, char *err, size_t errlen);
/* t has exactly like's shape. */
int cli_expect_same_shape(const cli_tensor *t, const cli_tensor *like, char *err, size_t errlen);
/* t has exactly the shape (ndim, shape); `why` (may be NULL) says where it comes from, e.g.
 * "the last dim of x". */
int cli_expect_shape(const cli_tensor *t, int ndim, const int64_t *shape, const char *why,
                     char *err, size_t errlen);
/* The shape of `t` without its last dim ([1] when t is 1-D): the shape of per-row statistics. */
void cli_rows_shape(const cli_tensor *t, int *ndim, int64_t *shape);

/* ---- safetensors (safetensors.c) -------------------------------------------------------------
 * Reader: the whole format is checked (header length, JSON, dtypes F32/F16/BF16/I32/I64, shapes,
 * data_offsets inside the data section and consistent with shape·dtype, no overlaps, no
 * duplicate names, at most CLI_MAX_DIMS dims, __metadata__ a map of strings). Appends the tensors
 * to *out in header order. Returns CLI_OK or CLI_USAGE with err saying what is wrong; on failure
 * *out is left as it was. */
int cli_st_parse(const void *buf, size_t len, cli_tensors *out, char *err, size_t errlen);
int cli_st_read(const char *path, cli_tensors *out, char *err, size_t errlen);
/* Writer: tensors in list order, contiguous, header padded with spaces so the data starts at a
 * multiple of 8. `meta` is NULL or a NULL-terminated list of key, value strings for
 * __metadata__. Written to a temporary file in the destination's directory, fsynced and renamed
 * over `path` only when everything succeeded; on failure the temporary is removed and `path` is
 * untouched. Returns CLI_OK or CLI_USAGE (err filled). */
int cli_st_write(const char *path, const cli_tensors *ts, const char *const *meta, char *err,
                 size_t errlen);
/* The same bytes in memory (malloc'd, *len set), for tests. */
int cli_st_serialize(const cli_tensors *ts, const char *const *meta, void **buf, size_t *len,
                     char *err, size_t errlen);

/* ---- device environment (common.c) ----------------------------------------------------------- */
/* Open the device `selector` picks (NULL/"" = NORMGRAD_DEVICE, then the default), with an
 * in-order profiling queue. A selector that matches nothing → CLI_USAGE; no device at all or an
 * OpenCL failure → CLI_DEVICE. */
int cli_env_open(const char *selector, cli_env *env, char *err, size_t errlen);
void cli_env_close(cli_env *env);
/* Device name, vendor, platform, driver (empty strings when the query fails). */
typedef struct cli_device_desc {
  char name[256], vendor[256], platform[256], driver[128], version[128];
  cl_device_type type;
  cl_uint compute_units;
  cl_ulong global_mem, max_alloc;
} cli_device_desc;
void cli_describe_device(cl_device_id dev, cli_device_desc *d);
/* "GPU", "CPU", "ACCELERATOR", … */
const char *cli_device_type_str(cl_device_type t);

/* A device buffer of `count` elements of `dt` filled with deterministic pseudo-random values
 * (f32/f16/bf16: uniform with the given mean and standard deviation; I32/I64: in [0, (int)std)).
 * For bench_setup. NULL on failure with err filled. */
cl_mem cli_random_buffer(cli_env *env, ng_dtype dt, size_t count, uint64_t seed, double mean,
                         double std, char *err, size_t errlen);

/* ---- benchmarks (bench.c) ---------------------------------------------------------------------
 * Runs `pass` (one of the names the op's bench_setup reports) of op on `spec`: every case that
 * comes before it in the op's list is run once first (a backward needs the forward's saved
 * statistics), then ≥ 3 warm-up runs and ≥ 20 timed ones; prints a table, or one JSON object
 * when `json`. With io (NULL: neither), the pass's outputs are then saved or checked
 * (`--save-outputs`, `--check-outputs`; a file that does not fit the pass is refused before any
 * run). Returns the exit code. */
typedef struct cli_bench_io {
  const char *save;         /* --save-outputs FILE: the pass's outputs after timing, or NULL */
  const cli_tensors *check; /* --check-outputs FILE's tensors (read before any device work) */
} cli_bench_io;
int cli_bench(cli_env *env, const cli_op *op, const cli_bench_spec *spec, const cli_options *o,
              const char *pass, bool json, const cli_bench_io *io);

/* More to report about a case, for ops that are compute-bound or allocate (added for flce).
 * Zero/NULL fields are absent from the report. */
typedef struct cli_bench_more {
  double flops;         /* floating-point operations of one pass: reported as TFLOP/s too */
  const char *sub_pass; /* a second measurement timed in the same run, alternating with the */
  ng_status (*sub_run)(cli_env *env, void *state); /* case's own (flce: its GEMMs alone) */
  struct {
    const char *key; /* NULL = unused */
    double value;
  } extra[10]; /* more numbers (flce: the extra device memory it allocates, …) */
} cli_bench_more;
/* For bench_setup: attach `more` to `c`, one of the cases it fills in. Kept by pointer: it must
 * stay valid until bench_cleanup (put it in the op's state). */
void cli_bench_attach(const cli_bench_case *c, const cli_bench_more *more);

/* The scratch an op's bench_setup allocates (common.c): what its bench_scratch hook `need`
 * says, or spec->min_scratch where that is more. */
ng_status cli_bench_scratch(ng_status (*need)(cli_env *, const cli_bench_spec *, size_t *),
                            cli_env *env, const cli_bench_spec *spec, size_t *bytes);

/* A pass's outputs (common.c), for `tune`'s candidates and `bench --check-outputs`: read case
 * c's outputs into host arrays (allocated when bufs[i] is NULL; CLI_OK or CLI_DEVICE), and the
 * worst difference of `got` against `ref` as a multiple of the allowed one (<= 1 agrees):
 * relative 2^-6 for 16-bit outputs and 1e-4 for f32, plus 1e-5 of ref's largest value (or the
 * output's atol); a NaN in one and not the other is INFINITY. *worst_slot (may be NULL): the
 * output slot of that worst difference, -1 when every value is equal. */
int cli_outputs_read(cli_env *env, const cli_bench_case *c, void *bufs[3]);
double cli_outputs_compare(const cli_bench_case *c, void *const ref[3], void *const got[3],
                           int *worst_slot);

/* ---- entry point (main.c; main() itself is in entry.c) -----------------------------------------
 * cli_main is the whole tool: argv as main() gets it, the process exit code back. With
 * cli_parse_only set, every subcommand returns CLI_OK as soon as its arguments have been parsed
 * and checked, before it reads a file, opens a device or prints a result; errors are reported
 * exactly as without it. The argument fuzzer (tests/fuzz/fuzz_args.c) runs in that mode. */
int cli_main(int argc, char **argv);
extern bool cli_parse_only;

#endif
