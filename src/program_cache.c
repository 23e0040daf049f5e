/* Per-context program cache. A program is identified by its source name and its build options
 * (the sources themselves are fixed for a build of the library, or hashed into the key when read
 * from the development directory). A miss asks the on-disk cache (disk_cache.c) before the
 * compiler. Compilation and disk I/O happen outside the lock; when two threads build the same
 * program at once, the first insert wins and the other copy is released. */
#include "ng_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *make_key(const char *name, const ng_opts *opts, uint64_t src_hash) {
  size_t n = strlen(name) + opts->len + 32;
  char *k = malloc(n);
  if (k) snprintf(k, n, "%s\n%016llx\n%s", name, (unsigned long long)src_hash, opts->text);
  return k;
}

static cl_program lookup_locked(ng_context *ctx, const char *key) {
  for (ng_program_entry *e = ctx->programs; e; e = e->next)
    if (strcmp(e->key, key) == 0) return e->program;
  return NULL;
}

static ng_status build(ng_context *ctx, const char *name, const ng_opts *opts,
                       ng_source *src, cl_program *out) {
  cl_int e = CL_SUCCESS;
  cl_program p = clCreateProgramWithSource(ctx->cl_ctx, 2, (const char **)src->parts, src->lens, &e);
  if (!p) return ng_fail(e, "clCreateProgramWithSource(%s) failed", name);
  e = clBuildProgram(p, 1, &ctx->device, opts->text, NULL, NULL);
  if (e != CL_SUCCESS) {
    char log[700] = "";
    size_t len = 0;
    clGetProgramBuildInfo(p, ctx->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, &len);
    if (len == 0 || len > sizeof log - 1) len = strnlen(log, sizeof log - 1);
    log[len] = '\0';
    clReleaseProgram(p);
    return ng_fail(NG_ERR_BUILD_FAILED, "building %s with '%s' failed (%d): %s", name, opts->text,
                   (int)e, log);
  }
  *out = p;
  return NG_SUCCESS;
}

/* The hash of a source, computed once per context: hashing tens of kilobytes on every call was
 * most of an op's host time. (With NG_DEV_KERNEL_DIR a context keeps the sources it first saw;
 * a new context sees edits.) */
struct ng_src_hash {
  char name[32];
  uint64_t hash;
  size_t len;
  struct ng_src_hash *next;
};

static bool src_hash_lookup(ng_context *ctx, const char *name, uint64_t *h, size_t *len) {
  bool found = false;
  pthread_mutex_lock(&ctx->lock);
  for (struct ng_src_hash *e = ctx->src_hashes; e && !found; e = e->next)
    if (strcmp(e->name, name) == 0) {
      *h = e->hash;
      *len = e->len;
      found = true;
    }
  pthread_mutex_unlock(&ctx->lock);
  return found;
}

static void src_hash_store(ng_context *ctx, const char *name, uint64_t h, size_t len) {
  struct ng_src_hash *e = calloc(1, sizeof *e);
  if (!e || strlen(name) >= sizeof e->name) {
    free(e); /* not memoised: only slower */
    return;
  }
  snprintf(e->name, sizeof e->name, "%s", name);
  e->hash = h;
  e->len = len;
  pthread_mutex_lock(&ctx->lock);
  e->next = ctx->src_hashes;
  ctx->src_hashes = e;
  pthread_mutex_unlock(&ctx->lock);
}

ng_status ng_get_program(ng_context *ctx, const char *name, const ng_opts *opts,
                         cl_program *out) {
  if (opts->overflow) return ng_fail(NG_ERR_INTERNAL, "build options too long for %s", name);
  ng_source src;
  bool have_src = false;
  ng_status s = NG_SUCCESS;
  uint64_t h = 0;
  size_t src_len = 0;
  if (!src_hash_lookup(ctx, name, &h, &src_len)) {
    s = ng_source_get(name, &src);
    if (s != NG_SUCCESS) return s;
    have_src = true;
    h = 1469598103934665603ull;
    for (int i = 0; i < 2; i++) h = ng_fnv1a(h, src.parts[i], src.lens[i]);
    src_len = src.lens[0] + src.lens[1];
    src_hash_store(ctx, name, h, src_len);
  }
  char *key = make_key(name, opts, h);
  if (!key) {
    if (have_src) ng_source_free(&src);
    return ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "program key");
  }

  pthread_mutex_lock(&ctx->lock);
  cl_program hit = lookup_locked(ctx, key);
  if (hit) ctx->cache_hits++;
  pthread_mutex_unlock(&ctx->lock);
  if (hit) {
    free(key);
    if (have_src) ng_source_free(&src);
    *out = hit;
    return NG_SUCCESS;
  }

  /* Memory miss: the disk cache, else the compiler (then the disk cache keeps the result). */
  const ng_program_id id = {name, h, src_len, opts->text};
  cl_program built = ng_disk_load(ctx, &id);
  const bool from_disk = built != NULL;
  if (!from_disk) {
    if (!have_src && (s = ng_source_get(name, &src)) != NG_SUCCESS) {
      free(key);
      return s;
    }
    have_src = true;
    s = build(ctx, name, opts, &src, &built);
    if (s == NG_SUCCESS) ng_disk_store(ctx, &id, built);
  }
  if (have_src) ng_source_free(&src);
  if (s != NG_SUCCESS) {
    free(key);
    return s;
  }

  ng_program_entry *ent = malloc(sizeof *ent);
  pthread_mutex_lock(&ctx->lock);
  if (!from_disk) ctx->programs_built++;
  cl_program winner = lookup_locked(ctx, key);
  if (!winner && ent) {
    ent->key = key;
    ent->program = built;
    ent->next = ctx->programs;
    ctx->programs = ent;
    winner = built;
    ent = NULL;
    key = NULL;
    built = NULL;
  }
  pthread_mutex_unlock(&ctx->lock);
  free(ent);
  free(key);
  if (built) clReleaseProgram(built);
  if (!winner) return ng_fail(NG_ERR_HOST_OUT_OF_MEMORY, "program cache entry");
  *out = winner;
  return NG_SUCCESS;
}

ng_kernel_slot *ng_kernel_get(ng_context *ctx, cl_program prog, const char *name, cl_int *err) {
  *err = CL_SUCCESS;
  if (strlen(name) >= sizeof ((ng_kernel_slot *)0)->name) {
    *err = CL_INVALID_KERNEL_NAME;
    return NULL;
  }
  pthread_mutex_lock(&ctx->lock);
  for (ng_kernel_slot *k = ctx->kernels; k; k = k->next)
    if (k->program == prog && strcmp(k->name, name) == 0) {
      pthread_mutex_unlock(&ctx->lock);
      return k;
    }
  pthread_mutex_unlock(&ctx->lock);
  /* create outside the lock; when two threads race, the first insert wins */
  cl_kernel kern = clCreateKernel(prog, name, err);
  if (!kern) return NULL;
  ng_kernel_slot *slot = calloc(1, sizeof *slot);
  if (!slot || pthread_mutex_init(&slot->lock, NULL) != 0) {
    free(slot);
    clReleaseKernel(kern);
    *err = CL_OUT_OF_HOST_MEMORY;
    return NULL;
  }
  slot->program = prog;
  snprintf(slot->name, sizeof slot->name, "%s", name);
  slot->kernel = kern;
  pthread_mutex_lock(&ctx->lock);
  for (ng_kernel_slot *k = ctx->kernels; k; k = k->next)
    if (k->program == prog && strcmp(k->name, name) == 0) {
      pthread_mutex_unlock(&ctx->lock);
      pthread_mutex_destroy(&slot->lock);
      clReleaseKernel(slot->kernel);
      free(slot);
      return k;
    }
  slot->next = ctx->kernels;
  ctx->kernels = slot;
  pthread_mutex_unlock(&ctx->lock);
  return slot;
}

void ng_program_cache_clear(ng_context *ctx) {
  pthread_mutex_lock(&ctx->lock);
  ng_program_entry *e = ctx->programs;
  ctx->programs = NULL;
  ng_kernel_slot *ks = ctx->kernels;
  ctx->kernels = NULL;
  pthread_mutex_unlock(&ctx->lock);
  struct ng_src_hash *sh = ctx->src_hashes;
  ctx->src_hashes = NULL;
  while (sh) {
    struct ng_src_hash *next = sh->next;
    free(sh);
    sh = next;
  }
  while (ks) { /* kernels before their programs */
    ng_kernel_slot *next = ks->next;
    clReleaseKernel(ks->kernel);
    pthread_mutex_destroy(&ks->lock);
    free(ks);
    ks = next;
  }
  while (e) {
    ng_program_entry *next = e->next;
    clReleaseProgram(e->program);
    free(e->key);
    free(e);
    e = next;
  }
}
