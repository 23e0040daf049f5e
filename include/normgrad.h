/*
 * normgrad — OpenCL kernels for the training passes of LLM normalization layers and of the fused
 * linear + cross-entropy loss.
 *
 * The only public header. C11, includable from C++.
 *
 * docs/api.md is the reference: every function, who owns what, and every status it returns.
 *
 * Contracts that hold for every function below:
 *  - A negative ng_status is an error, 0 is success. OpenCL error codes are passed through
 *    unchanged (they lie in 0…-72 and -1000…-1142); normgrad's own codes lie in -4000…-4099.
 *    ng_status_name()/ng_status_message() describe any code, ng_last_error_detail() says which
 *    argument or which build failed, for the calling thread's last failed call.
 *  - Every argument is checked (buffer sizes against CL_MEM_SIZE, offsets, shapes, dtypes) before
 *    anything is enqueued or written: a call refused for its arguments has no effect on any
 *    buffer (it may have built and cached programs). Only an OpenCL failure while enqueueing (such
 *    as CL_OUT_OF_RESOURCES), which no check can foresee, can leave part of an op enqueued; its
 *    outputs are then undefined.
 *  - Work is enqueued on the caller's in-order queue and is not waited for (ng_flce alone blocks,
 *    to read the targets back). Each op waits for the caller's event wait list and, when `event`
 *    is not NULL, returns an event that completes when the whole op (all of its kernels) has
 *    completed; *event is written only on success. The caller releases that event.
 *  - Buffers (cl_mem) always belong to the caller: normgrad never retains, releases or keeps
 *    them past the call (OpenCL itself keeps them alive for the enqueued kernels). The returned
 *    strings are the library's: never freed by the caller.
 *  - The library never prints and never exits.
 *  - One ng_context serves one device and may be used from several threads at once (its program
 *    cache is locked); ng_context_override() and ng_context_release() must not race with calls
 *    that use the context. A caller-provided scratch buffer must not be shared by concurrent
 *    calls. Any number of contexts may exist at once, on any devices or sub-devices; they share
 *    no state (docs/data-parallel.md says what may be shared between threads).
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
 *  none. Every function that returns an ng_status clears it on entry, so it is "" after a
 *  success; the string is thread-local and valid until the next such call on this thread. */
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

/** Wrap the caller's context and device (both retained until ng_context_release; the caller
 *  keeps its own references and releases them as usual). `device` must be one of the context's
 *  devices. On failure *out is NULL. Errors: NG_ERR_NULL_HANDLE (cl_ctx, device or out NULL),
 *  CL_INVALID_DEVICE (device not in cl_ctx, or its properties cannot be read), the OpenCL code
 *  of an unusable cl_ctx, NG_ERR_HOST_OUT_OF_MEMORY, NG_ERR_INTERNAL (mutex). */
NG_API ng_status ng_context_create(cl_context cl_ctx, cl_device_id device, ng_context **out);
/** Pick the first GPU of any platform, else the first device, and create an OpenCL context for
 *  it (owned by the ng_context: released by ng_context_release). Same as
 *  ng_context_create_selected(NULL, out). */
NG_API ng_status ng_context_create_default(ng_context **out);
/** Create a context for the device that ng_select_device(selector) picks. Errors: those of
 *  ng_select_device, the code clCreateContext returns, and those of ng_context_create. */
NG_API ng_status ng_context_create_selected(const char *selector, ng_context **out);

/** Every device of every platform, in platform order then device order (the indices that
 *  `normgrad-cli devices` prints). Fills up to `max` entries of `devices` (may be NULL to count
 *  only); *count gets the total, 0 with NG_SUCCESS when there is no OpenCL platform at all.
 *  The ids are not retained (root devices need no release). Errors: NG_ERR_NULL_HANDLE (count),
 *  NG_ERR_HOST_OUT_OF_MEMORY. */
NG_API ng_status ng_list_devices(cl_device_id *devices, cl_uint max, cl_uint *count);
/** NULL or "" = the default (first GPU, else first device); all digits = an index into
 *  ng_list_devices; anything else = the first device whose name contains it (case-insensitive).
 *  Errors: NG_ERR_NO_DEVICE when nothing matches (or there is no device), NG_ERR_NULL_HANDLE
 *  (out), NG_ERR_HOST_OUT_OF_MEMORY; *out is NULL on failure. */
NG_API ng_status ng_select_device(const char *selector, cl_device_id *out);
/** Release the context's programs and its references to the cl_context and device. Kernels
 *  already enqueued finish normally. No other thread may be using ctx. */
NG_API void ng_context_release(ng_context *ctx);
/** The wrapped cl_context / device, not retained (valid while ctx lives); NULL for a NULL ctx. */
NG_API cl_context ng_context_cl_context(const ng_context *ctx);
NG_API cl_device_id ng_context_device(const ng_context *ctx);

/** Launch-parameter overrides (CLBlastOverrideParameters in spirit). NG_TUNE_AUTO restores the
 *  choice made from the device's properties. Set them before the context is used by other
 *  threads (not thread-safe). Errors: NG_ERR_NULL_HANDLE, NG_ERR_INVALID_VALUE (a value the
 *  parameter does not take: work-group neither a power of two nor a multiple of 32, or beyond the
 *  device or 4096; vector not 1 or 8, register slots not 1, 2, 4 or 8; an unknown parameter).
 *  NG_TUNE_GROUPS takes any value. */
#define NG_TUNE_AUTO 0u
typedef enum ng_tune {
  NG_TUNE_WORKGROUP = 1,   /* work-items per work-group for the row kernels (a power of 2 or a
                              multiple of 32; GroupNorm and FLCE take the power of 2 below) */
  NG_TUNE_GROUPS = 2,      /* persistent work-groups per launch */
  NG_TUNE_VECTOR = 3,      /* elements per vector access: 1, or 8 where alignment allows */
  NG_TUNE_REG_COLS = 4,    /* column slots per work-item kept in registers (1, 2, 4, 8) */
  NG_TUNE_PREFETCH = 5,    /* 1 = off, 2 = on: on NVIDIA each group prefetches its next row
                              into the L2 cache while it reduces the current one; on CPUs the
                              row loops ask for what they read from memory 2 KB ahead (on by
                              default there), or as many bytes ahead as a value of 64-65536
                              (a power of two) says; on a GPU such a value means on */
  NG_TUNE_TABLE = 6,       /* 1 = ignore the tuned table (tuning.txt) and the built-in one
                              (src/tuning.c, by device name), 2 or AUTO = use them */
  NG_TUNE_FUSED_REDUCE = 7 /* 1 = parameter gradients summed by a separate kernel, 2 = by the
                              last work-groups of the backward kernel itself (AUTO: on NVIDIA);
                              for GroupNorm's forward, 1 / 2 = the one-pass kernel off / on
                              (AUTO: f32 x on NVIDIA), for its split forward of 16-bit x and
                              split backward the one-launch kernels (AUTO: on NVIDIA); for the
                              backward of long bf16 rows
                              (RMSNorm, fused add, LayerNorm, PolyNorm; docs/tuning.md) and
                              RMSNorm's and PolyNorm's forward of them, 1 / 2 =
                              rows split across work-groups off / on (AUTO: on NVIDIA);
                              3 = as 2, but the split backward's parameter partials
                              (RMSNorm, fused add, LayerNorm) summed by the separate kernel
                              (AUTO: so for LayerNorm, in the split kernel for the other two,
                              on NVIDIA); GPU-shaped launches only, not in the tuned table */
} ng_tune;
NG_API ng_status ng_context_override(ng_context *ctx, ng_tune what, unsigned value);

/** Record tuned launch parameters in the context's cache folder (`tuning.txt`, docs/tuning.md),
 *  replacing an older entry for the same device (platform, device, driver), kernel kind and
 *  row-length bucket (floor(log2 n)). Contexts created afterwards on this device use them where
 *  no override is set. `kind`: "rmsnorm.fwd", "rmsnorm.bwd", "rmsnorm.bwd_frozen", the same with
 *  "fused-add-rmsnorm." and "layernorm.", "polynorm.fwd", "polynorm.bwd" or
 *  "polynorm.bwd_frozen" (its backward with both parameters frozen; "polynorm": every pass, as
 *  before 2026-11-29). `values[NG_TUNE_*]` (7 entries, index 0 unused; 0 = not tuned).
 *  `comment` (optional) is kept on the line. The file is replaced atomically (temporary file +
 *  rename). `normgrad-cli tune` is the usual caller.
 *  Errors: NG_ERR_NULL_HANDLE (ctx or values NULL), NG_ERR_INVALID_VALUE (unknown kind, n = 0,
 *  values the device cannot take, no cache folder), NG_ERR_IO (the folder or file cannot be
 *  written), NG_ERR_HOST_OUT_OF_MEMORY. Thread-safe; does not change this context's launches. */
NG_API ng_status ng_tuning_store(ng_context *ctx, const char *kind, size_t n,
                                 const unsigned *values, const char *comment);
/** ng_tuning_store for calls whose x has one dtype (f32, f16 or bf16) alone: the line is that
 *  dtype's, and comes before a line for every dtype in the same bucket; ng_tuning_store's line
 *  serves every dtype and replaces the bucket's lines of single dtypes. A launch can gain in one
 *  dtype and lose in another (docs/tuning.md); `normgrad-cli tune` stores the dtype it tuned.
 *  Errors: as ng_tuning_store, and NG_ERR_UNSUPPORTED_DTYPE for another dtype. */
NG_API ng_status ng_tuning_store_dtype(ng_context *ctx, const char *kind, ng_dtype dtype,
                                       size_t n, const unsigned *values, const char *comment);
/** ng_tuning_store_dtype for rows of lo..hi elements alone (lo = hi: one length) instead of a
 *  bucket: the line comes before the bucket's lines for those lengths (the narrowest such line
 *  first), and replaces the line of the same kind, dtype and lengths alone; a later
 *  ng_tuning_store_dtype of lo's bucket replaces it. Lengths in one bucket can want different
 *  launches (docs/tuning.md); `normgrad-cli tune` stores the length it measured.
 *  Errors: as ng_tuning_store_dtype, and NG_ERR_INVALID_VALUE for lo = 0, hi < lo or
 *  hi ≥ 2^32. */
NG_API ng_status ng_tuning_store_range(ng_context *ctx, const char *kind, ng_dtype dtype,
                                       size_t lo, size_t hi, const unsigned *values,
                                       const char *comment);
/** The values the tables give calls of `kind` with x of `dtype` (f32, f16 or bf16) and rows of
 *  n elements, as this context loaded them: its `tuning.txt` line (the narrowest line of lengths
 *  that holds n, that dtype's first; else the bucket's line, that dtype's, else every dtype's),
 *  else the built-in table's entry for this device (docs/tuning.md),
 *  before the overrides and the rules. `values[NG_TUNE_*]` (7 entries, index 0 unused) get them,
 *  0 where the line leaves a parameter to the rules; `*found` is 1 if a line or entry applies, 0
 *  if none does or NG_TUNE_TABLE is 1 (then `values` are all 0). A frozen kind takes its
 *  work-group size, slots and vector width from the kind with gradients ("rmsnorm.bwd" for
 *  "rmsnorm.bwd_frozen"), so that dx keeps its bits. Errors: NG_ERR_NULL_HANDLE (ctx, kind,
 *  values or found NULL), NG_ERR_INVALID_VALUE (unknown kind, n = 0), NG_ERR_UNSUPPORTED_DTYPE.
 *  Thread-safe with other calls that do not change the context's overrides. */
NG_API ng_status ng_tuning_lookup(const ng_context *ctx, const char *kind, ng_dtype dtype,
                                  size_t n, unsigned *values, int *found);

/** What ng_tune_gemm measured: one row-major SGEMM of size³ (wall time, median of 3). */
typedef struct ng_gemm_tune_result {
  unsigned candidates, rejected; /* Xgemm configurations tried; refused, failed or wrong */
  double default_ms, best_ms;    /* the parameters active before, the fastest found */
  double default_tflops, best_tflops;
  char best[256];                /* "GEMMK=0 KREG=1 KWG=32 …", or "baseline" */
  int stored;                    /* 1 when written to tuning.txt */
} ng_gemm_tune_result;
/** Search CLBlast's single-precision Xgemm parameters for the context's device: each candidate
 *  is applied with CLBlastOverrideParameters, timed on C = A·B of size³ (size a multiple of 64,
 *  64…16384) on `queue`, and checked against the baseline's result (exact inputs, so any order
 *  of summation must agree). The fastest is left active for the device in this process (CLBlast's
 *  parameters are process-wide) and, with `store` and a gain of at least 1%, recorded in the
 *  cache folder's tuning.txt, where every context created later on this device applies it
 *  (unless NG_TUNE_TABLE / NORMGRAD_TUNE table=1 says to ignore the table). Blocks; takes
 *  seconds to minutes. `normgrad-cli tune gemm` is the usual caller.
 *  Errors: NG_ERR_NULL_HANDLE; NG_ERR_INVALID_VALUE (size, or the matrices would not fit);
 *  NG_ERR_UNSUPPORTED_QUEUE; OpenCL codes from buffer creation; NG_ERR_GEMM_FAILED (the
 *  baseline SGEMM failed); NG_ERR_IO / NG_ERR_INVALID_VALUE from the store (as ng_tuning_store);
 *  NG_ERR_HOST_OUT_OF_MEMORY. Not thread-safe with other GEMM work on the same device. */
NG_API ng_status ng_tune_gemm(ng_context *ctx, cl_command_queue queue, size_t size, int store,
                              ng_gemm_tune_result *out);

typedef struct ng_context_stats {
  uint64_t programs_built; /* programs compiled from source by this context */
  uint64_t cache_hits;     /* program look-ups served from the in-memory cache */
  uint64_t disk_hits;      /* programs loaded from the on-disk cache */
  uint64_t programs_cached; /* programs held in memory now */
  uint64_t disk_misses;    /* on-disk look-ups that found no entry */
  uint64_t disk_stores;    /* entries written to the on-disk cache */
  uint64_t disk_rejects;   /* entries found but not used (truncated, corrupt, another key or
                              driver, refused by the driver): rebuilt from source and replaced */
  uint64_t disk_errors;    /* cache folder I/O failures (not creatable, read-only, full): the
                              program was built from source and used, just not stored */
} ng_context_stats;
/** A consistent snapshot of the counters (thread-safe). NG_ERR_NULL_HANDLE for a NULL ctx/out. */
NG_API ng_status ng_context_get_stats(const ng_context *ctx, ng_context_stats *out);

/* ---------------------------------------------------------------------------------------------
 * On-disk program cache (docs/cache.md). Programs a context builds are also written, as the
 * driver's binaries, into a cache folder, and later contexts, in this or any process, load them
 * instead of compiling. An entry is keyed by platform, device, driver version, normgrad version,
 * the program's source hash and its build options; one that is truncated, corrupt, written for
 * another key or refused by the driver is rebuilt from source and replaced. Writes are atomic
 * (temporary file + rename), so processes may share a folder. The cache never makes a call fail:
 * when the folder cannot be created, read or written, programs are built from source as without
 * it (counted in disk_errors).
 *
 * Folder of a new context: $NORMGRAD_CACHE_DIR; the value "off" turns the cache off; unset or
 * empty: $XDG_CACHE_HOME/normgrad, else $HOME/.cache/normgrad, else off. Created (mode 0700) on
 * the first store. Size bound: $NORMGRAD_CACHE_MAX_BYTES (bytes, or with a K/M/G/T suffix;
 * 0 = none; default NG_CACHE_DEFAULT_MAX_BYTES); after each store, the least recently used
 * entries (by file modification time, refreshed on every load) are removed until the folder's
 * entries fit. Only files owned by the user and writable by nobody else are loaded.
 * ------------------------------------------------------------------------------------------- */
#define NG_CACHE_DEFAULT_MAX_BYTES (512ull << 20)

/** Use `dir` (copied) as this context's cache folder, or NULL to turn its disk cache off.
 *  Affects programs not yet in the context's memory cache. Thread-safe. Errors:
 *  NG_ERR_NULL_HANDLE (ctx), NG_ERR_INVALID_VALUE for "", NG_ERR_HOST_OUT_OF_MEMORY. */
NG_API ng_status ng_context_set_cache_dir(ng_context *ctx, const char *dir);
/** The context's cache folder into buf ("" when off); NG_ERR_INVALID_VALUE when `len` bytes
 *  cannot hold it, NG_ERR_NULL_HANDLE for a NULL ctx or buf. Thread-safe. */
NG_API ng_status ng_context_get_cache_dir(const ng_context *ctx, char *buf, size_t len);
/** Size bound applied after this context's stores (0 = none). Thread-safe.
 *  NG_ERR_NULL_HANDLE for a NULL ctx. */
NG_API ng_status ng_context_set_cache_max_bytes(ng_context *ctx, uint64_t max_bytes);
/** The folder a context created now would use, from the environment ("" when off).
 *  NG_ERR_NULL_HANDLE (buf), NG_ERR_INVALID_VALUE when `len` bytes cannot hold it. */
NG_API ng_status ng_cache_default_dir(char *buf, size_t len);

/** One entry of a cache folder, as ng_cache_list shows it. Strings are "" when unreadable. */
typedef struct ng_cache_entry {
  const char *path;     /* the entry's file */
  const char *program;  /* kernel source name, "rmsnorm" */
  const char *options;  /* build options */
  const char *device;   /* device name */
  const char *driver;   /* driver version */
  const char *platform; /* platform name */
  const char *normgrad; /* normgrad version that wrote it */
  uint64_t bytes;       /* file size */
  int64_t last_used;    /* seconds since the epoch (written or last loaded) */
  int valid;            /* 1 when length, header and checksums agree; a context still checks
                           that the key matches its device and driver before using it */
} ng_cache_entry;
/** Return nonzero to stop the listing. The entry's strings live only during the call. */
typedef int (*ng_cache_visit_fn)(const ng_cache_entry *entry, void *user);
/** Call `visit` for every entry in `dir` (NULL = ng_cache_default_dir), most recently used
 *  first. A folder that does not exist has no entries; NG_ERR_IO when it cannot be read,
 *  NG_ERR_INVALID_VALUE when dir is NULL and the cache is off, NG_ERR_NULL_HANDLE for a NULL
 *  visit, NG_ERR_HOST_OUT_OF_MEMORY. */
NG_API ng_status ng_cache_list(const char *dir, ng_cache_visit_fn visit, void *user);
/** Remove every entry and leftover temporary file from `dir` (NULL = default); other files and
 *  the folder stay. *removed (may be NULL) gets the number of files removed. NG_ERR_IO when the
 *  folder cannot be read or a file could not be removed (the others still are),
 *  NG_ERR_INVALID_VALUE when dir is NULL and the cache is off, NG_ERR_HOST_OUT_OF_MEMORY. */
NG_API ng_status ng_cache_clear(const char *dir, uint64_t *removed);

/** Get (build, or load from the disk cache) every program that `op` can use on the context's
 *  device under its current ng_context_override settings — every activation dtype, weight dtype
 *  or no weight, frozen combination and vector width, and their gradient reductions — so later
 *  calls compile nothing. `op` is one of the names ng_prebuild_op_name lists ("rmsnorm",
 *  "fused-add-rmsnorm", "layernorm", "groupnorm", "polynorm"; FLCE has no list of variants yet),
 *  or NULL for all of those. *programs (may be NULL) gets the number of distinct programs.
 *  Thread-safe. Errors: NG_ERR_NULL_HANDLE (ctx), NG_ERR_INVALID_VALUE for any other op name,
 *  a build failure as the op itself would return it, NG_ERR_HOST_OUT_OF_MEMORY. */
NG_API ng_status ng_prebuild(ng_context *ctx, const char *op, unsigned *programs);
/** The i-th op name ng_prebuild accepts (i = 0, 1, …), NULL past the last. */
NG_API const char *ng_prebuild_op_name(unsigned i);

/* ---------------------------------------------------------------------------------------------
 * Profiling: the time of every kernel an op enqueues (its queue needs CL_QUEUE_PROFILING_ENABLE).
 * Between begin and end, every kernel (and GEMM) this thread enqueues through normgrad is
 * recorded; end waits for them and returns the sum of their END−START times (a CLBlast GEMM,
 * which runs several kernels, counts from just before its first to the end of its last). At most
 * 2^20 are recorded (NG_ERR_INVALID_VALUE past that). Per thread: another thread's calls are
 * neither recorded nor disturbed.
 * ------------------------------------------------------------------------------------------- */
/** Start recording (a begin without end discards what was recorded). Always NG_SUCCESS. */
NG_API ng_status ng_profile_begin(void);
/** Wait for the recorded kernels; *kernel_ns and *kernels (each may be NULL) get their time and
 *  count. Errors: NG_ERR_INVALID_VALUE (no ng_profile_begin, or more than 2^20 kernels),
 *  CL_PROFILING_INFO_NOT_AVAILABLE (a queue without CL_QUEUE_PROFILING_ENABLE), the OpenCL code
 *  of a failed wait (CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST when a kernel failed). */
NG_API ng_status ng_profile_end(cl_ulong *kernel_ns, unsigned *kernels);
/** ng_profile_end, and also each recorded kernel's time and name in enqueue order: the first
 *  `cap` of them go to each_ns[] and names[] (either may be NULL; names are static strings: the
 *  OpenCL kernel's name, or "clblast_sgemm" for a GEMM). Same errors. */
NG_API ng_status ng_profile_end_each(cl_ulong *kernel_ns, unsigned *kernels, cl_ulong *each_ns,
                                     const char **names, unsigned cap);

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
 * not be used by anything else until the op's event completes. Frozen parameters need none (a
 * scratch given to a call that needs none is ignored). The size depends on the context's device
 * and ng_context_override settings, not on the buffers. RMSNorm's, the fused add's and
 * LayerNorm's backward round the scratch's offset up to a multiple of 8 elements (dx's bits must
 * not depend on it); their sizes include that headroom, so any offset works.
 *
 * Errors every norm op (forward and backward) can return, before anything is enqueued:
 *  - NG_ERR_NULL_HANDLE: ctx, queue or params NULL;
 *  - the queue: NG_ERR_UNSUPPORTED_QUEUE (out-of-order, or another device), CL_INVALID_CONTEXT
 *    (another OpenCL context), CL_INVALID_COMMAND_QUEUE (not a queue);
 *  - CL_INVALID_EVENT_WAIT_LIST: a NULL list with a non-zero count (or the reverse), a NULL entry;
 *  - the shape: NG_ERR_INVALID_SHAPE (a zero size), NG_ERR_INDEX_OVERFLOW (a size above 2^31, or
 *    a product beyond size_t);
 *  - NG_ERR_INVALID_VALUE: a scalar out of range (eps negative or not finite, …), unknown flags,
 *    a gradient asked for a parameter the op does not have;
 *  - each tensor: NG_ERR_NULL_BUFFER (a required one absent), NG_ERR_UNSUPPORTED_DTYPE,
 *    NG_ERR_DTYPE_MISMATCH (with the tensor whose dtype it must share), CL_INVALID_CONTEXT (a
 *    buffer of another context), CL_INVALID_MEM_OBJECT (not a buffer), NG_ERR_OFFSET_OUT_OF_RANGE,
 *    NG_ERR_BUFFER_TOO_SMALL (offset + elements beyond CL_MEM_SIZE), NG_ERR_INDEX_OVERFLOW (an
 *    offset whose byte offset overflows);
 *  - getting the programs: NG_ERR_BUILD_FAILED (the build log excerpt in the detail), the OpenCL
 *    code of clCreateProgramWithSource, NG_ERR_HOST_OUT_OF_MEMORY, NG_ERR_INTERNAL;
 *  - a scratch (when one is needed): NG_ERR_UNSUPPORTED_DTYPE (not f32) and the tensor errors for
 *    the caller's, CL_INVALID_BUFFER_SIZE (larger than the device's largest allocation) or
 *    clCreateBuffer's code for an allocated one;
 * and, while enqueueing, the code of clCreateKernel, clSetKernelArg or clEnqueueNDRangeKernel
 * (CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY, …). */

/* ---------------------------------------------------------------------------------------------
 * RMSNorm. x[rows, n] → y[rows, n], rstd[rows] (f32). weight[n] optional; w' = offset + w.
 * ------------------------------------------------------------------------------------------- */
typedef struct ng_rmsnorm_params {
  size_t rows; /* 1 … 2^31, and so is n (NG_ERR_INDEX_OVERFLOW above); rows·n may exceed 2^32 */
  size_t n;
  float eps;    /* finite, ≥ 0 */
  float offset; /* finite (checked even without a weight, where it is ignored) */
  ng_casting_mode casting_mode;
} ng_rmsnorm_params;

/** y and x share x's dtype (f32/f16/bf16); weight (any of f32/f16/bf16, or mem NULL = no
 *  weight); rstd[rows] f32. Errors: those every norm op can return (above); NG_ERR_INVALID_VALUE
 *  for eps, offset or an unknown casting mode; NG_ERR_DTYPE_MISMATCH when y's dtype is not x's;
 *  NG_ERR_UNSUPPORTED_DTYPE for rstd not f32. */
NG_API ng_status ng_rmsnorm_forward(ng_context *ctx, cl_command_queue queue,
                                    const ng_rmsnorm_params *p, ng_tensor x, ng_tensor weight,
                                    ng_tensor y, ng_tensor rstd, cl_uint num_events_in_wait_list,
                                    const cl_event *event_wait_list, cl_event *event);

/** dx (x's dtype) from dy, x, weight, rstd. dweight (weight's dtype) mem NULL = frozen weight:
 *  built with -DCOMPUTE_DW=0, no scratch. flags: NG_ACCUMULATE_GRAD. Errors: as the forward,
 *  plus NG_ERR_INVALID_VALUE for unknown flags or a dweight without a weight,
 *  NG_ERR_DTYPE_MISMATCH for dy or dx not in x's dtype or dweight not in the weight's, and the
 *  scratch errors. */
NG_API ng_status ng_rmsnorm_backward(ng_context *ctx, cl_command_queue queue,
                                     const ng_rmsnorm_params *p, ng_tensor dy, ng_tensor x,
                                     ng_tensor weight, ng_tensor rstd, ng_tensor dx,
                                     ng_tensor dweight, unsigned flags, ng_tensor scratch,
                                     cl_uint num_events_in_wait_list,
                                     const cl_event *event_wait_list, cl_event *event);

/** Bytes of f32 scratch that ng_rmsnorm_backward needs (0 when compute_dweight is 0). Only rows
 *  and n of `p` are read. Errors: NG_ERR_NULL_HANDLE (ctx, p or bytes), NG_ERR_INVALID_SHAPE,
 *  NG_ERR_INDEX_OVERFLOW. */
NG_API ng_status ng_rmsnorm_backward_scratch_size(ng_context *ctx, const ng_rmsnorm_params *p,
                                                  int compute_dweight, size_t *bytes);

/* ---- fused add + RMSNorm (issue 3) ---------------------------------------------------------- */
/* s = rd(x + residual) (stored: it is the next layer's residual), y = RMSNorm(s) with the
 * casting modes, offset and optional weight of ng_rmsnorm_*. Same fields as ng_rmsnorm_params. */
typedef struct ng_fused_add_rmsnorm_params {
  size_t rows;
  size_t n;
  float eps;
  float offset;
  ng_casting_mode casting_mode;
} ng_fused_add_rmsnorm_params;

/** x, residual, y and s share x's dtype (f32/f16/bf16); weight any float dtype, or mem NULL =
 *  no weight; rstd[rows] f32. s may be the residual buffer itself (same offset: updated in
 *  place). Errors as ng_rmsnorm_forward, plus NG_ERR_NULL_BUFFER for a missing residual or s and
 *  NG_ERR_DTYPE_MISMATCH when either is not in x's dtype. */
NG_API ng_status ng_fused_add_rmsnorm_forward(ng_context *ctx, cl_command_queue queue,
                                              const ng_fused_add_rmsnorm_params *p, ng_tensor x,
                                              ng_tensor residual, ng_tensor weight, ng_tensor y,
                                              ng_tensor s, ng_tensor rstd,
                                              cl_uint num_events_in_wait_list,
                                              const cl_event *event_wait_list, cl_event *event);

/** dx = RMSNormBackward(dy; s, rstd) + ds_out, written once: it is both the gradient of x and
 *  of residual. ds_out (x's dtype) is the gradient reaching s from later layers; mem NULL = none
 *  (not read; no zero buffer needed). dx may be the ds_out buffer itself (same offset). dy, s,
 *  dx share a dtype. dweight (weight's dtype) mem NULL = frozen weight: built with
 *  -DCOMPUTE_DW=0, no scratch, no reduction; dx is bit-identical either way. flags:
 *  NG_ACCUMULATE_GRAD adds dweight to the buffer's contents. Errors as ng_rmsnorm_backward (s in
 *  the place of x), plus NG_ERR_DTYPE_MISMATCH for a ds_out not in s's dtype. */
NG_API ng_status ng_fused_add_rmsnorm_backward(ng_context *ctx, cl_command_queue queue,
                                               const ng_fused_add_rmsnorm_params *p,
                                               ng_tensor dy, ng_tensor ds_out, ng_tensor s,
                                               ng_tensor weight, ng_tensor rstd, ng_tensor dx,
                                               ng_tensor dweight, unsigned flags,
                                               ng_tensor scratch,
                                               cl_uint num_events_in_wait_list,
                                               const cl_event *event_wait_list, cl_event *event);

/** Bytes of f32 scratch that ng_fused_add_rmsnorm_backward needs (0 when compute_dweight is
 *  0). Errors as ng_rmsnorm_backward_scratch_size. */
NG_API ng_status ng_fused_add_rmsnorm_backward_scratch_size(ng_context *ctx,
                                                            const ng_fused_add_rmsnorm_params *p,
                                                            int compute_dweight, size_t *bytes);

/* ---- LayerNorm (issue 3) -------------------------------------------------------------------- */
/* mean = Σx/n, var = Σ(x − mean)²/n (two passes over the row), rstd = 1/sqrt(var + eps),
 * y = rd(xhat·w + b) with xhat = (x − mean)·rstd; weight and bias each optional (absent: w = 1,
 * b = 0). */
typedef struct ng_layernorm_params {
  size_t rows;
  size_t n;
  float eps;
} ng_layernorm_params;

/** x[rows, n] → y (x's dtype), mean[rows] and rstd[rows] (f32). weight[n] and bias[n] each
 *  mem NULL = absent; when both are given they share a dtype (any of f32/f16/bf16, independent
 *  of x's). Errors: those every norm op can return; NG_ERR_INVALID_VALUE for eps;
 *  NG_ERR_DTYPE_MISMATCH when y differs from x or bias from weight; NG_ERR_UNSUPPORTED_DTYPE for
 *  mean or rstd not f32. */
NG_API ng_status ng_layernorm_forward(ng_context *ctx, cl_command_queue queue,
                                      const ng_layernorm_params *p, ng_tensor x,
                                      ng_tensor weight, ng_tensor bias, ng_tensor y,
                                      ng_tensor mean, ng_tensor rstd,
                                      cl_uint num_events_in_wait_list,
                                      const cl_event *event_wait_list, cl_event *event);

/** dx (x's dtype) from dy, x, weight, mean, rstd. `bias`'s values are not read: it says whether
 *  the layer has a bias (and its dtype), and is checked like the forward's (n elements, the
 *  weight's dtype). dweight mem NULL = frozen weight (-DCOMPUTE_DW=0), dbias mem NULL
 *  = frozen bias (-DCOMPUTE_DB=0), independently; each gradient has its parameter's dtype; with
 *  both frozen there is no scratch and no reduction pass. dx is bit-identical whatever is frozen.
 *  NG_ERR_INVALID_VALUE for a dweight without weight, a dbias without bias or unknown flags;
 *  NG_ERR_DTYPE_MISMATCH for dy/dx not in x's dtype or a gradient not in its parameter's; the
 *  forward's errors and the scratch errors. flags: NG_ACCUMULATE_GRAD adds to dweight/dbias
 *  instead of overwriting them. */
NG_API ng_status ng_layernorm_backward(ng_context *ctx, cl_command_queue queue,
                                       const ng_layernorm_params *p, ng_tensor dy, ng_tensor x,
                                       ng_tensor weight, ng_tensor bias, ng_tensor mean,
                                       ng_tensor rstd, ng_tensor dx, ng_tensor dweight,
                                       ng_tensor dbias, unsigned flags, ng_tensor scratch,
                                       cl_uint num_events_in_wait_list,
                                       const cl_event *event_wait_list, cl_event *event);

/** Bytes of f32 scratch that ng_layernorm_backward needs (0 when both flags are 0). Errors as
 *  ng_rmsnorm_backward_scratch_size. */
NG_API ng_status ng_layernorm_backward_scratch_size(ng_context *ctx, const ng_layernorm_params *p,
                                                    int compute_dweight, int compute_dbias,
                                                    size_t *bytes);

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
/* Errors of every GroupNorm call, the *_scratch_size queries included, before anything is
 * enqueued: NG_ERR_NULL_HANDLE (ctx, params; bytes for the queries), NG_ERR_GROUPS_NOT_DIVISIBLE
 * (C % G != 0, including G > C), NG_ERR_INVALID_SHAPE (a zero size), NG_ERR_INDEX_OVERFLOW
 * ((C/G)·S, B·G, C or S above 2^31, or B·C·S overflowing), NG_ERR_INVALID_VALUE (eps). The
 * forward and backward add the errors every norm op can return: the queue, the wait list,
 * flags, dweight without weight, mean/rstd not f32, y/dy/dx not in x's dtype, bias or a
 * gradient not in the weight's dtype, the buffers and the scratch. */

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
  size_t rows; /* ≥ 1, rows·3 below 2^32 (NG_ERR_INDEX_OVERFLOW) */
  size_t n;    /* 1 … 2^31 */
  float eps;   /* finite, ≥ 0 */
} ng_polynorm_params;

/** y (x's dtype) and rstd ([rows, 3], f32) from x, weight[3] and the optional bias[1]. Errors:
 *  those every norm op can return, NG_ERR_INVALID_VALUE (eps), NG_ERR_NULL_BUFFER (no weight),
 *  NG_ERR_DTYPE_MISMATCH (y not in x's dtype, bias not in the weight's),
 *  NG_ERR_UNSUPPORTED_DTYPE (rstd not f32). */
NG_API ng_status ng_polynorm_forward(ng_context *ctx, cl_command_queue queue,
                                     const ng_polynorm_params *p, ng_tensor x, ng_tensor weight,
                                     ng_tensor bias, ng_tensor y, ng_tensor rstd,
                                     cl_uint num_events_in_wait_list,
                                     const cl_event *event_wait_list, cl_event *event);

/** dx (x's dtype) from dy, x, weight and the forward's rstd. dweight[3] and dbias[1] (the
 *  weight's dtype) are each optional: mem NULL = frozen (-DCOMPUTE_DW=0 / -DCOMPUTE_DB=0, no
 *  scratch for it). dw_p = Σ_rows rstd_p·Σ dy·x^p, db = Σ dy. flags: NG_ACCUMULATE_GRAD.
 *  Errors: the forward's, plus unknown flags (NG_ERR_INVALID_VALUE), dy/dx not in x's dtype or
 *  a gradient not in the weight's (NG_ERR_DTYPE_MISMATCH), and the scratch errors. */
NG_API ng_status ng_polynorm_backward(ng_context *ctx, cl_command_queue queue,
                                      const ng_polynorm_params *p, ng_tensor dy, ng_tensor x,
                                      ng_tensor weight, ng_tensor rstd, ng_tensor dx,
                                      ng_tensor dweight, ng_tensor dbias, unsigned flags,
                                      ng_tensor scratch, cl_uint num_events_in_wait_list,
                                      const cl_event *event_wait_list, cl_event *event);

/** Bytes of f32 scratch that ng_polynorm_backward needs (0 with both parameters frozen). Errors
 *  as ng_rmsnorm_backward_scratch_size. */
NG_API ng_status ng_polynorm_backward_scratch_size(ng_context *ctx, const ng_polynorm_params *p,
                                                   int compute_dweight, int compute_dbias,
                                                   size_t *bytes);

/* ---- fused linear + cross-entropy (issue 4) -------------------------------------------------- */
/* loss = cross_entropy(input·weightᵀ + bias, target) (+ z-loss), with the gradients formed in the
 * same pass, chunk by chunk over rows: the [BT, V] logits never exist, and neither does any
 * [V, H] temporary (CLBlast's included). See docs/flce.md for the math and the memory bound. */
typedef enum ng_reduction {
  NG_REDUCTION_MEAN = 0, /* Σ loss / Σ_{non-ignored} ce_weight[target] (z-loss: / count) */
  NG_REDUCTION_SUM = 1,
  NG_REDUCTION_NONE = 2 /* one value per row; ignored rows give 0 */
} ng_reduction;

/* chunk_rows / scratch_budget / v_block: chosen by the op (the default). */
#define NG_FLCE_AUTO 0u

typedef struct ng_flce_params {
  size_t bt, h, v;          /* rows, hidden size, vocabulary size (all ≥ 1) */
  int64_t ignore_index;     /* rows whose target equals it are ignored (default -100) */
  float label_smoothing;    /* ε in [0, 1] (torch's formula, class weights included) */
  ng_reduction reduction;
  float softcap;            /* 0 = off; c > 0: logits become c·tanh(z/c) before the loss */
  float lse_square_scale;   /* z-loss λ ≥ 0: adds λ·lse² per non-ignored row (not weighted) */
  float grad_output;        /* d(final loss)/d(loss) for mean/sum when no grad_output tensor */
  size_t chunk_rows;        /* rows per chunk, or NG_FLCE_AUTO: the most that fit the budget
                               (a multiple of 256, or of 64 below that, unless all of bt) */
  size_t scratch_budget;    /* bytes that everything the op allocates (its scratch and CLBlast's
                               temporary) may take, for NG_FLCE_AUTO chunks; NG_FLCE_AUTO: 1/64
                               of the device's memory, at least 256 MiB. Capped by the device's
                               largest allocation. */
  size_t v_block;           /* NG_FLCE_AUTO: split a product along V only where CLBlast would
                               copy the whole weight, in blocks of max(chunk rounded up to 256,
                               chunk·V/(4·H)) rows; n > 0: every product in blocks of n rows */
} ng_flce_params;

/** Defaults: ignore_index −100, no smoothing, mean, no softcap, no z-loss, grad_output 1, chunk,
 *  budget and V-block NG_FLCE_AUTO. */
NG_API ng_flce_params ng_flce_params_default(size_t bt, size_t h, size_t v);

/* The op's tensors. Absent ones have mem NULL (ng_tensor_none()).
 *   input      [bt, h]  f32, f16 or bf16
 *   weight     [v, h]   f32
 *   target     [bt]     i32 or i64, each in [0, v) or equal to ignore_index
 *   bias       [v]      f32, optional
 *   ce_weight  [v]      f32, optional class weights (torch's `weight`)
 *   grad_output         f32: [bt] for reduction none (required); [1] for mean/sum (optional,
 *                       read on the device instead of params.grad_output)
 *   loss                f32: [bt] for none (ce + z-loss per row), else [1] (required)
 *   z_loss              f32, optional, the z-loss part alone (same shape as loss)
 *   accuracy            f32, optional: none: [bt] of 1/0 (argmax == target; 0 for ignored rows);
 *                       mean/sum: [1], the fraction over non-ignored rows (0 when none are)
 *   dinput     [bt, h]  input's dtype, optional (absent: the input needs no gradient). It may be
 *                       the input itself (same buffer and offset): each chunk's rows are read
 *                       before they are overwritten.
 *   dweight    [v, h]   f32, optional (absent: frozen weight)
 *   dbias      [v]      f32, optional (absent: frozen or no bias; needs bias)
 *   scratch             f32 at offset 0, optional: at least ng_flce_info.peak_bytes bytes, used
 *                       instead of allocating (not to be touched until the op's event
 *                       completes); a whole buffer, not a sub-buffer (the op makes CLBlast's
 *                       temporary a sub-buffer of it)
 * The argmax of `accuracy` is the first largest logit after bias and softcap. */
typedef struct ng_flce_tensors {
  ng_tensor input, weight, target, bias, ce_weight, grad_output;
  ng_tensor loss, z_loss, accuracy, dinput, dweight, dbias;
  ng_tensor scratch;
} ng_flce_tensors;

/* What a call does and allocates (ng_flce fills it; ng_flce_plan tells it beforehand). */
typedef struct ng_flce_info {
  size_t chunk_rows, chunks; /* rows per chunk, and chunks per call */
  size_t v_block;            /* rows of weight per GEMM call where the weight is split */
  size_t gemm_calls;         /* CLBlast calls per op call, all chunks */
  size_t gemm_temp_bytes;    /* CLBlast's temporary buffer: the largest any call needs */
  size_t gemm_temp_max[3];   /* ... of the logits, dinput and dweight products (0 if skipped) */
  int gemm_strategy[3];      /* per product: 1 whole, 2 aligned part + blocks, 3 blocks, 0 skipped */
  size_t scratch_bytes;      /* the op's own scratch: logits chunk, f32 input chunk, per-row values */
  size_t peak_bytes;         /* all device memory the op allocates: scratch + CLBlast's temporary */
} ng_flce_info;

/** Forward and backward in one call. Validates everything (shapes, dtypes, buffer sizes, option
 *  values), then reads `target` back to check it — so this call BLOCKS until the wait list has
 *  completed and the targets are read: a target outside [0, v) that is not ignore_index returns
 *  NG_ERR_TARGET_OUT_OF_RANGE (naming the row) before anything is written. Then enqueues the
 *  whole op and returns; `event` completes when all of it has.
 *  Every row's gradient is already scaled by grad_output (and by 1/Σ w[target] or 1/count for
 *  mean), so nothing of size [v, h] is rescaled afterwards. With every row ignored the loss is 0
 *  and all gradients are 0 (torch gives NaN). flags: NG_ACCUMULATE_GRAD adds dweight and dbias
 *  into the caller's buffers (dinput is always overwritten). `info` (may be NULL) tells what was
 *  allocated (filled on success only). Errors, all before anything is written:
 *  NG_ERR_NULL_HANDLE (ctx, queue, p, t); the queue and wait-list errors of the norm ops;
 *  NG_ERR_INVALID_SHAPE (bt, h or v 0); NG_ERR_INDEX_OVERFLOW (a size above 2^31, an operand
 *  beyond CLBlast's 32-bit indexing: offset + elements of weight, dweight, or of an f32 input or
 *  dinput ≥ 2^31; chunk_rows·(v + h) ≥ 2^31); NG_ERR_INVALID_VALUE (unknown flags or reduction,
 *  label_smoothing outside [0, 1], a negative or non-finite softcap or lse_square_scale, a
 *  non-finite grad_output, dbias without bias, a scratch that is not f32 at offset 0, a
 *  scratch_budget too small for one row, chunk_rows needing more than the device's largest
 *  allocation); NG_ERR_NULL_BUFFER (input, weight, target, loss absent; grad_output absent for
 *  reduction none); NG_ERR_UNSUPPORTED_DTYPE (a tensor outside the dtypes listed above);
 *  NG_ERR_DTYPE_MISMATCH (dinput not in input's dtype); the buffer errors of the norm ops for
 *  each tensor (the scratch included); NG_ERR_TARGET_OUT_OF_RANGE; the OpenCL code of the target
 *  read; the program errors of the norm ops; NG_ERR_GEMM_FAILED or an OpenCL code from CLBlast's
 *  planning queries (detail: the CLBlast status); the code of clCreateBuffer / clCreateSubBuffer
 *  for the op's scratch; NG_ERR_HOST_OUT_OF_MEMORY. While enqueueing: the kernel-launch codes of
 *  the norm ops and NG_ERR_GEMM_FAILED or an OpenCL code from a CLBlast GEMM. */
NG_API ng_status ng_flce(ng_context *ctx, cl_command_queue queue, const ng_flce_params *p,
                         const ng_flce_tensors *t, unsigned flags, ng_flce_info *info,
                         cl_uint num_events_in_wait_list, const cl_event *event_wait_list,
                         cl_event *event);

/** What ng_flce would do with these params: chunking, GEMM calls, bytes allocated (fills *info;
 *  enqueues nothing, does not block). Only the presence (mem non-NULL), dtype and offset of each
 *  tensor matter here: the buffers themselves are not inspected. Needs the queue (CLBlast's
 *  temporary sizes depend on the device). Errors: NG_ERR_NULL_HANDLE (info too), and those of
 *  ng_flce that need neither the buffers, the wait list, the targets nor a program. */
NG_API ng_status ng_flce_plan(ng_context *ctx, cl_command_queue queue, const ng_flce_params *p,
                              const ng_flce_tensors *t, unsigned flags, ng_flce_info *info);

/** Benchmarking aid: enqueue exactly the CLBlast calls ng_flce would make (same plan, same
 *  scratch size, same buffers), and nothing else, so the op's time can be set against its GEMMs'.
 *  The outputs it touches (dinput, dweight) hold meaningless values afterwards. Does not read the
 *  targets and does not block. Errors: those of ng_flce but NG_ERR_TARGET_OUT_OF_RANGE and the
 *  target read, plus the code of clEnqueueMarkerWithWaitList (which takes the wait list). */
NG_API ng_status ng_flce_gemms_only(ng_context *ctx, cl_command_queue queue,
                                    const ng_flce_params *p, const ng_flce_tensors *t,
                                    unsigned flags, ng_flce_info *info,
                                    cl_uint num_events_in_wait_list,
                                    const cl_event *event_wait_list, cl_event *event);

#ifdef __cplusplus
}
#endif
#endif /* NORMGRAD_H */
