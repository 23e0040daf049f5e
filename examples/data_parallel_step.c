/* One data-parallel training step of a small model block over N MPI ranks, each rank with its
 * own OpenCL device and its own normgrad context:
 *
 *     x[BT, H] ── RMSNorm(weight g) ── h ── FLCE(head W[V, H], bias b[V], targets) ── loss
 *
 * Each rank takes its shard of the batch and runs forward and backward over M micro-batches,
 * adding the parameter gradients into one buffer (NG_ACCUMULATE_GRAD). Then one in-place
 * MPI_Allreduce sums them over the ranks: afterwards every rank holds the gradient of the loss of
 * the WHOLE batch, the numbers a single process would get (up to the order of f32 additions),
 * and would take the same optimizer step. docs/data-parallel.md explains the choices made here.
 *
 *   mpirun -np 2 ./build/example_data_parallel_step OUT.safetensors [--micro-batches M]
 *       [--freeze-norm-weight] [--batch BT] [--hidden H] [--vocab V] [--seed S]
 *       [--loss-scaling global-count|average-of-means]
 *
 * Rank 0 writes the summed gradients and the loss to OUT (safetensors, see write_result). The
 * data come from synthetic_batch.h: the same generator on every rank, so a run with one rank
 * sees exactly the same batch (tests/mpi/data_parallel.sh compares the two). */
#include <normgrad.h>

#include <mpi.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synthetic_batch.h"

static int my_rank;

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d: ", my_rank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  MPI_Abort(MPI_COMM_WORLD, 1); /* takes the other ranks down too: none waits forever */
  exit(1);
}

/* normgrad reports which argument or build failed in a per-thread detail message. */
#define NG_CHECK(call)                                                                            \
  do {                                                                                            \
    ng_status s_ = (call);                                                                        \
    if (s_ != NG_SUCCESS)                                                                         \
      die("line %d: %s: %s", __LINE__, ng_status_name(s_), ng_last_error_detail());              \
  } while (0)
#define CL_CHECK(call)                                                                            \
  do {                                                                                            \
    cl_int e_ = (call);                                                                           \
    if (e_ != CL_SUCCESS) die("line %d: OpenCL error %d", __LINE__, (int)e_);                     \
  } while (0)

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) die("out of host memory");
  return p;
}

/* ---- options --------------------------------------------------------------------------------- */
typedef struct config {
  const char *out;
  size_t bt, h, v;
  int micro;
  bool frozen_norm;      /* the norm weight gets no gradient at all (LoRA-style fine-tuning) */
  bool average_of_means; /* the common mistake, kept for comparison (see the loss scaling note) */
  uint64_t seed;
} config;

static size_t parse_size(const char *opt, const char *s) {
  char *end = NULL;
  unsigned long long v = strtoull(s ? s : "", &end, 10);
  if (!s || !*s || *end || v == 0) die("%s needs a positive integer", opt);
  return (size_t)v;
}

static config parse_args(int argc, char **argv) {
  config c = {NULL, 75, 96, 1000, 2, false, false, 7};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--micro-batches") == 0) c.micro = (int)parse_size(a, next), i++;
    else if (strcmp(a, "--batch") == 0) c.bt = parse_size(a, next), i++;
    else if (strcmp(a, "--hidden") == 0) c.h = parse_size(a, next), i++;
    else if (strcmp(a, "--vocab") == 0) c.v = parse_size(a, next), i++;
    else if (strcmp(a, "--seed") == 0) c.seed = parse_size(a, next), i++;
    else if (strcmp(a, "--freeze-norm-weight") == 0) c.frozen_norm = true;
    else if (strcmp(a, "--loss-scaling") == 0 && next && strcmp(next, "global-count") == 0)
      c.average_of_means = false, i++;
    else if (strcmp(a, "--loss-scaling") == 0 && next && strcmp(next, "average-of-means") == 0)
      c.average_of_means = true, i++;
    else if (a[0] != '-' && !c.out) c.out = a;
    else die("unknown or incomplete option '%s' (see the comment at the top of the source)", a);
  }
  if (!c.out) die("usage: data_parallel_step OUT.safetensors [options]");
  if (c.v * c.h > (size_t)INT32_MAX) die("V·H must stay below 2^31 (MPI counts are int)");
  return c;
}

/* ---- which device this rank drives ----------------------------------------------------------- */
/* Ranks on one host share its devices, so the NODE-LOCAL rank chooses: with GPUs, rank r takes
 * GPU r mod (GPUs on this host). Without (a CPU runtime such as PoCL) the one device is split into
 * equal sub-devices, one per local rank, so that the ranks do not fight over the same cores; if it
 * cannot be split, every rank uses the whole device. */
typedef struct rank_device {
  cl_device_id dev;
  bool is_sub_device; /* created here, released at the end */
  char desc[200];
} rank_device;

static rank_device pick_device(int local_rank, int local_size) {
  rank_device rd = {NULL, false, ""};
  cl_uint n = 0;
  NG_CHECK(ng_list_devices(NULL, 0, &n));
  if (n == 0) die("no OpenCL device");
  cl_device_id *all = xmalloc(n * sizeof *all);
  NG_CHECK(ng_list_devices(all, n, &n));
  cl_uint ngpu = 0;
  for (cl_uint i = 0; i < n; i++) {
    cl_device_type t = 0;
    CL_CHECK(clGetDeviceInfo(all[i], CL_DEVICE_TYPE, sizeof t, &t, NULL));
    if (t & CL_DEVICE_TYPE_GPU) all[ngpu++] = all[i];
  }
  char name[128] = "";
  cl_uint cu = 0;
  if (ngpu > 0) {
    rd.dev = all[(cl_uint)local_rank % ngpu];
    clGetDeviceInfo(rd.dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    snprintf(rd.desc, sizeof rd.desc, "%s (GPU %u of %u on this host)", name,
             (cl_uint)local_rank % ngpu, ngpu);
    free(all);
    return rd;
  }
  rd.dev = all[0];
  free(all);
  clGetDeviceInfo(rd.dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
  CL_CHECK(clGetDeviceInfo(rd.dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL));
  snprintf(rd.desc, sizeof rd.desc, "%s (whole device, %u compute units)", name, cu);
  if (local_size < 2 || cu < 2) return rd;
  const cl_uint per = cu / (cl_uint)local_size ? cu / (cl_uint)local_size : 1;
  const cl_device_partition_property props[] = {CL_DEVICE_PARTITION_EQUALLY, per, 0};
  cl_uint nsub = 0;
  if (clCreateSubDevices(rd.dev, props, 0, NULL, &nsub) != CL_SUCCESS || nsub < 2) return rd;
  cl_device_id *subs = xmalloc(nsub * sizeof *subs);
  CL_CHECK(clCreateSubDevices(rd.dev, props, nsub, subs, NULL));
  const cl_uint mine = (cl_uint)local_rank % nsub;
  for (cl_uint i = 0; i < nsub; i++)
    if (i != mine) clReleaseDevice(subs[i]);
  rd.dev = subs[mine];
  rd.is_sub_device = true;
  snprintf(rd.desc, sizeof rd.desc, "%s (sub-device %u of %u, %u compute units)", name, mine,
           nsub, per);
  free(subs);
  return rd;
}

/* ---- output ---------------------------------------------------------------------------------- */
/* safetensors, readable by Python's safetensors.numpy.load_file: an 8-byte little-endian header
 * length, a JSON header (each tensor's dtype, shape and byte range, plus string metadata), then
 * the raw little-endian data. Tensors written:
 *   dweight_head F32 [V, H], dbias_head F32 [V], dweight_norm F32 [H] (absent when frozen):
 *       the gradients summed over the ranks;
 *   loss F32 [1]: the loss of the whole batch; count I64 [1]: its counted (non-ignored) targets.
 * Metadata: ranks, micro_batches, loss_scaling, frozen_norm_weight, devices. */
typedef struct out_tensor {
  const char *name, *dtype;
  size_t shape[2];
  int ndim;
  const void *data;
  size_t bytes;
} out_tensor;

static void write_result(const char *path, const out_tensor *ts, int n, const char *meta) {
  const uint32_t one = 1;
  if (*(const unsigned char *)&one != 1) die("this writer assumes a little-endian host");
  size_t cap = 4096 + strlen(meta), len = 0;
  char *hdr = xmalloc(cap);
  len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{%s}", meta);
  size_t at = 0;
  for (int i = 0; i < n && len < cap; i++) {
    len += (size_t)snprintf(hdr + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu",
                            ts[i].name, ts[i].dtype, ts[i].shape[0]);
    if (ts[i].ndim == 2 && len < cap)
      len += (size_t)snprintf(hdr + len, cap - len, ",%zu", ts[i].shape[1]);
    if (len < cap)
      len += (size_t)snprintf(hdr + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", at,
                              at + ts[i].bytes);
    at += ts[i].bytes;
  }
  if (len + 9 >= cap) die("safetensors header too long");
  hdr[len++] = '}';
  while (len % 8) hdr[len++] = ' '; /* the data then starts 8-byte aligned */
  unsigned char size_le[8];
  for (int i = 0; i < 8; i++) size_le[i] = (unsigned char)((uint64_t)len >> (8 * i));
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite(size_le, 1, 8, f) == 8 && fwrite(hdr, 1, len, f) == len;
  for (int i = 0; i < n && ok; i++) ok = fwrite(ts[i].data, 1, ts[i].bytes, f) == ts[i].bytes;
  if (f && fclose(f) != 0) ok = false;
  if (!ok) die("cannot write %s", path);
  free(hdr);
}

/* JSON string content: device names are free text. */
static void json_safe(char *s) {
  for (; *s; s++)
    if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20) *s = '_';
}

/* ---- the step -------------------------------------------------------------------------------- */
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int world = 1, local_rank = 0, local_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm host; /* the ranks that share this machine (and its devices) */
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, my_rank, MPI_INFO_NULL, &host);
  MPI_Comm_rank(host, &local_rank);
  MPI_Comm_size(host, &local_size);
  const config c = parse_args(argc, argv);
  const size_t H = c.h, V = c.v;

  /* Each rank owns its OpenCL context, queue and normgrad context (with its own program cache):
   * nothing is shared between ranks but what MPI moves. */
  const rank_device rd = pick_device(local_rank, local_size);
  cl_int err = CL_SUCCESS;
  cl_context cl = clCreateContext(NULL, 1, &rd.dev, NULL, NULL, &err);
  CL_CHECK(err);
  cl_command_queue q = clCreateCommandQueue(cl, rd.dev, 0, &err); /* in order */
  CL_CHECK(err);
  ng_context *ng = NULL;
  NG_CHECK(ng_context_create(cl, rd.dev, &ng));

  /* Parameters must start identical on every rank: rank 0 makes them, the others receive them
   * (with real checkpoints, rank 0 loads and broadcasts the same way). */
  float *norm_w = xmalloc(H * sizeof(float)), *head_w = xmalloc(V * H * sizeof(float));
  float *head_b = xmalloc(V * sizeof(float));
  if (my_rank == 0) {
    for (size_t j = 0; j < H; j++) norm_w[j] = sb_norm_weight(c.seed, j);
    for (size_t i = 0; i < V * H; i++) head_w[i] = sb_head_weight(c.seed, H, i / H, i % H);
    for (size_t i = 0; i < V; i++) head_b[i] = sb_head_bias(c.seed, i);
  }
  MPI_Bcast(norm_w, (int)H, MPI_FLOAT, 0, MPI_COMM_WORLD);
  MPI_Bcast(head_w, (int)(V * H), MPI_FLOAT, 0, MPI_COMM_WORLD);
  MPI_Bcast(head_b, (int)V, MPI_FLOAT, 0, MPI_COMM_WORLD);

  /* This rank's shard: rows [s0, s1) of the global batch, cut into M micro-batches. Shards and
   * micro-batches may differ in size by a row. */
  const size_t s0 = c.bt * (size_t)my_rank / (size_t)world;
  const size_t s1 = c.bt * (size_t)(my_rank + 1) / (size_t)world;
#define MB_BEGIN(m) (s0 + (s1 - s0) * (size_t)(m) / (size_t)c.micro)
  size_t mb_max = 1;
  for (int m = 0; m < c.micro; m++)
    if (MB_BEGIN(m + 1) - MB_BEGIN(m) > mb_max) mb_max = MB_BEGIN(m + 1) - MB_BEGIN(m);

  /* LOSS SCALING. The loss is the mean over the counted (non-ignored) targets of the WHOLE batch:
   *     loss = (1/N) · Σ ce_i over every counted row of every rank and micro-batch,
   * N = the global count. Its gradient is a sum over rows, so it splits exactly over ranks and
   * micro-batches when every piece uses the same factor 1/N: FLCE with reduction `sum` and
   * grad_output = 1/N. The targets of the step are known before it starts, so N costs one
   * all-reduce of an integer.
   * A `mean` per micro-batch scales each piece by 1/(its own count) instead; averaging those
   * pieces over ranks and micro-batches (what an averaging all-reduce does) gives the rows of
   * sparsely labelled pieces more weight. It equals the true gradient only when every piece has
   * the same count. --loss-scaling average-of-means does exactly that, to show the difference. */
  long long count = 0;
  for (size_t i = s0; i < s1; i++) count += sb_target(c.seed, c.bt, V, i) != SB_IGNORE_INDEX;
  long long global_count = count;
  MPI_Allreduce(MPI_IN_PLACE, &global_count, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);

  ng_flce_params fp = ng_flce_params_default(1, H, V);
  fp.ignore_index = SB_IGNORE_INDEX;
  if (!c.average_of_means) {
    fp.reduction = NG_REDUCTION_SUM;
    fp.grad_output = global_count ? 1.0f / (float)global_count : 0.0f;
  } else {
    fp.reduction = NG_REDUCTION_MEAN;
    fp.grad_output = 1.0f / (float)(world * c.micro);
  }
  ng_rmsnorm_params np = {1, H, 1e-6f, 0.0f, NG_CAST_LLAMA};

  /* Device buffers, sized for the largest micro-batch and reused by every one. */
  const size_t act = mb_max * H * sizeof(float);
  cl_mem x = clCreateBuffer(cl, CL_MEM_READ_WRITE, act, NULL, &err);
  CL_CHECK(err);
  cl_mem hid = clCreateBuffer(cl, CL_MEM_READ_WRITE, act, NULL, &err); /* RMSNorm output */
  CL_CHECK(err);
  cl_mem dhid = clCreateBuffer(cl, CL_MEM_READ_WRITE, act, NULL, &err); /* FLCE's dinput */
  CL_CHECK(err);
  cl_mem dx = clCreateBuffer(cl, CL_MEM_READ_WRITE, act, NULL, &err); /* for the layers below */
  CL_CHECK(err);
  cl_mem rstd = clCreateBuffer(cl, CL_MEM_READ_WRITE, mb_max * sizeof(float), NULL, &err);
  CL_CHECK(err);
  cl_mem tgt = clCreateBuffer(cl, CL_MEM_READ_WRITE, mb_max * sizeof(int64_t), NULL, &err);
  CL_CHECK(err);
  cl_mem loss = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof(float), NULL, &err);
  CL_CHECK(err);
  const cl_mem_flags cp = CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR;
  cl_mem g = clCreateBuffer(cl, cp, H * sizeof(float), norm_w, &err);
  CL_CHECK(err);
  cl_mem w = clCreateBuffer(cl, cp, V * H * sizeof(float), head_w, &err);
  CL_CHECK(err);
  cl_mem b = clCreateBuffer(cl, cp, V * sizeof(float), head_b, &err);
  CL_CHECK(err);

  /* Every parameter gradient in ONE f32 buffer, so that one read-back and one all-reduce move
   * them all (frameworks bucket gradients for the same reason):
   *     [ dW_head : V·H | db_head : V | dg_norm : H, absent when the norm weight is frozen ]
   * dW_head sits at offset 0, where CLBlast can update it without a [V, H] copy (docs/flce.md). */
  const size_t off_db = V * H, off_dg = V * H + V;
  const size_t ngrad = V * H + V + (c.frozen_norm ? 0 : H);
  cl_mem grads = clCreateBuffer(cl, CL_MEM_READ_WRITE, ngrad * sizeof(float), NULL, &err);
  CL_CHECK(err);

  float *hx = xmalloc(act);
  int64_t *ht = xmalloc(mb_max * sizeof(int64_t));
  double loss_sum = 0; /* Σ of the per-micro-batch losses, on the host */
  bool first = true;
  for (int m = 0; m < c.micro; m++) {
    const size_t r0 = MB_BEGIN(m), rows = MB_BEGIN(m + 1) - r0;
    if (rows == 0) continue; /* more ranks or micro-batches than rows */
    for (size_t i = 0; i < rows; i++) {
      for (size_t j = 0; j < H; j++) hx[i * H + j] = sb_x(c.seed, H, r0 + i, j);
      ht[i] = sb_target(c.seed, c.bt, V, r0 + i);
    }
    CL_CHECK(clEnqueueWriteBuffer(q, x, CL_TRUE, 0, rows * H * sizeof(float), hx, 0, NULL, NULL));
    CL_CHECK(clEnqueueWriteBuffer(q, tgt, CL_TRUE, 0, rows * sizeof(int64_t), ht, 0, NULL, NULL));
    np.rows = rows;
    fp.bt = rows;
    /* The first micro-batch overwrites the gradients (no zeroing pass over [V, H]); the others
     * add into them. */
    const unsigned flags = first ? 0u : NG_ACCUMULATE_GRAD;
    first = false;

    NG_CHECK(ng_rmsnorm_forward(ng, q, &np, ng_tensor_of(x, 0, NG_F32),
                                ng_tensor_of(g, 0, NG_F32), ng_tensor_of(hid, 0, NG_F32),
                                ng_tensor_of(rstd, 0, NG_F32), 0, NULL, NULL));

    /* Forward and backward of the head and the loss in one call: dinput is the gradient that
     * reaches the norm's output; dweight and dbias go into their slots of the gradient buffer. */
    ng_flce_tensors t;
    memset(&t, 0, sizeof t); /* every tensor absent (mem NULL) unless set below */
    t.input = ng_tensor_of(hid, 0, NG_F32);
    t.weight = ng_tensor_of(w, 0, NG_F32);
    t.target = ng_tensor_of(tgt, 0, NG_I64);
    t.bias = ng_tensor_of(b, 0, NG_F32);
    t.loss = ng_tensor_of(loss, 0, NG_F32);
    t.dinput = ng_tensor_of(dhid, 0, NG_F32);
    t.dweight = ng_tensor_of(grads, 0, NG_F32);
    t.dbias = ng_tensor_of(grads, off_db, NG_F32);
    NG_CHECK(ng_flce(ng, q, &fp, &t, flags, NULL, 0, NULL, NULL));

    /* A frozen norm weight has no gradient slot at all: the kernels are built without the dW
     * work, and dx (which the layers below need either way) is bit-identical. */
    const ng_tensor dg = c.frozen_norm ? ng_tensor_none() : ng_tensor_of(grads, off_dg, NG_F32);
    NG_CHECK(ng_rmsnorm_backward(ng, q, &np, ng_tensor_of(dhid, 0, NG_F32),
                                 ng_tensor_of(x, 0, NG_F32), ng_tensor_of(g, 0, NG_F32),
                                 ng_tensor_of(rstd, 0, NG_F32), ng_tensor_of(dx, 0, NG_F32), dg,
                                 flags, ng_tensor_none(), 0, NULL, NULL));

    float l = 0;
    CL_CHECK(clEnqueueReadBuffer(q, loss, CL_TRUE, 0, sizeof l, &l, 0, NULL, NULL));
    loss_sum += l;
  }
  if (first) { /* this rank had no rows: it contributes zeros */
    const float zero = 0.0f;
    CL_CHECK(clEnqueueFillBuffer(q, grads, &zero, sizeof zero, 0, ngrad * sizeof(float), 0, NULL,
                                 NULL));
  }

  /* Reduce once, after the last micro-batch: the read-back waits for the whole step, then the
   * gradients are summed over the ranks in place, in f32. */
  float *hg = xmalloc(ngrad * sizeof(float));
  CL_CHECK(clEnqueueReadBuffer(q, grads, CL_TRUE, 0, ngrad * sizeof(float), hg, 0, NULL, NULL));
  MPI_Allreduce(MPI_IN_PLACE, hg, (int)ngrad, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &loss_sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const double loss_value = c.average_of_means ? loss_sum / (double)(world * c.micro)
                            : global_count     ? loss_sum / (double)global_count
                                               : 0.0;
  /* Every rank now holds the same hg: a real step hands it to the optimizer here (or writes it
   * back into `grads` and updates W, b and g on the device). */

  printf("rank %d of %d: %s; rows [%zu, %zu) in %d micro-batches, %lld counted targets\n",
         my_rank, world, rd.desc, s0, s1, c.micro, count);
  char devs[4096] = "";
  char *all_desc = my_rank == 0 ? xmalloc((size_t)world * sizeof rd.desc) : NULL;
  MPI_Gather(rd.desc, (int)sizeof rd.desc, MPI_CHAR, all_desc, (int)sizeof rd.desc, MPI_CHAR, 0,
             MPI_COMM_WORLD);
  if (my_rank == 0) {
    for (int r = 0; r < world; r++) {
      size_t used = strlen(devs);
      snprintf(devs + used, sizeof devs - used, "%srank %d: %s", r ? "; " : "", r,
               all_desc + (size_t)r * sizeof rd.desc);
    }
    json_safe(devs);
    char meta[4608];
    snprintf(meta, sizeof meta,
             "\"ranks\":\"%d\",\"micro_batches\":\"%d\",\"loss_scaling\":\"%s\","
             "\"frozen_norm_weight\":\"%d\",\"devices\":\"%s\"",
             world, c.micro, c.average_of_means ? "average-of-means" : "global-count",
             c.frozen_norm ? 1 : 0, devs);
    const float lf = (float)loss_value;
    const int64_t n64 = global_count;
    const out_tensor ts[] = {
        {"dweight_head", "F32", {V, H}, 2, hg, V * H * sizeof(float)},
        {"dbias_head", "F32", {V, 0}, 1, hg + off_db, V * sizeof(float)},
        {"loss", "F32", {1, 0}, 1, &lf, sizeof lf},
        {"count", "I64", {1, 0}, 1, &n64, sizeof n64},
        {"dweight_norm", "F32", {H, 0}, 1, hg + off_dg, H * sizeof(float)},
    };
    write_result(c.out, ts, c.frozen_norm ? 4 : 5, meta);
    printf("loss %.9g over %lld counted targets of %zu rows (%s); gradients written to %s\n",
           loss_value, global_count, c.bt,
           c.average_of_means ? "average of per-micro-batch means" : "global count", c.out);
  }

  free(all_desc);
  free(hg);
  free(hx);
  free(ht);
  free(norm_w);
  free(head_w);
  free(head_b);
  cl_mem bufs[] = {x, hid, dhid, dx, rstd, tgt, loss, g, w, b, grads};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) clReleaseMemObject(bufs[i]);
  ng_context_release(ng);
  clReleaseCommandQueue(q);
  clReleaseContext(cl);
  if (rd.is_sub_device) clReleaseDevice(rd.dev);
  MPI_Comm_free(&host);
  MPI_Finalize();
  return 0;
}
