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
} cli_options;

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

/* ---- benchmarks -------------------------------------------------------------------------------- */
typedef struct cli_bench_spec {
  size_t rows, hidden;
  ng_dtype dtype; /* activations; weights are f32 unless the op says otherwise */
  bool freeze_weight, freeze_bias;
} cli_bench_spec;

typedef struct cli_bench_case {
  const char *pass; /* "forward", "backward", … */
  double bytes;     /* bytes the pass must move: every input read once, every output written once */
  /* Enqueue one pass on env->queue. Returns an ng_status. */
  ng_status (*run)(cli_env *env, void *state);
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
} cli_op;

/* The registry (ops.c): NULL-terminated. */
extern const cli_op *const cli_ops[];

#endif
