/* Private declarations shared by the files of src/. Nothing here is part of the API. */
#ifndef NG_INTERNAL_H
#define NG_INTERNAL_H

#include "normgrad.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- status / detail (status.c) ------------------------------------------------------------ */
/* Record a printf-style detail for the calling thread and return `status`. */
ng_status ng_fail(ng_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void ng_clear_detail(void);

/* ---- device facts (context.c) -------------------------------------------------------------- */
typedef struct ng_device_info {
  cl_device_type type;
  cl_uint compute_units;
  size_t max_wg;
  cl_ulong local_mem;
  cl_uint base_align_bytes; /* CL_DEVICE_MEM_BASE_ADDR_ALIGN / 8 */
  cl_ulong max_alloc;
  char name[256];
  char vendor[128];
  char driver[128];
  char platform[256];
  bool nv_shfl; /* NVIDIA: PTX warp shuffles are available to OpenCL C through inline asm */
  bool nv_bf16; /* NVIDIA, compute capability >= 8.0: PTX cvt.rn.bf16x2.f32 (and f16 pairs) */
} ng_device_info;

/* ---- program cache (program_cache.c) ------------------------------------------------------- */
typedef struct ng_program_entry {
  char *key; /* source name + '\n' + options */
  cl_program program;
  struct ng_program_entry *next;
} ng_program_entry;

/* ---- on-disk program cache (disk_cache.c, docs/cache.md) ---------------------------------- */
typedef struct ng_disk_cache {
  char *dir;          /* folder of the entries; NULL = off */
  uint64_t max_bytes; /* size bound, 0 = none */
  char *device_key;   /* the device half of every entry's key, fixed for the context */
  uint64_t misses, stores, rejects, errors; /* hits are ng_context.disk_hits */
} ng_disk_cache;

#define NG_TUNE_SLOTS 7 /* ng_tune values index these (NG_TUNE_FUSED_REDUCE has its own field) */
typedef struct ng_tuned_entry {
  int kind;       /* index into tuning.c's kind table */
  unsigned log2n; /* row-length bucket */
  int dtype;      /* the x dtype it serves (ng_dtype), or -1: every dtype */
  unsigned lo, hi; /* rows of lo..hi elements alone (n=), before the bucket's; 0: the bucket */
  unsigned v[NG_TUNE_SLOTS];
} ng_tuned_entry;

/* A kernel object kept for reuse (clCreateKernel costs tens of microseconds on PoCL). Its
 * arguments are per-object state, so setting them and enqueueing happen under `lock`: the
 * values are captured at enqueue, after which another thread may reuse the object. */
typedef struct ng_kernel_slot {
  cl_program program;
  char name[64];
  cl_kernel kernel;
  pthread_mutex_t lock;
  struct ng_kernel_slot *next;
} ng_kernel_slot;

#define NG_SYNC_QUEUES 64 /* queues per context with in-kernel reductions; others launch the
                             separate reduction kernel */
struct ng_context {
  cl_context cl_ctx;
  cl_device_id device;
  ng_device_info info;
  unsigned tune[NG_TUNE_SLOTS]; /* indexed by ng_tune; NG_TUNE_AUTO = tuned table / default */
  ng_tuned_entry *tuned;        /* the tuned table of this device (tuning.txt), read at creation */
  size_t n_tuned;
  char xgemm[256]; /* stored CLBlast Xgemm parameters ("KWG=32 KWI=2 …"), applied at creation */
  pthread_mutex_t lock;
  ng_program_entry *programs;
  ng_kernel_slot *kernels; /* guarded by `lock`; released with the programs */
  struct ng_src_hash *src_hashes; /* per source name, hashed once (guarded by `lock`) */
  uint64_t programs_built, cache_hits, disk_hits;
  ng_disk_cache disk; /* settings and counters guarded by `lock` */
  unsigned fused_reduce; /* NG_TUNE_FUSED_REDUCE: 0 auto, 1 off, 2 on, 3 on but for the split
                           rows' partials (not in the tuned table) */
  /* In-kernel reductions' counters (cl/ng_common.clh): two uints per queue, zero between
   * launches, in one buffer made on first use. Each queue seen is retained so that its address
   * cannot name another queue while it is listed. Guarded by `lock`. */
  cl_mem sync_buf;
  cl_command_queue sync_queues[NG_SYNC_QUEUES];
  unsigned n_sync_queues;
  /* Per queue slot, a larger counter area (GroupNorm's one-pass kernels: one pair per block),
   * zero between launches, grown by replacement; sync_area_n counts its uints. */
  cl_mem sync_area[NG_SYNC_QUEUES];
  size_t sync_area_n[NG_SYNC_QUEUES];
};

/* Whether a kernel that waits on other work-groups (in-kernel reductions, split rows, GroupNorm's
 * one-pass and one-launch kernels) is wanted: as NG_TUNE_FUSED_REDUCE says where it is set (2 and
 * 3 on, 1 off), else by_default (each caller's measured default). */
static inline bool ng_reduce_on(const ng_context *ctx, bool by_default) {
  return ctx->fused_reduce ? ctx->fused_reduce >= 2 : by_default;
}

/* Build options: integer -D defines only, so no locale can change a build. */
typedef struct ng_opts {
  char text[512];
  size_t len;
  bool overflow;
} ng_opts;
void ng_opts_init(ng_opts *o);
void ng_opts_add(ng_opts *o, const char *name, long long value);

/* Return the program for source `name` built with `opts` (cached per context, thread-safe). */
ng_status ng_get_program(ng_context *ctx, const char *name, const ng_opts *opts,
                         cl_program *out);
void ng_program_cache_clear(ng_context *ctx);
/* The context's kernel object for (prog, name), created on first use. NULL with *err set. */
ng_kernel_slot *ng_kernel_get(ng_context *ctx, cl_program prog, const char *name, cl_int *err);

/* What identifies a program apart from the device: the disk cache's key is built from it. */
typedef struct ng_program_id {
  const char *name;    /* source name, "rmsnorm" */
  uint64_t src_hash;   /* FNV-1a 64 of the program's source parts */
  size_t src_len;      /* their total length */
  const char *options; /* build options */
} ng_program_id;
/* Settings from the environment (NORMGRAD_CACHE_DIR, NORMGRAD_CACHE_MAX_BYTES) and the device
 * half of the key. Never fails: anything missing leaves the disk cache off. */
void ng_disk_cache_init(ng_context *ctx);
/* A regular file this user owns and nobody else may write: the only kind normgrad reads from its
 * cache folder (program binaries, the tuned table). */
struct stat;
bool ng_file_private(const struct stat *st);
void ng_disk_cache_free(ng_context *ctx);
/* A program built from the cache entry for `id`, or NULL (no entry, an unusable entry, cache
 * off). Counts disk_hits/misses/rejects/errors. Never records an error detail. */
cl_program ng_disk_load(ng_context *ctx, const ng_program_id *id);
/* Write `prog`'s binary as the entry for `id` (atomically, replacing any older one), then evict
 * least-recently-used entries past the size bound. Failures are counted, never reported. */
void ng_disk_store(ng_context *ctx, const ng_program_id *id, cl_program prog);
/* The bytes of an entry file (header, key, payload) in entry format `format`; malloc'ed. Used by
 * the store and by tests that forge entries. */
unsigned char *ng_disk_encode(uint32_t format, const char *key, const void *payload, size_t len,
                              size_t *out_len);
#define NG_DISK_FORMAT 1u
/* Tests only: 1 = act as if clCreateProgramWithBinary rejected every entry, 2 = as if
 * clBuildProgram did, for loads made by the calling thread. PoCL crashes on a binary it cannot
 * parse, so a test cannot make the driver reject one for real. */
extern _Thread_local int ng_disk_test_fail_stage;

/* ---- variant enumeration for ng_prebuild (prebuild.c) -------------------------------------- */
/* Called once per (program, options) an op can use on the context's device. */
typedef ng_status (*ng_variant_fn)(ng_context *ctx, const char *program, const ng_opts *opts,
                                   void *user);

/* ---- kernel sources (generated ng_kernels.c, or read from the development directory) ------- */
/* Sources of program `name`: the shared header then the op's file. Returns NG_SUCCESS and
 * fills `parts` (2 strings, owned by the callee or malloc'ed into *owned to be freed). */
typedef struct ng_embedded {
  const char *name;
  const char *data;
  size_t len;
} ng_embedded;
extern const ng_embedded ng_embedded_sources[]; /* generated ng_kernels.c */
extern const size_t ng_embedded_count;

typedef struct ng_source {
  const char *parts[2];
  size_t lens[2];
  char *owned[2];
} ng_source;
ng_status ng_source_get(const char *name, ng_source *src);
void ng_source_free(ng_source *src);
uint64_t ng_fnv1a(uint64_t h, const void *data, size_t len);

/* ---- argument validation (validate.c) ------------------------------------------------------ */
/* Check that `t` (named `what` in the detail) exists, has a float storage dtype accepted by
 * `float_only`, and that elements [offset, offset + count) lie within its CL_MEM_SIZE and its
 * context. */
ng_status ng_check_tensor(ng_context *ctx, ng_tensor t, const char *what, size_t count,
                          bool float_only);
ng_status ng_check_queue(ng_context *ctx, cl_command_queue queue);
/* a*b with overflow detection. */
bool ng_mul_overflows(size_t a, size_t b, size_t *out);
bool ng_is_float_dtype(ng_dtype d);
/* rows ≥ 1, n ≥ 1, each ≤ 2^31 (the kernels' 32-bit counters never wrap), rows·n within
 * size_t (it may exceed 2^32). */
ng_status ng_check_rows(size_t rows, size_t n, size_t *count);
/* An event wait list as OpenCL defines it: NULL exactly when empty, no NULL entries (PoCL
 * crashes on a NULL list with a non-zero count instead of returning the error). */
ng_status ng_check_wait_list(cl_uint nwait, const cl_event *wait);
/* A float scalar that must be finite (and ≥ 0 when nonneg). */
ng_status ng_check_scalar(float v, const char *what, bool nonneg);
/* `b` must have the dtype of `a`. */
ng_status ng_check_same_dtype(ng_tensor a, const char *an, ng_tensor b, const char *bn);
/* true when offset and every row start keep `vec`-element accesses aligned for `t`. */
bool ng_vec_aligned(const ng_context *ctx, ng_tensor t, size_t row_len, unsigned vec);

/* ---- launching (launch.c) ------------------------------------------------------------------ */
/* Kernel arguments are given as a list of (size, pointer) pairs. */
typedef struct ng_arg {
  size_t size;
  const void *ptr;
} ng_arg;
#define NG_ARG(v) ((ng_arg){sizeof(v), &(v)})
#define NG_ARG_LOCAL(bytes) ((ng_arg){(bytes), NULL})

/* Enqueue kernel `kname` of `prog` over a 1-D range. */
ng_status ng_enqueue(ng_context *ctx, cl_command_queue q, cl_program prog, const char *kname,
                     size_t global, size_t local, const ng_arg *args, cl_uint nargs,
                     cl_uint nwait, const cl_event *wait, cl_event *event);

/* Record an event of an enqueued command for ng_profile_* when this thread is profiling
 * (retains it), with a static string naming it. Call with the event of every enqueue the
 * library makes outside ng_enqueue. */
void ng_profile_record(cl_event ev, const char *name);
/* Record a span that ends with `to` and starts when `from` ended (a small command enqueued just
 * before one that runs several kernels of its own, like a CLBlast GEMM, whose event is only that
 * of its last kernel). Counts as one entry. */
void ng_profile_record_span(cl_event from, cl_event to, const char *name);
bool ng_profile_active(void);

/* Scratch: use the caller's buffer when given, else allocate one (released by ng_scratch_done
 * after enqueueing; OpenCL keeps it alive until the kernels that use it finish). */
typedef struct ng_scratch {
  cl_mem mem;
  size_t offset_bytes;
  bool owned;
} ng_scratch;
ng_status ng_scratch_acquire(ng_context *ctx, ng_tensor caller, size_t bytes, ng_scratch *out);
/* The same for kernels that write their partial rows 8 floats at a time (RMSNorm's, the fused
 * add's and LayerNorm's backward): the caller's offset is rounded up to a multiple of
 * NG_SCRATCH_VEC elements, so that the scratch's offset never decides the kernels' vector width
 * (dx must be the same bits with dW and frozen, whose call has no scratch); their *_scratch_size
 * add NG_SCRATCH_VEC_PAD bytes of headroom for that. */
#define NG_SCRATCH_VEC 8u
#define NG_SCRATCH_VEC_PAD ((NG_SCRATCH_VEC - 1) * 4u)
ng_status ng_scratch_acquire_vec(ng_context *ctx, ng_tensor caller, size_t bytes, ng_scratch *out);
void ng_scratch_release(ng_scratch *s);

/* Launch shape for the row kernels. */
typedef struct ng_row_launch {
  unsigned wg;       /* work-items per group */
  unsigned groups;   /* persistent groups */
  unsigned grid;     /* the groups before the cap at the row count (a fact of the device and n) */
  unsigned vec;      /* 8 or 1 */
  unsigned reg_cols; /* vector slots per work-item held in registers */
  bool nv_shfl;      /* warp-shuffle reductions (NVIDIA, wg a multiple of 32) */
  bool prefetch;     /* prefetch each group's next row into L2 (NVIDIA PTX) */
  bool nv_bf16;      /* NG_NV_BF16: bf16 rounding, f16 pairs widened, by PTX (NVIDIA sm_80+) */
  unsigned cpu_pf;   /* CPU: how far ahead the row loops ask for the streams they read from
                        memory (NG_PF_MEM): 0 the kernels' NG_PF_FAR, NG_CPU_PF_OFF none, else
                        that many bytes (NG_TUNE_PREFETCH) */
  /* What the override, the tuned table or the built-in table asked of this launch (0: nothing,
   * the rules' choice), for the plans built on it (ng_coop_plan, the ops' prefetch rules), which
   * must not overrule an asked value with a rule of their own */
  unsigned asked_wg, asked_groups, asked_prefetch;
} ng_row_launch;
#define NG_CPU_PF_OFF 1u
#define NG_CPU_PF_DEFAULT 2048u /* cl/ng_common.clh's NG_PF_FAR (test_gpu_programs checks) */
/* NG_TUNE_PREFETCH's values: 1 off, 2 on, or on a CPU the distance in bytes, a power of two
 * from NG_PF_DIST_MIN to NG_PF_DIST_MAX (on a GPU any distance means on). */
#define NG_PF_DIST_MIN 64u
#define NG_PF_DIST_MAX 65536u
static inline bool ng_tune_prefetch_ok(unsigned v) {
  return v <= 2 || (v >= NG_PF_DIST_MIN && v <= NG_PF_DIST_MAX && (v & (v - 1)) == 0);
}
/* A GPU-shaped launch (wg > 1) whose rows of n elements are longer than a group holds in its
 * registers (wg·reg_cols vectors): such rows stream, or take a split or column kernel. */
bool ng_row_beyond_regs(const ng_row_launch *l, size_t n);
/* Backward with parameter partials on a GPU for rows longer than a work-group's registers: split
 * by columns (a row-sums kernel, then a column-block kernel whose partials stay in registers).
 * False when the launch holds rows in registers (or is the CPU shape); else the column blocks
 * and the row groups (each owns one row of partials per section). */
bool ng_col_split(const ng_context *ctx, const ng_row_launch *l, size_t rows, size_t n,
                  size_t *nblocks, size_t *rgroups);
/* Scratch bytes of a backward whose f32 parameter partials come in `sections` (dW, dB) of n
 * per partial row: l->groups rows per section, or with the column split rgroups rows per section
 * followed by `row_floats` row sums per row. NG_ERR_INDEX_OVERFLOW when that does not fit. */
ng_status ng_partials_scratch(const ng_context *ctx, const ng_row_launch *l, size_t rows, size_t n,
                              size_t sections, size_t row_floats, size_t *bytes);
/* A row launch's mode (ng_choose_row_launch_k): NG_ROWS_FWD, NG_ROWS_BWD_DW, … in the low bits
 * and any of the NG_ROWS_* flags (below, with the launch rules); 64 bits wide, as the flags
 * outgrew an int's 31. */
typedef uint64_t ng_rows_mode;
/* The largest scratch of the backward-with-dW launches of `kind` for any buffer alignment and x
 * dtype (a scratch-size query knows neither; both pick the launch): ng_partials_scratch, and
 * ng_coop_partials where the rows may be split across groups (`mode_flags`: the launch flags of
 * the op's calls with the most groups; `hold`, `xflags`: what calls of `kind` pass to
 * ng_coop_plan, the smallest hold where they differ). */
ng_status ng_partials_scratch_any(const ng_context *ctx, const char *kind, ng_rows_mode mode_flags,
                                  size_t rows, size_t n, size_t sections, size_t row_floats,
                                  size_t hold, unsigned xflags, size_t *bytes);
/* Rows beyond a launch's registers (bf16, and f32 / f16 where the op says), each split across
 * `slices` work-groups that exchange their shares of the row sum (cl/rmsnorm.cl, RMS_COOP): the
 * launch of its kernel (`l`, groups = slices · sets), and the rows of dW partials it leaves
 * (`sets`). */
typedef struct ng_coop {
  ng_row_launch l;
  unsigned slices, sets;
  bool ahead; /* each group publishes the next row's shares before it collects this row's */
  bool late; /* with ahead: the next row's shares formed late (NG_COOP_LATE; where, the kernel) */
  bool f16_pack;  /* f16 rows widened pair by pair (NG_COOP_F16_PACK) */
  bool bf16_pack; /* bf16 rows widened pair by pair (NG_COOP_BF16_PACK) */
  unsigned red_f; /* its reducers' rows in flight where the op sets them, else 0: NG_COOP_RED_F */
  bool whole; /* slices of the group's whole WG·REG vectors, the rest in the last (NG_COOP_WHOLE;
               * also where even shares are the same slices: they divide the row, or one holds it) */
} ng_coop;
/* The rows besides bf16 that an op's split kernel takes (ng_coop_plan's xflags), where each was
 * measured faster split (docs/tuning.md): */
#define NG_COOP_F32 1u      /* f32, half bf16's vectors a work-item (the same register bytes) */
#define NG_COOP_F32_FULL 2u /* f32, bf16's vectors a work-item (a forward holding x alone) */
#define NG_COOP_F16 4u      /* f16, bf16's vectors a work-item */
/* and the rows whose kernel publishes a row's shares ahead (ng_coop.ahead, NG_COOP_AHEAD in
 * cl/ng_common.clh), where that measured faster: it holds a second row's slice */
#define NG_COOP_AHEAD_BF16 8u
#define NG_COOP_AHEAD_F32 16u
/* and the f16 rows whose kernel widens its storage bits pair by pair (NG_F16_PACK in
 * cl/ng_common.clh, NVIDIA), where that measured faster */
#define NG_COOP_F16_PACK 32u
/* and the bf16 rows likewise (NG_BF16_PACK) */
#define NG_COOP_BF16_PACK 64u
/* and the f16 rows that publish each row's shares ahead (ng_coop.ahead) */
#define NG_COOP_AHEAD_F16 128u
/* and, of those published ahead, the 16-bit rows whose forward forms and publishes the next
 * row's shares after this row's collect, or after its stores where the kernel says so
 * (LayerNorm's) (ng_coop.late; NG_COOP_LATE in cl/ng_common.clh) */
#define NG_COOP_LATE16 256u
/* and the plans whose slices keep the group's whole WG·REG vectors, the rest in the last, rather
 * than an even share each (ng_coop.whole; NG_COOP_WHOLE in cl/ng_common.clh), where the even
 * shares measured slower */
#define NG_COOP_WHOLE 512u
/* The split kernel's build options of plan c (NG_COOP_AHEAD, NG_COOP_LATE, NG_F16_PACK,
 * NG_BF16_PACK, NG_COOP_WHOLE) */
void ng_coop_opts(ng_opts *o, const ng_coop *c);
/* Whether a backward of x_dtype rows whose row launch is `l` takes the split-row kernel, and its
 * plan: bf16 vector rows (and those xflags adds) longer than l holds (or than `hold` vectors,
 * where an op measured the split faster from there; 0: what l holds), on NVIDIA by default
 * (NG_TUNE_FUSED_REDUCE 1 / 2 turns it off / on), with at most ng_max_waiting_groups slices.
 * Depends on the device, n, the dtype and the alignment only (frozen and not, dx must be the
 * same bits), and on `rows` only through the set count. */
bool ng_coop_plan(const ng_context *ctx, const ng_row_launch *l, ng_dtype x_dtype, size_t rows,
                  size_t n, size_t hold, unsigned xflags, ng_coop *c);
/* ng_coop_plan for a kernel of `reg` vectors a work-item in a bf16 slice (ng_coop_plan's:
 * NG_COOP_REG; xflags say what f32 and f16 slices take) that keeps `lslots` float vectors per
 * such vector in local memory (1) and runs `per_cu` groups per compute unit (2) */
bool ng_coop_plan_shape(const ng_context *ctx, const ng_row_launch *l, ng_dtype x_dtype,
                        size_t rows, size_t n, size_t hold, unsigned xflags, unsigned reg,
                        unsigned lslots, unsigned per_cu, ng_coop *c);
/* The counter area of queue q for plan c's kernel: *sync is retained for the caller (who releases
 * it after the enqueue), or NULL when q gets no counter area. Errors only from making the area. */
ng_status ng_coop_sync(ng_context *ctx, cl_command_queue q, const ng_coop *c, cl_mem *sync);
/* Bytes of the split kernel's partials: per section (dW, dB) one row of n floats per set. */
ng_status ng_coop_partials(const ng_coop *c, size_t n, size_t sections, size_t *bytes);
/* A launch's device-specific options: NVIDIA's (NG_NV_SHFL, NG_NV_BF16, PREFETCH), and on a CPU
 * NG_PF_FAR=0 where the far prefetch is turned off. */
void ng_launch_opts(ng_opts *o, const ng_row_launch *l);

/* ---- in-kernel final reduction of parameter partials (FUSED_RED, cl/ng_common.clh) --------- */
typedef struct ng_fused {
  bool on;            /* FUSED_RED=1: no separate ng_reduce_partials launch */
  cl_mem sync;        /* the queue's two counters (NULL when off) */
  cl_ulong sync_off;  /* in uints */
  cl_mem dw, db;      /* the gradients (NULL when absent) and their element offsets */
  cl_ulong dw_off, db_off;
  cl_int acc;         /* add to them (NG_ACCUMULATE_GRAD) */
  cl_uint cw;         /* columns per reducer block (a power of two <= wg) */
  cl_uint reducers;   /* groups that sum the partials: the last to finish */
} ng_fused;
/* The kernel arguments NG_FUSED_ARGS (cl/ng_common.clh) of a plan, set on or off. */
#define NG_FUSED_KARGS(f)                                                                          \
  NG_ARG((f).sync), NG_ARG((f).sync_off), NG_ARG((f).dw), NG_ARG((f).dw_off), NG_ARG((f).db),     \
      NG_ARG((f).db_off), NG_ARG((f).acc), NG_ARG((f).cw), NG_ARG((f).reducers)
/* An op's default for its in-kernel reduction on NVIDIA: the shape rule of ng_fused_wanted, or
 * always, or never (where the op measured otherwise). NG_TUNE_FUSED_REDUCE overrides each. */
typedef enum { NG_FUSED_BY_SHAPE, NG_FUSED_ALWAYS, NG_FUSED_NEVER } ng_fused_rule;
/* Whether a GPU-shaped launch `l` whose groups each leave `sections` rows of `ncols` partials
 * reduces in-kernel: NG_TUNE_FUSED_REDUCE when set, else on NVIDIA as `rule` says, by shape
 * where each reducer thread's chain of partial rows is short (measured there). Build options
 * depend on it, so the variant lists call it too. */
bool ng_fused_wanted(const ng_context *ctx, const ng_row_launch *l, size_t ncols,
                     size_t sections, ng_fused_rule rule);
/* The plan of a launch whose groups each leave `sections` rows of `ncols` partials, into the
 * gradients dw and db (either may be absent): off when not wanted (sections 0 included) or when
 * `q` gets no counters (more than NG_SYNC_QUEUES queues); its kernel arguments are set either
 * way. Errors only from making the counter buffer. */
ng_status ng_fused_plan(ng_context *ctx, cl_command_queue q, const ng_row_launch *l, size_t ncols,
                        size_t sections, ng_fused_rule rule, ng_tensor dw, ng_tensor db, bool acc,
                        ng_fused *out);
/* A plan for a kernel that shapes its in-kernel reduction itself (GroupNorm's held backward): the
 * queue's counters, `reducers` groups (ng_fused_arrive's last arrivers), cw 0. Off when reducers
 * is 0 or `q` gets no counters (more than NG_SYNC_QUEUES queues). */
ng_status ng_fused_plan_own(ng_context *ctx, cl_command_queue q, size_t reducers, ng_tensor dw,
                            ng_tensor db, bool acc, ng_fused *out);
void ng_fused_release(ng_context *ctx);
/* NG_RED_F of a held-row launch's program with FUSED_RED: its reducers' rows in flight. */
unsigned ng_fused_rows_in_flight(const ng_context *ctx, const ng_row_launch *l);
/* Whether split plan c's kernel sums its partials (`sections` rows of ncols per set) itself
 * (FUSED_RED in its program, ng_coop_reduce): NG_TUNE_FUSED_REDUCE when set, else on NVIDIA
 * for an op where it measured faster (by_default). Build options depend on it, so the variant
 * lists call it too. */
bool ng_coop_fused_wanted(const ng_context *ctx, const ng_coop *c, size_t ncols,
                          size_t sections, bool by_default);
/* The plan of that reduction (off when not wanted), over c's sets: as ng_fused_plan's, but the
 * kernel counts in its own area, so `sync` stays NULL and nothing can fail. */
void ng_coop_fused_plan(const ng_context *ctx, const ng_coop *c, size_t ncols, size_t sections,
                        bool by_default, ng_tensor dw, ng_tensor db, bool acc, ng_fused *out);
/* Rows in flight per thread of those reducers (NG_RED_F in their programs): they are the last
 * groups of the grid, at most half the compute units, so each needs more loads in flight than
 * the held rows' reducers (8) */
#define NG_COOP_RED_F 16
static inline unsigned ng_coop_red_f(const ng_coop *c) {
  return c->red_f ? c->red_f : NG_COOP_RED_F;
}
/* The kernel arguments NG_COOP_RED_ARGS (cl/ng_common.clh) of such a plan, set on or off. */
#define NG_COOP_RED_KARGS(f)                                                                       \
  NG_ARG((f).dw), NG_ARG((f).dw_off), NG_ARG((f).db), NG_ARG((f).db_off), NG_ARG((f).acc),       \
      NG_ARG((f).cw), NG_ARG((f).reducers)
/* How many work-groups of one launch may wait for others of it at once: half the compute units
 * (so the groups they wait for have room to run), one on a CPU, where PoCL runs work-groups on
 * as many threads as cores. */
size_t ng_max_waiting_groups(const ng_context *ctx);
/* The largest power-of-two work-group the device takes, at most 1024. */
size_t ng_max_pow2_wg(const ng_context *ctx);
/* The largest power of two not above v (v >= 1): ng_max_pow2_wg's, and the group that GroupNorm's
 * and FLCE's power-of-two sums run an asked size on (NG_ROWS_POW2_WG). */
static inline size_t ng_pow2_floor(size_t v) {
  while (v & (v - 1)) v &= v - 1;
  return v;
}
/* Whether an override, a tuning.txt line or a table entry may ask for work-groups of wg: a power
 * of two or a multiple of 32 (a warp: a row of 1536 vectors held exactly by 768 × 2), at most
 * the device's limit and 4096 (the kernels' sums fold a group into its largest power of two). */
bool ng_wg_asked_ok(const ng_context *ctx, unsigned wg);
/* A counter area of at least n uints that belongs to queue q alone and is zero when a launch
 * starts (the kernels that use it leave it zero), made from host zeros (no enqueue). *mem is
 * retained for the caller, who releases it after the enqueue, or NULL when q gets no slot
 * (more than NG_SYNC_QUEUES queues). Errors only from making the buffer. */
ng_status ng_sync_area(ng_context *ctx, cl_command_queue q, size_t n, cl_mem *mem);
/* Options every row program shares: DTYPE, W_DTYPE, HAS_W, VEC, WG, REG (+ NG_NV_SHFL). */
void ng_row_opts(ng_opts *o, const ng_row_launch *l, ng_dtype x_dtype, ng_tensor weight);
/* The same from dtypes alone (variant enumeration has no tensors): has_w false = no weight. */
void ng_row_opts_dt(ng_opts *o, const ng_row_launch *l, ng_dtype x_dtype, bool has_w,
                    ng_dtype w_dtype);
/* NORMGRAD_TUNE / a "name=value,…" string applied with ng_context_override (tuning.c). */
ng_status ng_tune_apply_string(ng_context *ctx, const char *spec, const char *origin);
ng_status ng_tune_from_env(ng_context *ctx);
void ng_tuning_load(ng_context *ctx);
void ng_tuning_device_id(const ng_context *ctx, char out[17]);
ng_status ng_tuning_write_line(ng_context *ctx, const char *key, const char *line);
/* Apply "NAME=VALUE …" as CLBlast's single-precision Xgemm parameters for the context's device
 * (process-wide in CLBlast). Returns false when CLBlast refused them (gemm.c). */
bool ng_gemm_apply_xgemm(const ng_context *ctx, const char *params);
/* An entry of the built-in table (src/tuning.c): values for a kind on one device model, for
 * row lengths lo..hi; the whole table, for the tests. */
typedef struct ng_builtin_tune {
  const char *device;     /* CL_DEVICE_NAME, exactly */
  unsigned compute_units; /* and this many (a MIG slice of the device reports fewer) */
  const char *kind;
  unsigned dtypes; /* the x dtypes it serves: NG_DTYPE_BIT(NG_BF16) | … */
  size_t lo, hi;
  unsigned v[NG_TUNE_SLOTS];
} ng_builtin_tune;
#define NG_DTYPE_BIT(d) (1u << (unsigned)(d))
const ng_builtin_tune *ng_tuning_builtin(size_t *count);
/* The tuned values for `kind` ("rmsnorm.bwd", …) at row length n with x of dtype xd, from
 * tuning.txt (xd's line, else the bucket's line for every dtype) or else the built-in table;
 * false when neither has any. */
bool ng_tuned_lookup(const ng_context *ctx, const char *kind, ng_dtype xd, size_t n,
                     unsigned v[NG_TUNE_SLOTS]);
/* ng_choose_row_launch for a kernel kind that may have tuned values, for x of dtype xd. */
ng_row_launch ng_choose_row_launch_k(const ng_context *ctx, const char *kind, ng_dtype xd,
                                     size_t rows, size_t n, bool vec_ok, ng_rows_mode mode);
/* `mode`: NG_ROWS_FWD (no partials), NG_ROWS_BWD_DW (dW/dB partials in a persistent grid), or
 * NG_ROWS_BWD_FROZEN (no partials, but the same work-group shape as NG_ROWS_BWD_DW so that dx
 * is the same bits frozen or not). `true`/`false` mean BWD_DW/FWD. NG_ROWS_FWD_RAW16: a forward
 * whose kernel holds rows of a 16-bit dtype in registers in their storage bits (NG_RAWV), which
 * leaves room for NG_FWD_RAW_REG slots per work-item. LayerNorm's forward takes it (its
 * streaming path reads a row three times); on the H100 it measured 0.65 -> 0.73 of copy at
 * 32768 (bf16), while RMSNorm's (which reads a row twice) lost 0.01-0.06 there, and 8 slots (65536)
 * lost 0.2 for both: a 1024-wide group of that many registers runs alone on its compute unit. */
#define NG_ROWS_FWD 0
#define NG_ROWS_BWD_DW 1
#define NG_ROWS_BWD_FROZEN 2
#define NG_ROWS_FWD_RAW16 3
#define NG_FWD_RAW_REG 4
/* PolyNorm's backward: the forward's shape (its rows of up to two vectors per work-item held
 * in registers), except that rows of 1024 vectors get 256 work-items (streamed) instead of 512
 * (held), which measured faster on the H100 at N = 8192: bf16 with dW 0.62 -> 0.68, frozen
 * 0.65 -> 0.73; f16 0.75, f32 0.85 with dW. (Its forward keeps 512: f16 0.87 there, 0.76 with
 * 256.) */
#define NG_ROWS_POLY_BWD 4
static inline ng_rows_mode ng_fwd_raw_mode(ng_dtype x_dtype) {
  return x_dtype == NG_F32 ? NG_ROWS_FWD : NG_ROWS_FWD_RAW16;
}
/* Added to NG_ROWS_BWD_DW / NG_ROWS_BWD_FROZEN for rows of a 16-bit dtype: rows of 257-512
 * vectors then get 256 work-items holding two vectors each instead of 512 holding one (H100,
 * N = 4096, bf16: frozen RMSNorm 79.5 -> 75.5 us, fused add 111 -> 99, with dW fused add
 * 113 -> 105, LayerNorm 91 -> 85, RMSNorm 80.5 -> 84.4; f32 rows lost 7-13% with dW, so they keep
 * 512 × 1). ng_bwd_mode picks it. */
#define NG_ROWS_X16 0x100
/* Added to NG_ROWS_BWD_DW: on NVIDIA, the grid holds three quarters of the groups per compute unit
 * (rounded up) that the dW rule gives: 6 instead of 8 of 128 work-items, 3 instead of 4 of 256, 2
 * of 256 × 2 unchanged. The fused add's backward with ds_out takes it (a row moves five streams,
 * against RMSNorm's three; RMSNorm, LayerNorm and PolyNorm were even or slower with fewer groups).
 * H100, whole backward with dW, rows·N = 2^25, old and new binaries alternating, two runs: bf16 at
 * 1024 104.9-105.0 -> 101.3-101.4 us (0.87 -> 0.90), at 2048 104.6-104.7 -> 101.1-101.3 (0.87 ->
 * 0.90); f16 104.1-104.4 -> 101.0-101.9 and 105.1-105.3 -> 101.9-102.4; f32 220.8-221.6 ->
 * 211.8-212.0 and 219.9-220.3 -> 212.4-212.8; bf16 at 512 (16 -> 12 groups a unit) 103.4-104.4 ->
 * 103.2-103.3. The grid is not a build option on this path (the held rows' sums go to a separate
 * launch unless forced in-kernel, whose rows in flight change only at two groups per unit), so the
 * variant lists need not pass it; the scratch queries, which do not know whether ds_out comes, size
 * the partials for the larger grid. */
#define NG_ROWS_FEW 0x200
/* Added to NG_ROWS_BWD_FROZEN: on NVIDIA, 16-bit rows held four vectors a work-item (bf16 N =
 * 16384: 512 × 4, one such group a compute unit) get one group a unit, each prefetching its next
 * row, instead of the forward's grid of four a unit, which runs as four waves. RMSNorm's frozen
 * backward takes it (so the fused add's without ds_out, the same kernel). H100, bf16, weight
 * frozen, old and new binaries alternating, two runs: 79.8-80.1 -> 76.6-77.0 us (0.85 -> 0.89), f16
 * 80.7 -> 76.6-77.0, 1000 rows 46.4-46.7 -> 43.6-44.4; two groups a unit 77.6-78.6. LayerNorm with
 * both parameters frozen lost with it (77.8-78.0 -> 81.7-82.3), 512 × 2 rows (8192) were even with
 * two groups a unit (74.0-74.2 -> 74.5-74.6), and f32 rows of 512 × 4 lost with one (176.0-176.4 ->
 * 183.5-185.7), so they keep the forward's grid. The grid is not a build option of a frozen
 * backward. */
#define NG_ROWS_ONE 0x400
/* Added to NG_ROWS_FWD by PolyNorm's forward, which takes a persistent grid (as rows = SIZE_MAX
 * asks) except, on NVIDIA, for 16-bit rows (with NG_ROWS_X16) of at most 512 vectors: two rows a
 * group, the group prefetching its second, and at least the persistent grid's groups. RMSNorm's
 * forward of 16-bit rows takes it from N = 4096 (a group a row before). H100, bf16, rows·N =
 * 2^25, old and new binaries alternating, two runs: see ng_choose_row_launch_k. */
#define NG_ROWS_PAIRS 0x800
/* NG_ROWS_PAIRS up to rows of 1024 vectors (bf16 N = 8192): RMSNorm's forward of bf16 rows. */
#define NG_ROWS_PAIRS_1K 0x2000
/* Added to NG_ROWS_BWD_FROZEN: on NVIDIA, 16-bit rows of 513-1024 vectors (bf16 N = 8192, 512 × 2)
 * get a grid of 16 groups a compute unit, prefetching, instead of the forward's four. The fused
 * add's frozen backward with ds_out and LayerNorm's with both parameters frozen take it. */
#define NG_ROWS_MANY 0x1000
/* With NG_ROWS_MANY, LayerNorm's: its grid also for rows of 1025-2048 vectors (bf16 N = 16384,
 * 512 × 4), without the prefetch there. H100, both parameters frozen, rows·N = 2^25, the grid
 * under NORMGRAD_TUNE beside the default, two runs: bf16 78.4-78.9 -> 75.2-75.8 us (0.87 ->
 * 0.91), f16 81.2-81.5 -> 75.8-76.8 (0.85 -> 0.90-0.91); with the prefetch 76.9, 8 groups a
 * unit 75.6-77.0. And for its rows of 513-1024 vectors (N = 4104-8192) a group a row instead of
 * 16 a compute unit, which the tuner found at 8192 (1.04x). The binary before and this one
 * alternating, two runs: 8192 75.9-76.4 -> 74.0-74.3 us (0.90-0.91 -> 0.92-0.93), 8192 rows of
 * 8192 145.9-146.8 -> 138.0-138.4 (0.94 -> 0.99), 7168 76.2-76.4 -> 74.3-74.5, 6144 77.1-77.9 ->
 * 75.4-76.1, f16 8192 76.4-76.5 -> 75.0-77.5, 1000 rows even (up to 2112 rows the grids are the
 * same); under NORMGRAD_TUNE, three runs, 5632 77.7-78.3 -> 76.3-77.4. */
#define NG_ROWS_MANY_2K 0x20000
/* Added to NG_ROWS_POLY_BWD (with NG_ROWS_X16) by PolyNorm's backward with dweight: on NVIDIA,
 * rows of 128-512 vectors (bf16 N = 1024-4096) prefetch the group's next row. NG_ROWS_POLY_DB,
 * its backward with dbias alone: rows of 128-256 vectors do (N = 4096 sums its partials in a
 * separate launch, and lost with the prefetch). */
#define NG_ROWS_POLY_DW 0x4000
#define NG_ROWS_POLY_DB 0x8000
/* Added to NG_ROWS_BWD_DW and NG_ROWS_BWD_FROZEN alike (the shape fixes dx's bits) by the fused
 * add's backward with ds_out: on NVIDIA, 16-bit rows of 513-1024 vectors (bf16 N = 4104-8192)
 * get 1024 work-items holding one vector each, one group a compute unit, each prefetching its
 * next row, instead of 512 × 2 on NG_ROWS_FEW's or NG_ROWS_MANY's grid. H100, rows·N = 2^25,
 * two or three runs each, 1024 × 1 under NORMGRAD_TUNE in the binaries of 024b528: bf16 8192
 * with dW 113.8-115.6 -> 104.3-106.3 us (0.79-0.81 -> 0.87-0.88), weight frozen 102.9-104.3 ->
 * 95.7-96.4 (0.89 -> 0.95-0.97); 7680 108.5-110.1 -> 103.7-104.5, frozen 100.4-100.8 ->
 * 96.8-97.2; 6144 105.8-106.6 -> 102.6-102.9, frozen 103.4-104.5 -> 95.8-96.2; 8192 rows × 8192
 * 214.7-217.1 -> 191.3-192.1 (0.85 -> 0.96); f16 8192 117.4-118.5 -> 107.7-108.5, frozen
 * 103.8-114.2 -> 96.0-96.5. */
#define NG_ROWS_1K 0x10000
/* Added to NG_ROWS_FWD by RMSNorm's forward of 16-bit rows: on NVIDIA, rows of 2049-4096 vectors
 * (bf16 N = 16392-32768) held by 1024 work-items of four vectors each, a group a row (16 groups a
 * compute unit at most) without the prefetch, instead of split across two groups
 * (ng_rmsnorm_fwd_coop). H100, rows·N = 2^25, under NORMGRAD_TUNE beside the default, two runs:
 * bf16 56.0-56.2 -> 54.2-54.7 us (0.81-0.82 -> 0.84-0.85), f16 56.7-57.7 -> 55.7; 8 groups a
 * unit 54.7-55.2, with the prefetch 54.0-55.2. The tuner found it. RMSNorm's f16 rows take it;
 * its bf16 rows NG_ROWS_HOLD4_FEW. */
#define NG_ROWS_HOLD4 0x40000
/* NG_ROWS_HOLD4 in calls of at most a row a compute unit alone: RMSNorm's bf16 rows split in
 * longer calls since the split forward forms the next row's sum after this row's collect
 * (NG_COOP_LATE). H200, bf16, rows·N = 2^25, held beside split (NORMGRAD_TUNE=reg=2), two runs:
 * 16392 56.9-57.0 -> 50.6-51.7 us (0.58 -> 0.63-0.64), 18432 54.7-55.3 -> 46.7-47.5 (0.60 ->
 * 0.69), 20480 52.2 -> 46.1, 24576 48.6-49.4 -> 44.0-44.7 (0.67 -> 0.73-0.74), 28672 48.3-48.4 ->
 * 45.6-45.7, 32768 46.1-46.9 -> 44.3-44.9 (0.70-0.71 -> 0.73-0.74), 4096 rows of 32768
 * 150.9-151.7 -> 146.2; 100 rows of 32768 11.5-13.1 -> 14.6-14.7, hence the rows condition. */
#define NG_ROWS_HOLD4_FEW ((ng_rows_mode)1 << 35)
/* From ng_choose_row_launch, for GroupNorm's and FLCE's kernels, which sum in trees of a power of
 * two: a work-group size asked by an override, tuning.txt or the table that is a multiple of 32
 * but not a power of two (which the row ops' sums take: ng_wg_asked_ok) becomes the power of two
 * below it. */
#define NG_ROWS_POW2_WG ((ng_rows_mode)1 << 36)
/* Added to the forward's mode (NG_ROWS_FWD, NG_ROWS_FWD_RAW16) of 16-bit rows by RMSNorm, the
 * fused add and LayerNorm: on NVIDIA, rows of 513-1024 vectors (N = 4104-8192) held by 256 work-
 * items of four vectors each, a group a row without the prefetch, where there are more rows than
 * compute units, instead of 512 × 2 on the persistent grid with the prefetch (RMSNorm's bf16 rows:
 * two rows a group, NG_ROWS_PAIRS_1K). f16 rows ran far below bf16 ones there, and bf16 rows short
 * of 8192 below bf16 rows of 8192. H100, rows·N = 2^25, under NORMGRAD_TUNE beside the default,
 * two runs (us): LayerNorm f16 4608 68.8-69.4 -> 57.1-57.3, 6144 61.6-62.6 -> 53.8-54.3, 7168
 * 65.6-66.0 -> 53.8-54.0 (0.69 -> 0.85); bf16 4608 61.3-61.6 -> 56.9-57.1, 5120 60.3-60.7 ->
 * 54.5-55.3 (0.76 -> 0.83-0.84), 6144 57.1-57.4 -> 53.7-54.1, 8192 54.5-56.6 -> 53.6-55.3; RMSNorm
 * f16 4608 68.8 -> 53.4-53.9 (0.67 -> 0.86), 6144 62.8-63.5 -> 52.5-54.0; bf16 4608 58.2-58.9 ->
 * 53.2-53.6, 6144 54.6-55.4 -> 52.4-52.9, 7168 and 8192 even; the fused add bf16 4608 112.9-113.8
 * -> 99.9-100.4 (0.81 -> 0.91-0.92), 6144 105.0-105.3 -> 99.5-99.8, 8192 100.8-102.7 -> 98.1-98.5
 * (0.90-0.91 -> 0.93), f16 likewise. The same grid on 512 × 2 lost (LayerNorm bf16 6144 70 us), so
 * the shape counts too. 100 rows lost 0.6-1.5 us (LayerNorm bf16 6144 8.5 -> 9.7, the fused add
 * 9.4 -> 10.9), 400 rows gained (12.7 -> 12.0, 17.4 -> 14.9): up to a row a compute unit, the rows
 * keep the old launch. The tuner found it for f16 rows of 8192 (LayerNorm 1.20x, RMSNorm 1.15x).
 * docs/tuning.md has the rest. */
#define NG_ROWS_256X4 0x80000
/* Added to NG_ROWS_BWD_DW and NG_ROWS_BWD_FROZEN alike (the shape fixes dx's bits) by RMSNorm's
 * backward and the fused add's without ds_out (the same kernel): on NVIDIA, 16-bit rows of
 * 513-NG_FIT2_MAX vectors (N = 4104-6144) held two vectors a work-item by a group as wide as half
 * the row rounded up to a warp (288 work-items at N = 4608, 384 at 6144: not a power of two,
 * which only NVIDIA's warp-shuffle sums take), two groups a compute unit with dW, instead of
 * 512 × 2 on one: the row fills the slots, and two such groups fit in the registers. Their dW
 * partials are summed by the separate launch (rms_fuse_rule). H100, rows·N = 2^25, backward with
 * dW, the binary before and this one alternating, two runs: bf16 4608 98.1-99.9 -> 81.3-81.5 us
 * (0.70 -> 0.84-0.85), 5120 93.5-94.9 -> 81.2-84.7, 5632 91.4-91.7 -> 80.2-81.9 (0.75 ->
 * 0.84-0.86), 6144 88.9-89.1 -> 82.2-82.5 (0.77 -> 0.83-0.84); f16 5120 94.6-94.7 -> 81.3-82.6;
 * weight frozen even (5120: 77.2 -> 74.9-75.4). Rows of
 * 832 vectors and more lost (6656 88.0 -> 95.5-96.6, 7168 86.0 -> 94.1-94.4, 8192 85.7-87.3 ->
 * 91.0-92.2): two groups of 416 work-items or more no longer fit the registers. */
#define NG_ROWS_FIT2 0x100000
#define NG_FIT2_MAX 768
/* The same for LayerNorm's backward, up to NG_FIT2_640_MAX vectors (N = 4104-5120), in calls of
 * more than NG_FIT2_640_MIN_ROWS_PER_CU rows a compute unit: its dW and dB sums leave room for
 * two groups of fewer. Its partials are summed where its rule says (in the kernel at these
 * shapes). H100, bf16, rows·N = 2^25, the binary before and this one alternating, two runs: with
 * dW and dB 4160 103.9-106.2 -> 87.3-87.6 us (0.66 -> 0.79), 4608 97.3-98.2 -> 89.1 (0.70 ->
 * 0.77), 5120 94.4-95.2 -> 87.6 (0.73 -> 0.79), f16 5120 104.8-105.3 -> 87.6-88.5 (0.66 ->
 * 0.78-0.79); dB alone 4160 99.4-100.7 -> 81.0-81.8 (0.68 -> 0.84), 4608 94.4-95.6 -> 82.3-83.0,
 * 5120 92.6-92.7 -> 85.1-86.3; both frozen 4608 79.7-81.0 -> 76.3-77.0. Rows of 704 vectors lost
 * (5632: 92.3-93.2 -> 100.9-101.2 under NORMGRAD_TUNE), and so did 1100 rows of 4608 (30.2-30.9
 * -> 34.2-34.8 us; 2112 rows even, 300 rows even). */
#define NG_ROWS_FIT2_640 0x200000
#define NG_FIT2_640_MAX 640
#define NG_FIT2_640_MIN_ROWS_PER_CU 16
/* ... in calls of more rows than this many per compute unit: the two groups' partial rows and
 * their separate sum cost calls of a few rows more than they gain (H100, bf16, rows of 4608 and
 * 6144 with dW, two runs: 132-528 rows 14.1-22.7 -> 16.5-25.1 us, 1056 rows 26.8-30.4 ->
 * 26.0-31.6, 2112 rows 41.0-44.4 -> 35.3-43.7). */
#define NG_FIT2_MIN_ROWS_PER_CU 8
/* With NG_ROWS_MANY, the fused add's (its frozen backward with ds_out): rows of 257-512 vectors
 * (bf16 N = 2056-4096, 256 × 2) on a grid of 8 groups a compute unit without the prefetch instead
 * of a group a row. The tuner found it. H100, weight frozen, rows·N = 2^25, the binary before and
 * this one alternating, two runs: bf16 4096 99.9-100.6 -> 97.4 us (0.91-0.92 -> 0.94), 3584
 * 102.1-102.4 -> 98.6-99.1 (0.90 -> 0.93), 3072 104.3-105.1 -> 101.8-102.5 (0.87 -> 0.90), 2560
 * 108.0-109.5 -> 106.9-107.2; f16 4096 99.7-99.9 -> 96.8-97.2; 2000 rows of 4096 35.8-36.8 ->
 * 34.1-34.9, 1100 and 4000 rows even or faster. Under NORMGRAD_TUNE 4 groups a unit took 99.0,
 * 8 with the prefetch 105-106; RMSNorm's and PolyNorm's frozen backward were even with it. The
 * grid is not a build option of a frozen backward. */
#define NG_ROWS_MANY_512 0x400000
/* Added to NG_ROWS_FWD by the fused add's forward: on NVIDIA, rows of NG_W256_MIN + 1 to 256
 * vectors (N = 1800-2048) held by 256 work-items of one vector each, a group a row, instead of
 * 128 × 2. The tuner found it. H100, rows·N = 2^25, the binary before and this one alternating,
 * two runs: bf16 2048 96.8-96.9 -> 95.6 us (0.95 -> 0.96), 1920 97.1-98.1 -> 95.9 (0.95 ->
 * 0.96), 1800 97.4-98.5 -> 96.4-98.5; f16 2048 97.5-97.6 -> 96.5-97.5; 100 rows of 2048 8.5 ->
 * 7.6-8.1, 1000 rows even. 1536 (192 vectors, a quarter of the work-items idle) lost, 96.2-96.5
 * -> 98.1-98.4, hence the lower bound (1792 is even either way). RMSNorm's, LayerNorm's and
 * PolyNorm's forward lost 3-12 us with it at 2048. */
#define NG_ROWS_W256 0x800000
#define NG_W256_MIN 224
/* Added to NG_ROWS_BWD_DW by RMSNorm's backward of bf16 rows (and the fused add's without ds_out,
 * the same kernel): on NVIDIA, 16-bit rows of 1025-2048 vectors (N = 8200-16384), held by 512 × 4,
 * one group a compute unit, without the next-row prefetch. The confirming tuner found it (1.03x
 * at 16384). H100, with dW, rows·N = 2^25, under NORMGRAD_TUNE beside the default, three runs:
 * bf16 16384 89.6-90.0 -> 87.7-88.2 us (0.76 -> 0.78), 12288 88.3-89.7 -> 87.9-88.4; then the
 * binary before and this one, two runs: 16384 90.1-90.8 -> 88.1-89.1, 12288 even. f16 rows lost
 * 1 us in that binary (91.6-91.8 -> 92.4-92.9; even under NORMGRAD_TUNE), so the op passes the
 * flag for bf16 rows only. */
#define NG_ROWS_DW_NOPF 0x1000000
/* Added to NG_ROWS_FWD by the fused add's forward: on NVIDIA, rows of 1025-2048 vectors (N =
 * 8200-16384) held by 512 work-items of four vectors each, a group a row without the prefetch,
 * instead of 1024 × 2 on the persistent grid with it. The confirming tuner found it (1.03x at
 * 16384). H100, rows·N = 2^25, the binary before and this one alternating, two runs: bf16 16384
 * 103.0-104.2 -> 100.1-100.3 us (0.88-0.89 -> 0.91-0.92), 12288 102.8-103.0 -> 99.9-100.1, f16
 * 16384 103.1-103.9 -> 100.5-101.0. Under NORMGRAD_TUNE, three runs: 16384 102.7-103.4 ->
 * 100.4-101.0, 12288 103.5-104.1 -> 99.8-100.0. Calls of at most a row a compute unit keep the
 * old launch, as NG_ROWS_256X4's do: 100 rows of 16384 took 12.9-13.3 us on 512 × 4 against
 * 11.3-11.6 (200 rows 15.8-16.7 against 18.0-18.4, 400 27.9 against 26.1-26.9). */
#define NG_ROWS_512X4 0x2000000
/* Added to NG_ROWS_BWD_FROZEN by LayerNorm's backward (both parameters frozen): on NVIDIA, 16-bit
 * rows that fill their group exactly (128 or 256 vectors: bf16 N = 1024, 2048) a group a row, the
 * prefetch compiled in with nothing left to ask for, instead of four rows a group, in calls of more
 * than four rows for each group of the wave that rule keeps. The confirming tuner found it at 1024
 * (1.02x). H100, rows·N = 2^25, under NORMGRAD_TUNE beside the default, three runs: bf16 1024
 * 72.9 -> 71.4-71.9 us (0.94 -> 0.97), 2048 74.0-74.5 -> 72.2-72.6 (0.92-0.93 -> 0.95), f16 1024
 * 73.3-74.1 -> 73.1-73.5; 1536 (192 vectors in groups of 256) lost, 72.9-73.4 -> 76.4-77.5, and
 * 3000 rows of 1024 were even, 13.4-14.2 -> 13.8-14.3, hence the two conditions. The binary
 * before and this one alternating, two runs: bf16 1024 73.4-73.7 -> 70.9-72.1 (0.96-0.97), 2048
 * 73.5-74.2 -> 71.1-71.3 (0.96), 9000 rows of 1024 27.8-28.7 -> 26.5-26.9, f16 1024 even. */
#define NG_ROWS_FULL1 0x4000000
/* Added to NG_ROWS_FWD by the fused add's forward of bf16 rows: on NVIDIA, rows of exactly 1024
 * vectors (N = 8192) on 512 × 2, 16 groups a compute unit without the prefetch, instead of
 * NG_ROWS_256X4's 256 × 4 a group a row, in calls of more rows than compute units. The confirming
 * tuner found it (1.022x). Measured before on the binary of NG_ROWS_256X4 (1.035x in its scan):
 * 8192 98.3-98.8 -> 97.4-97.6 us, but rows that leave slots idle lost (5120 99.6-100.8 ->
 * 106.8-107.3, 6144 98.6-100.8 -> 102.9), and so did f16 rows of 8192 (99 -> 118). */
#define NG_ROWS_512X2 0x8000000
/* Added by RMSNorm's backward and the fused add's without ds_out (its kernel), LayerNorm's
 * backward and forward, for f32 rows: on NVIDIA, rows of more than 768 vectors (N > 6144) take
 * one slot, so that a row longer than the group goes to the op's split path instead of being
 * held in 512 × 2 or × 4 (f32 rows need twice the registers of 16-bit ones: the held kernels ran
 * one group a compute unit). With NG_ROWS_F32_1SLOT_512 (the fused add's backward with ds_out
 * and its forward, which streams such rows) rows of more than 512 vectors. H100, f32, rows·N =
 * 2^25, the default and the same binary under NORMGRAD_TUNE=reg=1 alternating, two runs (µs; dW
 * / weight frozen): RMSNorm 7168 157.4-159.3 / 172.3-172.4 -> 159.1-159.8 / 155.2-155.4, 8192
 * 163.9-165.1 / 173.6-173.8 -> 158.4-159.0 / 153.3-153.6, 12288 182.7-183.5 / 160.4-162.3 ->
 * 159.4 / 153.3-153.6, 16384 199.0-200.2 / 178.2-180.5 -> 157.6-157.7 / 152.2-152.8 (reg=2);
 * LayerNorm (dW + dB / dB) 7168 160.6-161.7 / 158.4-158.5 -> 157.2-158.0 / 156.9-157.3, 8192
 * 165.7-167.6 / 159.9-161.1 -> 157.3-158.4 / 155.7-157.8, 12288 217.8-221.1 / 181.8-184.0 ->
 * 156.1-157.3 / 153.9-154.1, 16384 209.4-212.6 / 203.7-205.1 -> 156.6-156.8 / 154.4-154.8, its
 * forward 7168 126.6-126.8 -> 111.7-112.0, 8192 128.7-131.1 -> 107.9-108.9, 12288 122.2-122.6 ->
 * 108.6-109.2, 16384 120.9-121.4 -> 107.6-107.9; the fused add with ds_out 4608 222.1-223.0 /
 * 225.0-226.1 -> 221.2-221.3 / 221.6-222.1, 6144 227.9 / 245.2-246.2 -> 208.4-208.5 /
 * 208.4-208.9, 8192 243.9-244.0 / 257.4-258.1 -> 204.1-204.8 / 201.4-201.9, its forward 4608
 * 202.1-202.3 -> 196.1-196.8, 6144 212.5-212.8 -> 197.5-198.5, 8192 224.2-224.9 -> 196.7-198.4,
 * 12288 222.6-223.4 -> 198.0-199.5, 16384 233.3-233.9 -> 197.9-198.0. Left out: RMSNorm's and
 * LayerNorm's backward at 6144 (RMSNorm with dW 153.8-155.4 -> 165.7-166.4) and 4608 (182 against
 * 152), LayerNorm's forward at 4608 (129.4-129.7 -> 153.8-154.0), RMSNorm's forward (its split
 * lost at 4608-12288: 8192 112.5-113.0 -> 116.3-117.3; 16384 even) and PolyNorm's (even). */
#define NG_ROWS_F32_1SLOT 0x10000000
#define NG_ROWS_F32_1SLOT_512 0x20000000
/* Added to NG_ROWS_BWD_DW / NG_ROWS_BWD_FROZEN by RMSNorm's backward (the fused add's without
 * ds_out too, the same kernel) for f16 rows: on NVIDIA, 16-bit rows of more than 1280 vectors
 * (N > 10240) take one slot, so that they split across work-groups (sets of 256 × 4 slices)
 * instead of being held by 512 × 4, one group a compute unit. H100, f16, rows·N = 2^25, the binary
 * before and this one alternating, two or three runs (µs; dW / weight frozen): 11264 90.5-91.3 /
 * 78.5-78.9 -> 87.2-87.9 / 77.3-78.7, 12288 91.1-93.6 / 79.4-79.7 -> 86.5-87.3 / 76.5-78.5, 16384
 * 90.5-92.7 / 77.6-79.4 -> 86.8-87.4 / 78.1-78.5; the fused add without ds_out 12288 90.5-92.0 /
 * 78.8-79.5 -> 86.0-89.8 / 76.3-76.6, 16384 90.0-90.9 / 77.7-79.0 -> 87.5-87.7 / 77.6; 1000 rows
 * of 12288 47.1-47.9 -> 44.4-45.2, 100 rows of 16384 21.9-22.0 -> 22.2-22.5. Shorter rows leave
 * most of the second slice idle: with 1025 vectors (8200) it lost (100.9-101.4 -> 104.5-104.6 with
 * dW), 1280 (10240) and 1344 (10752) were even to 3 µs faster. bf16 rows keep their launch
 * (NG_ROWS_DW_NOPF), and LayerNorm's f16 rows theirs: under NORMGRAD_TUNE=reg=1 its backward
 * gained with dW and dB and with dB alone (16384 97.2-103.7 -> 94.0-94.3, 90.7-91.6 ->
 * 86.2-86.8 µs) but lost with both parameters frozen, the LoRA case, whose dx must keep the same
 * bits (10240 75.0-75.4 -> 81.6-82.2, 16384 76.3-76.8 -> 78.3). */
#define NG_ROWS_F16_1SLOT 0x40000000
#define NG_F16_1SLOT_MIN 1280
/* Added to NG_ROWS_FWD by RMSNorm's forward for f32 rows: on NVIDIA, rows of 769-1024 vectors
 * (N = 6152-8192) take one slot and stream (the op does not split them) instead of being held by
 * 512 × 2. H100, f32, rows·N = 2^25, the binary before and this one alternating, three runs: 7168
 * 111.3-112.4 -> 106.1-106.8 us (0.82 -> 0.86), 7680 111.3-111.9 -> 107.1-107.7, 8192
 * 111.8-113.4 -> 104.5-105.8 (0.81 -> 0.87; four runs of five, the fifth 114.0); 100 rows of 8192
 * 10.7-11.1 -> 9.9-11.2, 1000 rows 36.1-36.9 -> 34.6-34.7; 769 vectors (6152) even, 113.0-113.6
 * -> 113.3-113.4. Longer rows keep their launch: streaming lost at 12288-65536 under
 * NORMGRAD_TUNE (16384 118.4-119.9 -> 131.4-131.5 us), and so did the split at 4608-12288 (8192
 * 112.5-113.0 -> 116.3-117.3). */
#define NG_ROWS_F32_STREAM_1K 0x80
/* Added to NG_ROWS_POLY_BWD by PolyNorm's backward with a gradient (dweight or dbias) for f16
 * rows: on NVIDIA, rows of 257-512 vectors (N = 2056-4096) held by 256 work-items (since
 * NG_ROWS_HALF_MID's groups of half a row took 257-384, those of 385-512), run on one
 * resident wave of three groups a compute unit without the next-row prefetch, instead of eight
 * a unit with it. The frozen pass keeps its launch (its grid is its own; the shape, and so dx's
 * bits, is unchanged). H100, f16, rows·N = 2^25, under NORMGRAD_TUNE=groups=396,prefetch=1
 * beside the default, two runs: with dW 2176 113.9-115.3 -> 106.3-107.6 us (0.60 -> 0.64-0.65),
 * 3072 92.7-93.9 -> 89.7-89.9, 4096 84.9-86.3 -> 82.2-83.0 (0.80-0.81 -> 0.83), dB alone 4096
 * 85.5-86.0 -> 81.3-82.2 (0.80 -> 0.84). bf16 rows keep theirs: even with dW (2176 -2.7 %,
 * 2560-3584 within 0.6 %), and dB alone at 2560 lost 6 % (90.3-90.8 -> 95.9-96.3). */
#define NG_ROWS_POLY_F16_3 0x40
/* Added to the forward's mode by RMSNorm, the fused add and LayerNorm for 16-bit rows (first
 * RMSNorm's and LayerNorm's bf16 rows alone, the numbers below): on NVIDIA, rows of 257-384
 * vectors (N = 2056-3072) in calls of more rows than compute units are held by 128 work-items
 * of four vectors each instead of 256 of two, a group a row as before: twice the groups a
 * compute unit, so twice the rows in flight, where 256 × 2 left up to half its slots idle. H100,
 * bf16, rows·N = 2^25, the binary before and this one alternating, three rounds: RMSNorm 2176
 * 64.3-65.7 -> 52.0-52.9 us (0.70-0.71 -> 0.87-0.88), 2560 57.9-58.8 -> 52.8-53.0, 3072
 * 55.8-56.5 -> 52.1-52.9; LayerNorm 2176 59.4-60.4 -> 53.7-54.7 (0.76-0.77 -> 0.84-0.85), 2560
 * 56.9-57.5 -> 53.2-54.0, 3072 54.5-55.6 -> 53.3-54.4; 1000 rows of 2560 11.6-12.1 -> 10.7-12.1
 * and 13.2-14.1 -> 11.1-12.4; 3584 (not taken) and RMSNorm f16 2560 even. 100 rows
 * of 2560 measured 7.4-8.1 -> 7.8-9.1 us (RMSNorm), so calls of at most a row a compute unit keep
 * 256 × 2 (y's bits then depend on the batch size, as with NG_ROWS_256X4). The backwards do not
 * take it: the same shape lost with dW (LayerNorm 2176 +24 %) and frozen (RMSNorm +80-100 %);
 * theirs is NG_ROWS_HALF_MID.
 * Since given to the fused add's forward and to f16 rows (NORMGRAD_TUNE, then the binaries
 * alternating, two runs): the fused add bf16 2176 103.5-104.0 -> 97.8-98.1 (0.88 -> 0.93-0.94),
 * 2560 102.5-102.7 -> 97.5-97.6, 3072 99.1-99.7 -> 97.6-98.4, f16 2560 102.3-103.0 ->
 * 97.4-99.0; LayerNorm f16 2176 60.2-60.4 -> 54.3-54.4 (0.76 -> 0.84), 2560 57.9-58.3 ->
 * 52.3-52.6, 3072 54.8-55.5 -> 52.9-53.4; RMSNorm f16 2176 65.8-66.1 -> 51.3-52.9 (0.69 ->
 * 0.87-0.89). */
#define NG_ROWS_FWD_128X4 0x20
/* Groups of half a row, one size below NG_ROWS_FIT2's: on NVIDIA, 16-bit rows of 257-448 vectors
 * (NG_ROWS_HALF_MID, N = 2056-3584; NG_HALF_MID_MAX), 257-384 (NG_ROWS_HALF_MID_384, N =
 * 2056-3072) or 257-320 (NG_ROWS_HALF_MID_320, N = 2056-2560), in calls
 * of more than NG_HALF_MID_MIN_ROWS_PER_CU rows a compute unit (the forward's:
 * NG_HALF_MID_FWD_MIN_ROWS_PER_CU), are held two vectors a work-item by a group as wide as half
 * the row rounded up to a warp (160 work-items up to 320 vectors, 192 up to 384, 224 up to 448)
 * instead of 256 × 2, which left up to half its slots idle. Given to
 * - the backward (both modes alike: the shape fixes dx's bits) of RMSNorm and of the fused add
 *   without ds_out (RMSNorm's kernel; NG_ROWS_HALF_MID), with dW on four groups a compute unit
 *   up to NG_HALF_MID_4_MAX vectors and three beyond, and LayerNorm's (NG_ROWS_HALF_MID_320, three
 *   a unit); the frozen pass keeps a group a row, and the partials are summed by the separate
 *   launch (the in-kernel sum takes power-of-two groups at these shapes);
 * - PolyNorm's forward (bf16 NG_ROWS_HALF_MID, f16 NG_ROWS_HALF_MID_384), with its grid of two
 *   rows a group, and its backward (the same flags, every call: a persistent grid, the wave of
 *   2048 work-items a unit), with
 *   dB alone then prefetching the next row (NG_ROWS_POLY_DB) and, for bf16, summing in the
 *   kernel (polynorm.c, chunk_wanted) as with dW; up to NG_POLY_SMALL_GRID_MAX vectors a smaller
 *   grid than the wave (below).
 * H100, rows·N = 2^25, the binary before and this one alternating, two runs (µs): RMSNorm bf16
 * with dW 2176 92.2-92.4 -> 82.9-83.6 (0.74 -> 0.82; four a unit under NORMGRAD_TUNE -2.7 %
 * more), 2304 90.0-90.2 -> 82.1-82.3 (and -2.5 %), 2560 87.4-87.7 -> 82.0-82.3 (0.78 -> 0.84;
 * four a unit lost, +4 %), 3072 83.1-83.7 -> 80.2-81.3; frozen 85.1-85.3 -> 74.4-74.5 (0.80 ->
 * 0.92), 83.5 -> 73.8-74.3, 81.5-81.8 -> 73.7-74.8, 78.7 -> 73.9; the fused add without ds_out
 * 2560 with dW 87.5-88.2 -> 80.6-81.0, frozen 81.5-82.8 -> 73.3-73.6; LayerNorm bf16 with dW and
 * dB 2176 92.3-93.5 -> 87.7, 2304 90.5-90.7 -> 86.3-86.7, 2560 87.7-88.0 -> 85.1-85.4, dB alone
 * 89.1-89.6 -> 80.4-80.9 (0.77 -> 0.85), 87.5-88.5 -> 80.5-81.1, 85.8-86.1 -> 79.2-80.2, both
 * frozen 73.0-73.5 -> 73.2-73.6, 72.4-73.3 -> 73.0-73.5, 72.0-73.3 -> 73.2-73.5 (the one pass
 * that does not gain); f16 under NORMGRAD_TUNE: RMSNorm 2560 with dW -6 %, frozen -10 %, 3072
 * -3 % and -5 %, LayerNorm 2560 -6 to -7 % with gradients, both frozen even. PolyNorm bf16
 * forward under NORMGRAD_TUNE: 2176 63.2-65.1 -> 52.3-52.9 (0.71 -> 0.87), 2560 58.5-58.8 ->
 * 51.9-52.9, 3072 55.4-56.5 -> 52.1-52.3; f16 2176 65.1-66.0 -> 52.1-53.1 (0.70 -> 0.86-0.88),
 * 2560 -11 %, 3072 -8 %. Small calls of rows of 2560 lost with dW, to the separate sum: RMSNorm
 * 1000 rows 19.3 -> 21.0-21.6 µs, 1100 20.2-21.5 -> 23.1-23.7, 2000 even (26.3-27.5 ->
 * 26.0-27.1), LayerNorm 1000-2000 +2 to +9 %; hence the backward's bound of 16 rows a unit (the
 * frozen pass lost nothing there: 1100 and 2000 rows -4 %). PolyNorm's forward: 1100 rows even,
 * 2000 16.2-16.8 -> 14.1-15.0. Rows of 385-448 vectors (224 × 2) since stop 58, the binaries
 * alternating, two runs: RMSNorm bf16 3328 with dW 82.2-82.8 -> 80.2-81.1, frozen 78.0-78.2 ->
 * 75.5-75.6, 3584 81.2 -> 80.8-81.4 and 76.1-76.4 -> 75.4-75.6, f16 3584 -1.2 % and -3.0 %; the
 * fused add without ds_out 3584 -0.6 % and -2.9 %; PolyNorm bf16 3328 forward 54.3-54.8 ->
 * 52.8-53.2, with dW 87.6-88.3 -> 82.8-83.4, dB alone -1.8 %, both frozen -2.0 %, 3584 -0.8 to
 * -3.1 % in every pass; PolyNorm f16 3584 with dW -1.3 %, dB alone -1.5 %, but both frozen
 * 76.9-78.2 -> 81.3-82.5 (+5.6 %), so f16's rows stop at 384 (NG_ROWS_HALF_MID_384). Not taken:
 * LayerNorm at 3072-3584 (even or slower), the fused add with ds_out (its own kernel: +3 to +5 %
 * frozen, with dW -12 % at 2176 but +3.5 % at 2560). PolyNorm's backward, the binary
 * before and this one alternating, two runs: bf16 with dW 2176 105.0-105.1 -> 83.2-84.4 (0.65 ->
 * 0.81-0.82), 2560 94.4-94.6 -> 80.8-81.1, 2816 92.4-92.6 -> 83.8-85.3, 3072 88.7-88.8 ->
 * 83.2-83.6; dB alone 2176 94.9-95.3 -> 83.5-83.6 (0.72 -> 0.82; the prefetch and the in-kernel
 * sum took 92.0-92.8 to it), 2560 88.8-89.6 -> 81.0-81.2, 2816 87.6-88.2 -> 83.8-84.5, 3072
 * 85.1-85.2 -> 83.1-91.5 (the one spread case); both frozen 87.0-88.6 -> 76.1-76.4 (0.78 ->
 * 0.90), 82.4-82.6 -> 74.5-75.0, 81.7-82.4 -> 77.0, 79.2-79.3 -> 75.6-75.7; f16 likewise (with
 * dW 2176 -18 %, 3072 -7 %; dB alone -5 to -13 %; both frozen -5 to -16 %); 1000 rows of 2560 and
 * 3072 -5 to -11 %. */
#define NG_ROWS_HALF_MID 0x10
#define NG_ROWS_HALF_MID_320 0x8
#define NG_ROWS_HALF_MID_384 0x80000000
#define NG_HALF_MID_MAX 448
#define NG_HALF_MID_MIN_ROWS_PER_CU 16
#define NG_HALF_MID_FWD_MIN_ROWS_PER_CU 8
#define NG_HALF_MID_4_MAX 288
/* PolyNorm's backward on groups of half a row takes a smaller grid than the wave of 2048 work-items
 * a unit up to this many vectors (N = 2056-3072): with a gradient (NG_ROWS_POLY_DW,
 * NG_ROWS_POLY_DB) eight groups a unit; with both parameters frozen NG_ROWS_POLY_FZ_960 (bf16) or
 * NG_ROWS_POLY_FZ_1152 (f16) work-items a unit, which the scans under NORMGRAD_TUNE suggest is what
 * the frozen kernel holds at once (bf16 six groups of 160, five of 192; f16 seven and six): a grid
 * of one group a unit more lost 8-18 %, as a second round of groups would. H100, rows·N = 2^25, the
 * binaries alternating, two runs (µs): with dW bf16 2304 82.3-82.7 -> 80.3-81.0, 2816 83.7-84.1 ->
 * 80.4 (0.82 -> 0.85-0.86), f16 2816 86.6-87.5 -> 82.1-83.0 (0.79-0.80 -> 0.83-0.84), 3072
 * 83.1-84.2 -> 80.1-80.8, -0.5 to -5.1 % at 2176-3072 in both dtypes (1000 rows even); dB alone
 * bf16 2816 83.6-84.7 -> 79.8-80.4 (0.81 -> 0.86), f16 2816 86.1-86.8 -> 81.7-82.8, -1.2 to -4.9 %
 * at 2176-3072; eight groups of 224 (bf16 3328, 3584) lost 3.8-5.4 % with dB alone. */
#define NG_POLY_SMALL_GRID_MAX 384
#define NG_ROWS_POLY_FZ_960 ((ng_rows_mode)1 << 33)
#define NG_ROWS_POLY_FZ_1152 ((ng_rows_mode)1 << 34)
/* The fused add's backward with ds_out (its own kernel) on groups of half a row: 16-bit rows of
 * 257-NG_HALF_MID_DS_MAX vectors (N = 2056-2304) in calls of more than
 * NG_HALF_MID_MIN_ROWS_PER_CU rows a unit, on 160 × 2; with dW three groups a unit (NG_ROWS_FEW's
 * share of NG_ROWS_HALF_MID's four), frozen sixteen a unit, each prefetching its next row, in
 * place of NG_ROWS_MANY_512's eight without. Both passes take the shape, which fixes dx's bits:
 * without the prefetch the frozen pass had lost 3-6 % (a group a row, eight a unit), so the dW
 * pass's gain waited for it. H100, rows·N = 2^25, main's binary and this one alternating, two
 * runs (µs): bf16 2176 with dW 117.8-118.0 -> 104.1-104.2 (0.78 -> 0.88), frozen 108.8-109.8 ->
 * 105.2-105.3; 2304 114.1-115.1 -> 104.4-105.5, 107.1-108.5 -> 103.8-106.9; f16 2176
 * 118.2-119.0 -> 103.7-103.9, 108.4-108.6 -> 104.0-105.3; 2304 114.3-115.1 -> 103.7-106.0,
 * 107.2-107.5 -> 104.1-104.5. Longer rows lost with dW: 2560 bf16 +4.5 % (f16 -2 %), 2816-3584
 * +13 to +16 % (frozen +1.7 to +6.5 % at 3072-3584). */
#define NG_ROWS_HALF_MID_DS ((ng_rows_mode)1 << 32)
#define NG_HALF_MID_DS_MAX 288
/* The row lengths (in 8-wide vectors) NG_ROWS_F32_STREAM_1K takes: 769-1024 */
static inline bool ng_f32_stream_rows(size_t nv) { return nv > 768 && nv <= 1024; }
static inline ng_rows_mode ng_bwd_mode(bool partials, ng_dtype x_dtype) {
  return (partials ? NG_ROWS_BWD_DW : NG_ROWS_BWD_FROZEN) | (x_dtype == NG_F32 ? 0 : NG_ROWS_X16);
}
/* The launch of GroupNorm's and FLCE's kernels, which have no kind of their own: with
 * NG_ROWS_POW2_WG (their sums take powers of two). */
ng_row_launch ng_choose_row_launch(const ng_context *ctx, size_t rows, size_t n, bool vec_ok,
                                   ng_rows_mode mode);
/* The i-th row length whose launches may differ, for the ops' variant lists: every power of two
 * up to 2^26 (on GPUs the work-group size grows with the row length), then one for each of
 * NG_ROWS_HALF_MID's and NG_ROWS_FIT2's group sizes (160, 192, then 288, 320, … work-items:
 * rows of twice as many vectors); 0 after the last. */
size_t ng_variant_n(size_t i);
/* ng_variant_n's lengths, then ng_tuned_length's for ctx: the ops' variant lists, so that a
 * prebuild builds the launches a tuned line or a built-in entry gives rows between the listed
 * lengths (54 of the H200's 81 entries lie strictly between two powers of two) */
size_t ng_variant_n_ctx(const ng_context *ctx, size_t i);
/* The i-th row length at which one of ctx's tuning.txt lines or built-in entries (its device's)
 * begins or ends, 0 after the last or with table=1 (duplicates possible) */
size_t ng_tuned_length(const ng_context *ctx, size_t i);
/* Whether RMSNorm's and the fused add's backward on launch l holds dy and x in their storage bits
 * (RAW_ROWS; src/ops/rmsnorm.c has the measurements) */
bool ng_rms_raw_rows(const ng_row_launch *l, ng_dtype x_dtype, bool compute_dw, bool has_ds);

/* RMSNorm's and PolyNorm's forward plans of `rows` rows of n values of dtype xd split across
 * work-groups (ng_rmsnorm_fwd_coop, ng_polynorm_fwd_coop) on ctx's device, for vector-aligned
 * buffers: whether they split, and into *c how (its flags: the sums ahead, late, the f16
 * pairs); the plans the forwards take, for tests of the rules (rmsnorm.c, polynorm.c). */
bool ng_rmsnorm_fwd_plan(const ng_context *ctx, size_t rows, size_t n, ng_dtype xd, ng_coop *c);
/* The forward's row launch of RMSNorm (fused: the fused add's) and LayerNorm, as the ops take it
 * (vec_ok: vector-aligned buffers), before any split: the ops', their variant lists' and the
 * tests' one choice of it. */
ng_row_launch ng_rmsnorm_fwd_launch(const ng_context *ctx, bool fused, size_t rows, size_t n,
                                    ng_dtype xd, bool vec_ok);
ng_row_launch ng_layernorm_fwd_launch(const ng_context *ctx, size_t rows, size_t n, ng_dtype xd,
                                      bool vec_ok);
bool ng_polynorm_fwd_plan(const ng_context *ctx, size_t rows, size_t n, ng_dtype xd, ng_coop *c);
/* The backward's row launch (*l) and whether its rows split (into *c how) for LayerNorm's and
 * PolyNorm's backward with the gradients dw, db, as the ops take them (vector-aligned buffers);
 * for tests of the tables' launches. */
bool ng_layernorm_bwd_plan(const ng_context *ctx, size_t rows, size_t n, ng_dtype xd, bool dw,
                           bool db, ng_row_launch *l, ng_coop *c);
bool ng_polynorm_bwd_plan(const ng_context *ctx, size_t rows, size_t n, ng_dtype xd, bool dw,
                          bool db, ng_row_launch *l, ng_coop *c);
/* The same for RMSNorm's backward (fused: the fused add's, has_ds: with ds_out) with dW or not. */
bool ng_rmsnorm_bwd_plan(const ng_context *ctx, size_t rows, size_t n, ng_dtype xd, bool fused,
                         bool has_ds, bool dw, ng_row_launch *l, ng_coop *c);

/* Parameter-gradient reductions (reduce.c, cl/reduce.cl): each section sums `groups` rows of
 * `n` f32 partials (at part_off floats into `part`) into `out` (its own dtype), adding to what
 * `out` holds when `accumulate`. Get the program first, with the op's other programs, so a
 * build failure enqueues nothing. */
ng_status ng_reduce_program(ng_context *ctx, ng_dtype out_dtype, cl_program *prog);
/* The options ng_reduce_program builds with (for variant enumeration). */
void ng_reduce_opts(ng_opts *o, const ng_context *ctx, ng_dtype out_dtype);
/* fn for each reduction program an op's gradients can need (one per gradient dtype). */
ng_status ng_reduce_for_each_variant(ng_context *ctx, ng_variant_fn fn, void *user);
typedef struct ng_reduce_section {
  size_t part_off; /* floats into `part` */
  size_t n;        /* columns */
  ng_tensor out;   /* mem NULL: a frozen parameter, nothing to sum */
} ng_reduce_section;
/* The present sections of a and b (b may be NULL), of one dtype, in one launch. */
ng_status ng_enqueue_reduce_sections(ng_context *ctx, cl_command_queue q, cl_program prog,
                                     cl_mem part, unsigned groups, const ng_reduce_section *a,
                                     const ng_reduce_section *b, bool accumulate, cl_uint nwait,
                                     const cl_event *wait, cl_event *event);

#define NG_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
