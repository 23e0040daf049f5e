/* On-disk program cache (docs/cache.md): driver binaries of built programs, one file per
 * (device, driver, normgrad version, source, options), so a fresh process skips the compiler.
 *
 * An entry file is a fixed header, the full key text, then the binary:
 *   0  "NGPCACHE"          8 bytes
 *   8  format              u32   (NG_DISK_FORMAT)
 *   12 key length K        u32
 *   16 payload length P    u64
 *   24 FNV-1a 64 of the payload
 *   32 FNV-1a 64 of bytes 0..31 and the key
 *   40 key (K bytes, text), then the payload (P bytes)
 * integers little-endian. The file name is the FNV-1a 64 of the key; the stored key guards
 * against name collisions. Nothing from a file reaches the driver before the length, key and
 * both checksums agree: PoCL crashes on a binary it cannot parse instead of rejecting it.
 *
 * Writes go to a temporary file in the folder, are fsync'ed and renamed over the entry, so a
 * reader sees a whole old entry, a whole new one, or none, whatever other processes do. All I/O
 * happens outside the context's lock, and every failure falls back to building from source. */
#include "ng_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HDR_BYTES 40u
#define MAX_KEY_BYTES (64u << 10)
#define MAX_PAYLOAD_BYTES (1ull << 30)
#define ENTRY_SUFFIX ".ngpc"
#define TMP_PREFIX ".ngtmp-"
/* A temporary file older than this was left by a process that died mid-write. */
#define STALE_TMP_SECONDS 3600

static const char MAGIC[8] = {'N', 'G', 'P', 'C', 'A', 'C', 'H', 'E'};
#define FNV_BASIS 1469598103934665603ull

/* Per thread, so a test that sets it cannot affect another thread's contexts. */
_Thread_local int ng_disk_test_fail_stage;

/* strerror's buffer may be shared between threads (POSIX does not require it to be thread-safe);
 * strerror_r (the XSI one: _POSIX_C_SOURCE without _GNU_SOURCE) writes into the caller's. */
static const char *error_text(int err, char *buf, size_t len) {
  if (strerror_r(err, buf, len) != 0) snprintf(buf, len, "error %d", err);
  return buf;
}

/* ---- small helpers ---------------------------------------------------------------------------- */
static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static char *str_printf(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
static char *str_printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  char *s = malloc((size_t)n + 1);
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* Key values are one line each: a driver string with a line break must not forge a field. */
static void one_line(char *s) {
  for (; *s; s++)
    if (*s == '\n' || *s == '\r') *s = ' ';
}

static bool is_hex16(const char *s) {
  for (int i = 0; i < 16; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}
static bool is_entry_name(const char *n) {
  return strlen(n) == 16 + strlen(ENTRY_SUFFIX) && is_hex16(n) && strcmp(n + 16, ENTRY_SUFFIX) == 0;
}
static bool is_tmp_name(const char *n) {
  return strncmp(n, TMP_PREFIX, strlen(TMP_PREFIX)) == 0;
}

static void entry_name(const char *key, char out[32]) {
  snprintf(out, 32, "%016llx%s", (unsigned long long)ng_fnv1a(FNV_BASIS, key, strlen(key)),
           ENTRY_SUFFIX);
}

/* ---- settings --------------------------------------------------------------------------------- */
/* The folder the environment names, malloc'ed, or NULL when the cache is off. An empty
 * NORMGRAD_CACHE_DIR counts as unset; XDG_CACHE_HOME must be absolute (XDG spec). */
static char *env_dir(void) {
  const char *v = getenv("NORMGRAD_CACHE_DIR");
  if (v && *v) return strcasecmp(v, "off") == 0 ? NULL : str_printf("%s", v);
  const char *x = getenv("XDG_CACHE_HOME");
  if (x && x[0] == '/') return str_printf("%s/normgrad", x);
  const char *h = getenv("HOME");
  if (h && *h) return str_printf("%s/.cache/normgrad", h);
  return NULL;
}

/* "536870912", "512M", "1g", "64KiB"; anything else (or nothing) gives the default. */
static uint64_t env_max_bytes(void) {
  const char *v = getenv("NORMGRAD_CACHE_MAX_BYTES");
  if (!v || *v < '0' || *v > '9') return NG_CACHE_DEFAULT_MAX_BYTES; /* no sign, no space */
  char *end = NULL;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno) return NG_CACHE_DEFAULT_MAX_BYTES;
  unsigned shift = 0;
  switch (*end) {
  case 'k': case 'K': shift = 10; end++; break;
  case 'm': case 'M': shift = 20; end++; break;
  case 'g': case 'G': shift = 30; end++; break;
  case 't': case 'T': shift = 40; end++; break;
  default: break;
  }
  if (shift && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end != '\0' || (shift && n > (UINT64_MAX >> shift))) return NG_CACHE_DEFAULT_MAX_BYTES;
  return (uint64_t)n << shift;
}

void ng_disk_cache_init(ng_context *ctx) {
  ng_disk_cache *d = &ctx->disk;
  memset(d, 0, sizeof *d);
  d->dir = env_dir();
  d->max_bytes = env_max_bytes();
  char pver[512] = "", dver[512] = "";
  cl_platform_id plat = NULL;
  if (clGetDeviceInfo(ctx->device, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL) == CL_SUCCESS &&
      plat)
    clGetPlatformInfo(plat, CL_PLATFORM_VERSION, sizeof pver - 1, pver, NULL);
  clGetDeviceInfo(ctx->device, CL_DEVICE_VERSION, sizeof dver - 1, dver, NULL);
  ng_device_info in = ctx->info;
  char *vals[] = {in.platform, pver, in.name, dver, in.vendor, in.driver};
  for (size_t i = 0; i < NG_ARRAY_LEN(vals); i++) one_line(vals[i]);
  d->device_key = str_printf("format: %u\nplatform: %s\nplatform-version: %s\ndevice: %s\n"
                             "device-version: %s\nvendor: %s\ndriver: %s\nnormgrad: %s\n",
                             NG_DISK_FORMAT, in.platform, pver, in.name, dver, in.vendor,
                             in.driver, NG_VERSION_STRING);
  if (!d->device_key) { /* without a key nothing can be stored or found */
    free(d->dir);
    d->dir = NULL;
  }
}

void ng_disk_cache_free(ng_context *ctx) {
  free(ctx->disk.dir);
  free(ctx->disk.device_key);
  memset(&ctx->disk, 0, sizeof ctx->disk);
}

ng_status ng_context_set_cache_dir(ng_context *ctx, const char *dir) {
  ng_clear_detail();
  if (!ctx) return ng_fail(NG_ERR_NULL_HANDLE, "ctx is NULL");
  if (dir && !*dir) return ng_fail(NG_ERR_INVALID_VALUE, "cache folder is \"\" (NULL turns it off)");
  char *copy = NULL;
  if (dir && !(copy = str_printf("%s", dir)))
    return ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "cache folder name");
  pthread_mutex_lock(&ctx->lock);
  char *old = ctx->disk.dir;
  ctx->disk.dir = ctx->disk.device_key ? copy : NULL;
  pthread_mutex_unlock(&ctx->lock);
  if (!ctx->disk.device_key) free(copy);
  free(old);
  return NG_SUCCESS;
}

ng_status ng_context_get_cache_dir(const ng_context *ctx, char *buf, size_t len) {
  ng_clear_detail();
  if (!ctx || !buf) return ng_fail(NG_ERR_NULL_HANDLE, "ctx or buf is NULL");
  ng_context *c = (ng_context *)ctx; /* the lock is not part of the logical state */
  ng_status s = NG_SUCCESS;
  pthread_mutex_lock(&c->lock);
  const char *d = c->disk.dir ? c->disk.dir : "";
  if (strlen(d) < len) memcpy(buf, d, strlen(d) + 1);
  else s = NG_ERR_INVALID_VALUE;
  pthread_mutex_unlock(&c->lock);
  if (s != NG_SUCCESS) return ng_fail(s, "buffer of %zu bytes too small for the folder name", len);
  return NG_SUCCESS;
}

ng_status ng_context_set_cache_max_bytes(ng_context *ctx, uint64_t max_bytes) {
  ng_clear_detail();
  if (!ctx) return ng_fail(NG_ERR_NULL_HANDLE, "ctx is NULL");
  pthread_mutex_lock(&ctx->lock);
  ctx->disk.max_bytes = max_bytes;
  pthread_mutex_unlock(&ctx->lock);
  return NG_SUCCESS;
}

ng_status ng_cache_default_dir(char *buf, size_t len) {
  ng_clear_detail();
  if (!buf) return ng_fail(NG_ERR_NULL_HANDLE, "buf is NULL");
  char *d = env_dir();
  const char *s = d ? d : "";
  ng_status st = NG_SUCCESS;
  if (strlen(s) < len) memcpy(buf, s, strlen(s) + 1);
  else st = ng_fail(NG_ERR_INVALID_VALUE, "buffer of %zu bytes too small for the folder name", len);
  free(d);
  return st;
}

/* The context's folder (copied, so a concurrent ng_context_set_cache_dir cannot free it under
 * us) and bound; NULL when off. */
static char *snapshot(ng_context *ctx, uint64_t *max_bytes) {
  pthread_mutex_lock(&ctx->lock);
  char *d = ctx->disk.dir ? str_printf("%s", ctx->disk.dir) : NULL;
  if (max_bytes) *max_bytes = ctx->disk.max_bytes;
  pthread_mutex_unlock(&ctx->lock);
  return d;
}

static char *full_key(const ng_context *ctx, const ng_program_id *id) {
  char *k = str_printf("%sprogram: %s\nsource: %016llx %zu\noptions: %s\n", ctx->disk.device_key,
                       id->name, (unsigned long long)id->src_hash, id->src_len, id->options);
  return k;
}

/* ---- entry encoding --------------------------------------------------------------------------- */
unsigned char *ng_disk_encode(uint32_t format, const char *key, const void *payload, size_t len,
                              size_t *out_len) {
  const size_t klen = strlen(key);
  if (klen > MAX_KEY_BYTES || len > MAX_PAYLOAD_BYTES) return NULL;
  const size_t total = HDR_BYTES + klen + len;
  unsigned char *b = malloc(total);
  if (!b) return NULL;
  memcpy(b, MAGIC, 8);
  put_u32(b + 8, format);
  put_u32(b + 12, (uint32_t)klen);
  put_u64(b + 16, len);
  put_u64(b + 24, ng_fnv1a(FNV_BASIS, payload, len));
  memcpy(b + HDR_BYTES, key, klen);
  uint64_t h = ng_fnv1a(FNV_BASIS, b, 32);
  put_u64(b + 32, ng_fnv1a(h, key, klen));
  memcpy(b + HDR_BYTES + klen, payload, len);
  *out_len = total;
  return b;
}

/* Check a whole entry file's bytes. On success, key and payload point into `b`. */
static bool decode(const unsigned char *b, size_t n, const char **key, size_t *klen,
                   const unsigned char **payload, size_t *plen) {
  if (n < HDR_BYTES || memcmp(b, MAGIC, 8) != 0 || get_u32(b + 8) != NG_DISK_FORMAT) return false;
  const uint64_t kl = get_u32(b + 12), pl = get_u64(b + 16);
  if (kl > MAX_KEY_BYTES || pl == 0 || pl > MAX_PAYLOAD_BYTES || n != HDR_BYTES + kl + pl)
    return false;
  uint64_t h = ng_fnv1a(FNV_BASIS, b, 32);
  if (ng_fnv1a(h, b + HDR_BYTES, kl) != get_u64(b + 32)) return false;
  if (ng_fnv1a(FNV_BASIS, b + HDR_BYTES + kl, pl) != get_u64(b + 24)) return false;
  *key = (const char *)b + HDR_BYTES;
  *klen = kl;
  *payload = b + HDR_BYTES + kl;
  *plen = pl;
  return true;
}

/* ---- file I/O ----------------------------------------------------------------------------------- */
enum { RD_OK, RD_MISS, RD_REJECT, RD_ERROR };

bool ng_file_private(const struct stat *st) {
  return S_ISREG(st->st_mode) && st->st_uid == geteuid() && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

/* Read a whole regular file that this user owns and nobody else may write (a binary from the
 * cache runs as code on the device). */
static int read_all(int fd, const struct stat *st, unsigned char **out, size_t *n) {
  if (!ng_file_private(st)) return RD_REJECT;
  if (st->st_size < (off_t)HDR_BYTES ||
      (uint64_t)st->st_size > HDR_BYTES + MAX_KEY_BYTES + MAX_PAYLOAD_BYTES)
    return RD_REJECT;
  const size_t size = (size_t)st->st_size;
  unsigned char *b = malloc(size);
  if (!b) return RD_ERROR;
  size_t got = 0;
  while (got < size) {
    ssize_t r = pread(fd, b + got, size - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (got != size) {
    free(b);
    return RD_REJECT; /* shrank while we read: another cause truncated it */
  }
  *out = b;
  *n = size;
  return RD_OK;
}

static int open_entry(const char *path, int *fd, struct stat *st) {
  *fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (*fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return RD_MISS;
    return errno == ELOOP ? RD_REJECT : RD_ERROR;
  }
  if (fstat(*fd, st) != 0) {
    close(*fd);
    *fd = -1;
    return RD_ERROR;
  }
  return RD_OK;
}

static bool write_all(int fd, const unsigned char *b, size_t n) {
  while (n) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    b += w;
    n -= (size_t)w;
  }
  return true;
}

/* mkdir -p, new folders private to the user. */
static bool make_dirs(const char *dir) {
  char *p = str_printf("%s", dir);
  if (!p) return false;
  bool ok = true;
  for (char *c = p + 1; ok; c++) {
    if (*c != '/' && *c != '\0') continue;
    const char saved = *c;
    *c = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST) ok = false;
    *c = saved;
    if (saved == '\0') break;
  }
  free(p);
  return ok;
}

/* ---- load -------------------------------------------------------------------------------------- */
static cl_program from_binary(ng_context *ctx, const char *options, const unsigned char *bin,
                              size_t len) {
  if (ng_disk_test_fail_stage == 1) return NULL;
  cl_int bs = CL_SUCCESS, e = CL_SUCCESS;
  cl_program p = clCreateProgramWithBinary(ctx->cl_ctx, 1, &ctx->device, &len, &bin, &bs, &e);
  if (!p) return NULL;
  if (e != CL_SUCCESS || bs != CL_SUCCESS) {
    clReleaseProgram(p);
    return NULL;
  }
  /* A program from a binary still needs clBuildProgram, with the same options. */
  e = clBuildProgram(p, 1, &ctx->device, options, NULL, NULL);
  if (ng_disk_test_fail_stage == 2) e = CL_BUILD_PROGRAM_FAILURE;
  if (e != CL_SUCCESS) {
    clReleaseProgram(p);
    return NULL;
  }
  return p;
}

static void count(ng_context *ctx, int outcome) {
  pthread_mutex_lock(&ctx->lock);
  switch (outcome) {
  case RD_OK: ctx->disk_hits++; break;
  case RD_MISS: ctx->disk.misses++; break;
  case RD_REJECT: ctx->disk.rejects++; break;
  default: ctx->disk.errors++; ctx->disk.misses++; break;
  }
  pthread_mutex_unlock(&ctx->lock);
}

cl_program ng_disk_load(ng_context *ctx, const ng_program_id *id) {
  char *dir = snapshot(ctx, NULL);
  if (!dir) return NULL;
  char *key = full_key(ctx, id);
  char name[32];
  char *path = NULL;
  if (key) {
    entry_name(key, name);
    path = str_printf("%s/%s", dir, name);
  }
  free(dir);
  if (!path) {
    free(key);
    count(ctx, RD_ERROR);
    return NULL;
  }
  cl_program prog = NULL;
  int fd = -1;
  struct stat st;
  unsigned char *b = NULL;
  size_t n = 0;
  int outcome = open_entry(path, &fd, &st);
  if (outcome == RD_OK) outcome = read_all(fd, &st, &b, &n);
  if (outcome == RD_OK) {
    const char *k;
    const unsigned char *payload;
    size_t klen, plen;
    if (!decode(b, n, &k, &klen, &payload, &plen) || klen != strlen(key) ||
        memcmp(k, key, klen) != 0)
      outcome = RD_REJECT;
    else if (!(prog = from_binary(ctx, id->options, payload, plen)))
      outcome = RD_REJECT;
    else
      futimens(fd, NULL); /* recently used: last in line for eviction */
  }
  if (fd >= 0) close(fd);
  free(b);
  free(path);
  free(key);
  count(ctx, outcome);
  return prog;
}

/* ---- store and eviction ------------------------------------------------------------------------ */
typedef struct file_use {
  char name[40];
  uint64_t bytes;
  struct timespec mtime;
} file_use;

static int older_first(const void *a, const void *b) {
  const file_use *x = a, *y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Remove temporary files left by dead writers, then the least recently used entries until the
 * folder's entries fit in max_bytes (0 = no bound). Only names this cache writes are touched. */
static void evict(const char *dir, uint64_t max_bytes) {
  DIR *d = opendir(dir);
  if (!d) return;
  const int dfd = dirfd(d);
  file_use *files = NULL;
  size_t count_ = 0, cap = 0;
  uint64_t total = 0;
  const time_t now = time(NULL);
  for (struct dirent *de; (de = readdir(d));) {
    const bool entry = is_entry_name(de->d_name), tmp = !entry && is_tmp_name(de->d_name);
    struct stat st;
    if ((!entry && !tmp) || strlen(de->d_name) >= sizeof files->name ||
        fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (tmp && now - st.st_mtim.tv_sec > STALE_TMP_SECONDS) {
      unlinkat(dfd, de->d_name, 0);
      continue;
    }
    total += (uint64_t)st.st_size;
    if (!entry) continue; /* a write in progress counts, but is not ours to remove */
    if (count_ == cap) {
      size_t nc = cap ? cap * 2 : 64;
      file_use *nf = realloc(files, nc * sizeof *nf);
      if (!nf) break;
      files = nf;
      cap = nc;
    }
    /* the length was checked above; the precision tells -O0 builds' -Wformat-truncation so */
    snprintf(files[count_].name, sizeof files[count_].name, "%.*s",
             (int)sizeof files[count_].name - 1, de->d_name);
    files[count_].bytes = (uint64_t)st.st_size;
    files[count_].mtime = st.st_mtim;
    count_++;
  }
  if (max_bytes && total > max_bytes && count_) {
    qsort(files, count_, sizeof *files, older_first);
    for (size_t i = 0; i < count_ && total > max_bytes; i++)
      if (unlinkat(dfd, files[i].name, 0) == 0 || errno == ENOENT) total -= files[i].bytes;
  }
  free(files);
  closedir(d);
}

/* Write `bytes` as dir/name through a temporary file and a rename. */
static bool write_entry(const char *dir, const char *name, const unsigned char *bytes, size_t n) {
  if (!make_dirs(dir)) return false;
  char *tmp = str_printf("%s/" TMP_PREFIX "%.16s-XXXXXX", dir, name);
  char *path = str_printf("%s/%s", dir, name);
  bool ok = tmp && path;
  int fd = ok ? mkstemp(tmp) : -1;
  if (fd < 0) ok = false;
  if (ok) {
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    ok = write_all(fd, bytes, n) && fsync(fd) == 0;
    if (close(fd) != 0) ok = false;
    if (ok) ok = rename(tmp, path) == 0;
    if (!ok) unlink(tmp);
  }
  free(tmp);
  free(path);
  return ok;
}

/* The binary of `prog` for the context's device, malloc'ed (NULL when there is none). A program
 * belongs to every device of its cl_context, so the binaries come as an array over them. */
static unsigned char *program_binary(const ng_context *ctx, cl_program prog, size_t *len) {
  cl_uint ndev = 0;
  if (clGetProgramInfo(prog, CL_PROGRAM_NUM_DEVICES, sizeof ndev, &ndev, NULL) != CL_SUCCESS ||
      ndev == 0 || ndev > 1024)
    return NULL;
  cl_device_id *devs = calloc(ndev, sizeof *devs);
  size_t *sizes = calloc(ndev, sizeof *sizes);
  unsigned char **ptrs = calloc(ndev, sizeof *ptrs);
  unsigned char *bin = NULL;
  cl_uint me = ndev;
  const bool listed =
      devs && sizes && ptrs &&
      clGetProgramInfo(prog, CL_PROGRAM_DEVICES, ndev * sizeof *devs, devs, NULL) == CL_SUCCESS &&
      clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, ndev * sizeof *sizes, sizes, NULL) ==
          CL_SUCCESS;
  /* The context's device, or else its nearest ancestor in the list: PoCL lists the root device
   * for a program of a sub-device's context (the binary is the same). */
  for (cl_device_id d = ctx->device; listed && d && me == ndev;) {
    for (cl_uint i = 0; i < ndev && me == ndev; i++)
      if (devs[i] == d) me = i;
    cl_device_id parent = NULL;
    if (clGetDeviceInfo(d, CL_DEVICE_PARENT_DEVICE, sizeof parent, &parent, NULL) != CL_SUCCESS)
      parent = NULL;
    d = parent;
  }
  if (me < ndev && sizes[me] > 0 && sizes[me] <= MAX_PAYLOAD_BYTES &&
      (bin = malloc(sizes[me]))) {
    ptrs[me] = bin; /* NULL entries: the other devices' binaries are not copied */
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, ndev * sizeof *ptrs, ptrs, NULL) ==
        CL_SUCCESS) {
      *len = sizes[me];
    } else {
      free(bin);
      bin = NULL;
    }
  }
  free(devs);
  free(sizes);
  free(ptrs);
  return bin;
}

void ng_disk_store(ng_context *ctx, const ng_program_id *id, cl_program prog) {
  uint64_t max_bytes = 0;
  char *dir = snapshot(ctx, &max_bytes);
  if (!dir) return;
  bool ok = false;
  char *key = full_key(ctx, id);
  size_t len = 0, flen = 0;
  unsigned char *bin = key ? program_binary(ctx, prog, &len) : NULL;
  unsigned char *file = bin ? ng_disk_encode(NG_DISK_FORMAT, key, bin, len, &flen) : NULL;
  if (file) {
    char name[32];
    entry_name(key, name);
    ok = write_entry(dir, name, file, flen);
  }
  pthread_mutex_lock(&ctx->lock);
  if (ok) ctx->disk.stores++;
  else ctx->disk.errors++;
  pthread_mutex_unlock(&ctx->lock);
  if (ok) evict(dir, max_bytes);
  free(file);
  free(bin);
  free(key);
  free(dir);
}

/* ---- listing and clearing (ng_cache_list, ng_cache_clear) --------------------------------------- */
typedef struct listed {
  ng_cache_entry e;
  char *path, *key;
  struct timespec mtime;
  char *fields[6]; /* program, options, device, driver, platform, normgrad */
} listed;

/* The value of "field: value" in key text, malloc'ed ("" when absent). */
static char *key_field(const char *key, const char *field) {
  const size_t fl = strlen(field);
  for (const char *line = key; line && *line;) {
    const char *nl = strchr(line, '\n');
    const size_t ll = nl ? (size_t)(nl - line) : strlen(line);
    if (ll > fl + 1 && strncmp(line, field, fl) == 0 && line[fl] == ':' && line[fl + 1] == ' ')
      return str_printf("%.*s", (int)(ll - fl - 2), line + fl + 2);
    line = nl ? nl + 1 : NULL;
  }
  return str_printf("%s", "");
}

static int newer_first(const void *a, const void *b) {
  const listed *x = a, *y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec > y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec > y->mtime.tv_nsec ? -1 : 1;
  return strcmp(x->path, y->path);
}

static ng_status resolve_dir(const char *dir, char **out) {
  *out = dir ? str_printf("%s", dir) : env_dir();
  if (dir && !*out) return ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "folder name");
  if (!*out)
    return ng_fail(NG_ERR_INVALID_VALUE,
                   "the disk cache is off (NORMGRAD_CACHE_DIR=off, or no HOME to put it in)");
  return NG_SUCCESS;
}

static void fill_entry(listed *l, const char *name) {
  int fd = -1;
  struct stat st;
  unsigned char *b = NULL;
  size_t n = 0;
  int outcome = open_entry(l->path, &fd, &st);
  if (outcome == RD_OK) {
    l->e.bytes = (uint64_t)st.st_size;
    l->mtime = st.st_mtim;
    l->e.last_used = (int64_t)st.st_mtim.tv_sec;
    outcome = read_all(fd, &st, &b, &n);
  }
  if (fd >= 0) close(fd);
  const char *k = NULL;
  const unsigned char *payload;
  size_t klen = 0, plen;
  if (outcome == RD_OK && decode(b, n, &k, &klen, &payload, &plen)) {
    l->key = str_printf("%.*s", (int)klen, k);
    char want[32];
    if (l->key) {
      entry_name(l->key, want);
      l->e.valid = strcmp(want, name) == 0; /* a renamed file would never be found */
    }
  }
  static const char *const names[6] = {"program", "options", "device",
                                        "driver",  "platform", "normgrad"};
  for (int i = 0; i < 6; i++) l->fields[i] = key_field(l->key ? l->key : "", names[i]);
  l->e.path = l->path;
  l->e.program = l->fields[0] ? l->fields[0] : "";
  l->e.options = l->fields[1] ? l->fields[1] : "";
  l->e.device = l->fields[2] ? l->fields[2] : "";
  l->e.driver = l->fields[3] ? l->fields[3] : "";
  l->e.platform = l->fields[4] ? l->fields[4] : "";
  l->e.normgrad = l->fields[5] ? l->fields[5] : "";
  free(b);
}

ng_status ng_cache_list(const char *dir, ng_cache_visit_fn visit, void *user) {
  ng_clear_detail();
  if (!visit) return ng_fail(NG_ERR_NULL_HANDLE, "visit is NULL");
  char *d = NULL;
  ng_status s = resolve_dir(dir, &d);
  if (s != NG_SUCCESS) return s;
  DIR *dh = opendir(d);
  if (!dh) {
    const int err = errno;
    char msg[128];
    s = err == ENOENT
            ? NG_SUCCESS
            : ng_fail(NG_ERR_IO, "cannot read %s: %s", d, error_text(err, msg, sizeof msg));
    free(d);
    return s;
  }
  listed *ls = NULL;
  size_t n = 0, cap = 0;
  for (struct dirent *de; (de = readdir(dh));) {
    if (!is_entry_name(de->d_name)) continue;
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 64;
      listed *nl = realloc(ls, nc * sizeof *nl);
      if (!nl) {
        s = ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "cache listing");
        break;
      }
      ls = nl;
      cap = nc;
    }
    listed *l = &ls[n++];
    memset(l, 0, sizeof *l);
    l->path = str_printf("%s/%s", d, de->d_name);
    if (!l->path) {
      n--;
      s = ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "cache listing");
      break;
    }
    fill_entry(l, de->d_name);
  }
  closedir(dh);
  if (s == NG_SUCCESS) {
    if (n) qsort(ls, n, sizeof *ls, newer_first);
    for (size_t i = 0; i < n; i++)
      if (visit(&ls[i].e, user) != 0) break;
  }
  for (size_t i = 0; i < n; i++) {
    free(ls[i].path);
    free(ls[i].key);
    for (int j = 0; j < 6; j++) free(ls[i].fields[j]);
  }
  free(ls);
  free(d);
  return s;
}

ng_status ng_cache_clear(const char *dir, uint64_t *removed) {
  ng_clear_detail();
  if (removed) *removed = 0;
  char *d = NULL;
  ng_status s = resolve_dir(dir, &d);
  if (s != NG_SUCCESS) return s;
  DIR *dh = opendir(d);
  if (!dh) {
    const int err = errno;
    char msg[128];
    s = err == ENOENT
            ? NG_SUCCESS
            : ng_fail(NG_ERR_IO, "cannot read %s: %s", d, error_text(err, msg, sizeof msg));
    free(d);
    return s;
  }
  const int dfd = dirfd(dh);
  uint64_t gone = 0;
  for (struct dirent *de; (de = readdir(dh));) {
    if (!is_entry_name(de->d_name) && !is_tmp_name(de->d_name)) continue;
    char msg[128];
    if (unlinkat(dfd, de->d_name, 0) == 0) gone++;
    else if (errno != ENOENT && s == NG_SUCCESS)
      s = ng_fail(NG_ERR_IO, "cannot remove %s/%s: %s", d, de->d_name,
                  error_text(errno, msg, sizeof msg));
  }
  closedir(dh);
  free(d);
  if (removed) *removed = gone;
  return s;
}
