/*
 * normgrad — OpenCL kernels for the training passes of LLM normalization layers and of the fused
 * linear + cross-entropy loss.
 *
 * The only public header. C11, includable from C++.
 *
 * Contracts that hold for every function below:
 *  - A negative ng_status is an error, 0 is success. OpenCL error codes are passed through
 *    unchanged (they lie in 0…-72 and -1000…-1142); normgrad's own codes lie in -4000…-4099.
 *    ng_status_name()/ng_status_message() describe any code, ng_last_error_detail() says which
 *    argument or which build failed, for the calling thread's last failed call.
 *  - Every argument is checked (buffer sizes against CL_MEM_SIZE, offsets, shapes, dtypes) before
 *    anything is enqueued or written: a failed call has no effect on any buffer.
 *  - Work is enqueued on the caller's in-order queue and is not waited for. Each op waits for the
 *    caller's event wait list and, when `event` is not NULL, returns an event that completes when
 *    the whole op (all of its kernels) has completed. The caller releases that event.
 *  - The library never prints and never exits.
 *  - One ng_context serves one device and may be used from several threads at once (its program
 *    cache is locked); ng_context_override() must not race with calls that use the context.
 *  - All `*_release(NULL)` calls are no-ops.
 */
#ifndef NORMGRAD_H
#define NORMGRAD_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(NG_SHARED_BUILD)
#define NG_API __declspec(dllexport)
#elif defined(__GNUC__)
#define NG_API __attribute__((visibility("default")))
#else
#define NG_API
#endif

#define NG_VERSION_MAJOR 0
#define NG_VERSION_MINOR 1
#define NG_VERSION_PATCH 0
#define NG_VERSION_NUMBER (NG_VERSION_MAJOR * 10000 + NG_VERSION_MINOR * 100 + NG_VERSION_PATCH)
#define NG_VERSION_STRING "0.1.0"

/** Runtime version (NG_VERSION_NUMBER of the library actually linked). */
NG_API unsigned ng_version_number(void);
NG_API const char *ng_version_string(void);

/* ---------------------------------------------------------------------------------------------
 * Status codes. One table (src/status.c) generates the names and messages.
 * ------------------------------------------------------------------------------------------- */
typedef int ng_status;

#define NG_STATUS_TABLE(X)                                                                         \
  X(NG_SUCCESS, 0, "success")                                                                      \
  X(NG_ERR_NULL_HANDLE, -4001, "a required handle (context, queue, params) is NULL")              \
  X(NG_ERR_NULL_BUFFER, -4002, "a required buffer is NULL")                                        \
  X(NG_ERR_BUFFER_TOO_SMALL, -4003, "a buffer is too small for the shape and offset")             \
  X(NG_ERR_OFFSET_OUT_OF_RANGE, -4004, "a buffer offset lies past the end of the buffer")          \
  X(NG_ERR_INVALID_SHAPE, -4005, "a size is zero or the shapes of the tensors disagree")           \
  X(NG_ERR_INDEX_OVERFLOW, -4006, "the sizes overflow the index range")                            \
  X(NG_ERR_UNSUPPORTED_DTYPE, -4007, "a dtype is not supported for this tensor")                   \
  X(NG_ERR_DTYPE_MISMATCH, -4008, "two tensors that must share a dtype do not")                    \
  X(NG_ERR_INVALID_VALUE, -4009, "an option or scalar argument has an invalid value")              \
  X(NG_ERR_GROUPS_NOT_DIVISIBLE, -4010, "the channel count is not divisible by the group count")  \
  X(NG_ERR_TARGET_OUT_OF_RANGE, -4011, "a target index lies outside [0, V) and is not ignored")   \
  X(NG_ERR_HOST_OUT_OF_MEMORY, -4012, "a host allocation failed")                                  \
  X(NG_ERR_BUILD_FAILED, -4013, "an OpenCL program failed to build (see the detail message)")     \
  X(NG_ERR_NO_DEVICE, -4014, "no OpenCL device was found or matched the selection")               \
  X(NG_ERR_UNSUPPORTED_QUEUE, -4015, "the queue is out-of-order or belongs to another device")    \
  X(NG_ERR_IO, -4016, "a file could not be read or written")                                       \
  X(NG_ERR_GEMM_FAILED, -4017, "CLBlast returned an error (see the detail message)")              \
  X(NG_ERR_INTERNAL, -4099, "internal error")

enum {
#define NG_STATUS_ENUM_(name, code, msg) name = code,
  NG_STATUS_TABLE(NG_STATUS_ENUM_)
#undef NG_STATUS_ENUM_
};

/** "NG_ERR_BUFFER_TOO_SMALL", "CL_OUT_OF_RESOURCES", …, or "NG_UNKNOWN_STATUS". Never NULL. */
NG_API const char *ng_status_name(ng_status status);
/** A one-line English description of the code. Never NULL. */
NG_API const char *ng_status_message(ng_status status);
/** Detail of the calling thread's last failed call (which argument, build log excerpt); "" if
 *  none. Valid until the next normgrad call on this thread. */
NG_API const char *ng_last_error_detail(void);

/* ---------------------------------------------------------------------------------------------
 * Dtypes and tensors
 * ------------------------------------------------------------------------------------------- */
typedef enum ng_dtype {
  NG_F32 = 0,
  NG_F16 = 1, /* IEEE half, through vload_half/vstore_half_rte (no cl_khr_fp16 needed) */
  NG_BF16 = 2, /* bfloat16, round-to-nearest-even, NaN kept NaN */
  NG_I32 = 3, /* only for integer tensors (targets) */
  NG_I64 = 4
} ng_dtype;

/** Bytes of one element of `dtype`, 0 for an invalid value. */
NG_API size_t ng_dtype_size(ng_dtype dtype);
/** "f32", "f16", "bf16", "i32", "i64", or NULL. */
NG_API const char *ng_dtype_name(ng_dtype dtype);

/** A view of a caller's buffer: `mem` (NULL = absent), an offset in *elements* of `dtype`. */
typedef struct ng_tensor {
  cl_mem mem;
  size_t offset;
  ng_dtype dtype;
} ng_tensor;

static inline ng_tensor ng_tensor_of(cl_mem mem, size_t offset, ng_dtype dtype) {
  ng_tensor t;
  t.mem = mem;
  t.offset = offset;
  t.dtype = dtype;
  return t;
}
static inline ng_tensor ng_tensor_none(void) { return ng_tensor_of(NULL, 0, NG_F32); }

/* ---------------------------------------------------------------------------------------------
 * Context: one device, its program cache and its launch parameters.
 * ------------------------------------------------------------------------------------------- */
typedef struct ng_context ng_context;

/** Wrap the caller's context and device (both retained until ng_context_release). */
NG_API ng_status ng_context_create(cl_context cl_ctx, cl_device_id device, ng_context **out);
/** Pick the first GPU of any platform, else the first device, and create an OpenCL context for
 *  it (owned by the ng_context). Same as ng_context_create_selected(NULL, out). */
NG_API ng_status ng_context_create_default(ng_context **out);
/** Create a context for the device that ng_select_device(selector) picks. */
NG_API ng_status ng_context_create_selected(const char *selector, ng_context **out);

/** Every device of every platform, in platform order then device order (the indices that
 *  `normgrad-cli devices` prints). Fills up to `max` entries; *count gets the total. */
NG_API ng_status ng_list_devices(cl_device_id *devices, cl_uint max, cl_uint *count);
/** NULL or "" = the default (first GPU, else first device); all digits = an index into
 *  ng_list_devices; anything else = the first device whose name contains it (case-insensitive).
 *  NG_ERR_NO_DEVICE when nothing matches. */
NG_API ng_status ng_select_device(const char *selector, cl_device_id *out);
NG_API void ng_context_release(ng_context *ctx);
NG_API cl_context ng_context_cl_context(const ng_context *ctx);
NG_API cl_device_id ng_context_device(const ng_context *ctx);

/** Launch-parameter overrides (CLBlastOverrideParameters in spirit). NG_TUNE_AUTO restores the
 *  choice made from the device's properties. Set them before the context is used by other
 *  threads. */
#define NG_TUNE_AUTO 0u
typedef enum ng_tune {
  NG_TUNE_WORKGROUP = 1,   /* work-items per work-group for the row kernels (power of 2) */
  NG_TUNE_GROUPS = 2,      /* persistent work-groups per launch */
  NG_TUNE_VECTOR = 3,      /* elements per vector access: 1, or 8 where alignment allows */
  NG_TUNE_REG_COLS = 4     /* column slots per work-item kept in registers (1, 2, 4) */
} ng_tune;
NG_API ng_status ng_context_override(ng_context *ctx, ng_tune what, unsigned value);

typedef struct ng_context_stats {
  uint64_t programs_built; /* programs compiled by this context */
  uint64_t cache_hits;     /* program look-ups served from the in-memory cache */
  uint64_t disk_hits;      /* programs loaded from the on-disk cache */
  uint64_t programs_cached; /* programs held in memory now */
} ng_context_stats;
NG_API ng_status ng_context_get_stats(const ng_context *ctx, ng_context_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Profiling: the time of every kernel an op enqueues (its queue needs CL_QUEUE_PROFILING_ENABLE).
 * Between begin and end, every kernel (and GEMM) this thread enqueues through normgrad is
 * recorded; end waits for them and returns the sum of their END−START times. At most 64 kernels
 * are recorded (NG_ERR_INVALID_VALUE past that).
 * ------------------------------------------------------------------------------------------- */
NG_API ng_status ng_profile_begin(void);
NG_API ng_status ng_profile_end(cl_ulong *kernel_ns, unsigned *kernels);

/* ---------------------------------------------------------------------------------------------
 * Common op arguments
 * ------------------------------------------------------------------------------------------- */
/** Add dweight/dbias into what the caller's buffers hold instead of overwriting them. */
#define NG_ACCUMULATE_GRAD 1u

/** RMSNorm casting modes (Liger-Kernel / Hugging Face). */
typedef enum ng_casting_mode {
  NG_CAST_LLAMA = 0, /* xhat rounded to x's dtype, then times w' */
  NG_CAST_GEMMA = 1, /* everything in f32, one rounding */
  NG_CAST_NONE = 2   /* every elementwise step rounded to x's dtype */
} ng_casting_mode;

/* Backward ops that reduce parameter gradients take an optional `scratch` tensor (dtype f32):
 * when its mem is NULL the op allocates its scratch itself and releases it once enqueued (OpenCL
 * keeps it alive until the kernels finish). To keep allocations off the hot path, query the size
 * with the op's *_scratch_size function and pass a buffer of at least that many bytes, which must
 * not be used by anything else until the op's event completes. Frozen parameters need none. */

/* ---------------------------------------------------------------------------------------------
 * RMSNorm. x[rows, n] → y[rows, n], rstd[rows] (f32). weight[n] optional; w' = offset + w.
 * ------------------------------------------------------------------------------------------- */
typedef struct ng_rmsnorm_params {
  size_t rows;
  size_t n;
  float eps;
  float offset;
  ng_casting_mode casting_mode;
} ng_rmsnorm_params;

/** y and x share x's dtype; weight (any of f32/f16/bf16, or mem NULL = no weight); rstd f32. */
NG_API ng_status ng_rmsnorm_forward(ng_context *ctx, cl_command_queue queue,
                                    const ng_rmsnorm_params *p, ng_tensor x, ng_tensor weight,
                                    ng_tensor y, ng_tensor rstd, cl_uint num_events_in_wait_list,
                                    const cl_event *event_wait_list, cl_event *event);

/** dx (x's dtype) from dy, x, weight, rstd. dweight (weight's dtype) mem NULL = frozen weight:
 *  built with -DCOMPUTE_DW=0, no scratch. flags: NG_ACCUMULATE_GRAD. */
NG_API ng_status ng_rmsnorm_backward(ng_context *ctx, cl_command_queue queue,
                                     const ng_rmsnorm_params *p, ng_tensor dy, ng_tensor x,
                                     ng_tensor weight, ng_tensor rstd, ng_tensor dx,
                                     ng_tensor dweight, unsigned flags, ng_tensor scratch,
                                     cl_uint num_events_in_wait_list,
                                     const cl_event *event_wait_list, cl_event *event);

/** Bytes of f32 scratch that ng_rmsnorm_backward needs (0 when compute_dweight is 0). */
NG_API ng_status ng_rmsnorm_backward_scratch_size(ng_context *ctx, const ng_rmsnorm_params *p,
                                                  int compute_dweight, size_t *bytes);

/* ---- fused add + RMSNorm (issue 3) ---------------------------------------------------------- */

/* ---- LayerNorm (issue 3) -------------------------------------------------------------------- */

/* ---- GroupNorm (issue 3) -------------------------------------------------------------------- */
/* x[B, C, *spatial] viewed as [B, C, S] (S = product of the spatial dims, 1 for x[B, C]); groups
 * of C/G consecutive channels. Per (b, g): n = (C/G)·S elements, mean and variance two-pass
 * style (chunk-wise exact deviations merged pairwise, never E[x²] − mean²), rstd =
 * 1/sqrt(var + eps); saved mean, rstd [B, G] (f32). y = rd((x − mean)·rstd·w[c] + b[c]).
 * Per-channel weight[C] and bias[C] are each optional (mem NULL: w = 1, b = 0); both share one
 * dtype (f32, f16 or bf16), independent of x's. */
typedef struct ng_groupnorm_params {
  size_t batch;    /* B ≥ 1 */
  size_t channels; /* C ≥ 1, divisible by groups (else NG_ERR_GROUPS_NOT_DIVISIBLE) */
  size_t spatial;  /* S ≥ 1 */
  size_t groups;   /* G, 1 ≤ G ≤ C */
  float eps;       /* finite, ≥ 0 */
} ng_groupnorm_params;
/* Errors of every GroupNorm call, before anything is enqueued: NG_ERR_GROUPS_NOT_DIVISIBLE
 * (C % G != 0, including G > C), NG_ERR_INVALID_SHAPE (a zero size), NG_ERR_INDEX_OVERFLOW
 * ((C/G)·S, B·G, C or S not below 2^32, or B·C·S overflowing), NG_ERR_INVALID_VALUE (eps, flags,
 * dweight without weight), and the buffer, offset and dtype errors of the table. */

/** y (x's dtype) and mean, rstd ([B, G], f32) from x. `scratch`: see the note above the RMSNorm
 *  section; the forward needs one only when few, large groups are split over several work-groups
 *  (ng_groupnorm_forward_scratch_size says 0 otherwise). */
NG_API ng_status ng_groupnorm_forward(ng_context *ctx, cl_command_queue queue,
                                      const ng_groupnorm_params *p, ng_tensor x,
                                      ng_tensor weight, ng_tensor bias, ng_tensor y,
                                      ng_tensor mean, ng_tensor rstd, ng_tensor scratch,
                                      cl_uint num_events_in_wait_list,
                                      const cl_event *event_wait_list, cl_event *event);

/** Bytes of f32 scratch that ng_groupnorm_forward needs for this shape on this context. */
NG_API ng_status ng_groupnorm_forward_scratch_size(ng_context *ctx, const ng_groupnorm_params *p,
                                                   size_t *bytes);

/** dx (x's dtype) from dy, x, weight, and the forward's mean and rstd. dweight and dbias
 *  (the parameters' dtype, C elements) are each optional: mem NULL = frozen, built with
 *  -DCOMPUTE_DW=0 / -DCOMPUTE_DB=0, nothing computed or allocated for it. dweight needs a weight;
 *  dbias (= Σ dy per channel) needs no bias value, but must share the weight's dtype when a
 *  weight is given. flags: NG_ACCUMULATE_GRAD. */
NG_API ng_status ng_groupnorm_backward(ng_context *ctx, cl_command_queue queue,
                                       const ng_groupnorm_params *p, ng_tensor dy, ng_tensor x,
                                       ng_tensor weight, ng_tensor mean, ng_tensor rstd,
                                       ng_tensor dx, ng_tensor dweight, ng_tensor dbias,
                                       unsigned flags, ng_tensor scratch,
                                       cl_uint num_events_in_wait_list,
                                       const cl_event *event_wait_list, cl_event *event);

/** Bytes of f32 scratch that ng_groupnorm_backward needs (0 with both parameters frozen unless
 *  groups are split over several work-groups). */
NG_API ng_status ng_groupnorm_backward_scratch_size(ng_context *ctx,
                                                    const ng_groupnorm_params *p,
                                                    int compute_dweight, int compute_dbias,
                                                    size_t *bytes);

/* ---- PolyNorm (issue 3) --------------------------------------------------------------------- */
/* x[rows, n]. For p ∈ {3, 2, 1}: u_p = x^p, rstd_p = 1/sqrt(mean(u_p²) + eps), all in f32 (an f16
 * x whose x⁶ overflows f16 is fine); y = rd(w0·u3·rstd3 + w1·u2·rstd2 + w2·u1·rstd1 + b).
 * weight[3] is required, bias[1] optional (mem NULL: b = 0); both share one dtype (f32, f16 or
 * bf16), independent of x's. Saved rstd[rows, 3] = (rstd3, rstd2, rstd1), f32. */
typedef struct ng_polynorm_params {
  size_t rows; /* ≥ 1, rows·3 below 2^32 */
  size_t n;    /* ≥ 1, below 2^32 */
  float eps;   /* finite, ≥ 0 */
} ng_polynorm_params;

/** y (x's dtype) and rstd ([rows, 3], f32) from x, weight[3] and the optional bias[1]. Errors:
 *  NG_ERR_INVALID_SHAPE, NG_ERR_INDEX_OVERFLOW, NG_ERR_INVALID_VALUE (eps), NG_ERR_NULL_BUFFER
 *  (no weight), and the buffer, offset and dtype errors of the table. */
NG_API ng_status ng_polynorm_forward(ng_context *ctx, cl_command_queue queue,
                                     const ng_polynorm_params *p, ng_tensor x, ng_tensor weight,
                                     ng_tensor bias, ng_tensor y, ng_tensor rstd,
                                     cl_uint num_events_in_wait_list,
                                     const cl_event *event_wait_list, cl_event *event);

/** dx (x's dtype) from dy, x, weight and the forward's rstd. dweight[3] and dbias[1] (the
 *  weight's dtype) are each optional: mem NULL = frozen (-DCOMPUTE_DW=0 / -DCOMPUTE_DB=0, no
 *  scratch for it). dw_p = Σ_rows rstd_p·Σ dy·x^p, db = Σ dy. flags: NG_ACCUMULATE_GRAD. */
NG_API ng_status ng_polynorm_backward(ng_context *ctx, cl_command_queue queue,
                                      const ng_polynorm_params *p, ng_tensor dy, ng_tensor x,
                                      ng_tensor weight, ng_tensor rstd, ng_tensor dx,
                                      ng_tensor dweight, ng_tensor dbias, unsigned flags,
                                      ng_tensor scratch, cl_uint num_events_in_wait_list,
                                      const cl_event *event_wait_list, cl_event *event);

/** Bytes of f32 scratch that ng_polynorm_backward needs (0 with both parameters frozen). */
NG_API ng_status ng_polynorm_backward_scratch_size(ng_context *ctx, const ng_polynorm_params *p,
                                                   int compute_dweight, int compute_dbias,
                                                   size_t *bytes);

/* ---- fused linear + cross-entropy (issue 4) -------------------------------------------------- */

#ifdef __cplusplus
}
#endif
#endif /* NORMGRAD_H */
