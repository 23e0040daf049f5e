/* safetensors reader and writer.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON
 *   {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, …,
 *    "__metadata__": {"key": "value", …}}
 * then the data section; offsets are relative to its start. The reader trusts nothing in the
 * file: every count is checked against the file size before it is used, and all arithmetic on
 * file-supplied numbers is overflow-checked. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* The reference implementation refuses headers above 100 MB; so do we (it also bounds what a
 * hostile length field can make us allocate). */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
/* Integers above 2^53 cannot be represented exactly by cJSON's double: the reader refuses them
 * and the writer does not write them. */
#define ST_MAX_INT ((uint64_t)1 << 53)

static int fail(char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && errlen) vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return CLI_USAGE;
}

typedef struct st_entry {
  const char *name; /* points into the cJSON tree */
  ng_dtype dtype;
  int ndim;
  int64_t shape[CLI_MAX_DIMS];
  uint64_t begin, end;
} st_entry;

static bool json_uint(const cJSON *v, uint64_t *out) {
  if (!cJSON_IsNumber(v)) return false;
  double d = v->valuedouble;
  if (!(d >= 0.0) || d > (double)ST_MAX_INT || d != (double)(uint64_t)d) return false;
  *out = (uint64_t)d;
  return true;
}

static int cmp_str_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_entry_offset(const void *a, const void *b) {
  const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int parse_entry(const cJSON *item, st_entry *e, uint64_t data_len, char *err,
                       size_t errlen) {
  const char *nm = item->string;
  if (strlen(nm) >= sizeof ((cli_tensor *)0)->name)
    return fail(err, errlen, "tensor name '%.40s…' is longer than %zu bytes", nm,
                sizeof ((cli_tensor *)0)->name - 1);
  if (!cJSON_IsObject(item))
    return fail(err, errlen, "entry '%s' is not a JSON object", nm);
  e->name = nm;

  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
  if (!cJSON_IsString(dt)) return fail(err, errlen, "tensor '%s': \"dtype\" missing or not a string", nm);
  if (cli_st_dtype_parse(dt->valuestring, &e->dtype) != 0)
    return fail(err, errlen,
                "tensor '%s': unsupported dtype '%s' (supported: F32, F16, BF16, I32, I64)", nm,
                dt->valuestring);

  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
  if (!cJSON_IsArray(sh)) return fail(err, errlen, "tensor '%s': \"shape\" missing or not an array", nm);
  int nd = cJSON_GetArraySize(sh);
  if (nd > CLI_MAX_DIMS)
    return fail(err, errlen, "tensor '%s': %d dims, at most %d are supported", nm, nd,
                CLI_MAX_DIMS);
  e->ndim = nd;
  int d = 0;
  for (const cJSON *v = sh->child; v; v = v->next, d++) {
    uint64_t u;
    if (!json_uint(v, &u))
      return fail(err, errlen, "tensor '%s': shape entry %d is not a non-negative integer", nm,
                  d);
    e->shape[d] = (int64_t)u;
  }

  const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(off->child, &e->begin) ||
      !json_uint(off->child->next, &e->end))
    return fail(err, errlen,
                "tensor '%s': \"data_offsets\" must be [begin, end] with non-negative integers",
                nm);
  if (e->end < e->begin)
    return fail(err, errlen, "tensor '%s': data_offsets [%llu, %llu] end before begin", nm,
                (unsigned long long)e->begin, (unsigned long long)e->end);

  size_t bytes = 0;
  if (cli_shape_numel(e->ndim, e->shape, ng_dtype_size(e->dtype), &bytes) != 0)
    return fail(err, errlen, "tensor '%s': the shape's byte size overflows", nm);
  if ((uint64_t)bytes != e->end - e->begin)
    return fail(err, errlen,
                "tensor '%s': data_offsets span %llu bytes but shape and dtype %s need %zu bytes",
                nm, (unsigned long long)(e->end - e->begin), dt->valuestring, bytes);
  if (e->end > data_len)
    return fail(err, errlen,
                "tensor '%s': data_offsets [%llu, %llu] lie outside the data section (%llu "
                "bytes)",
                nm, (unsigned long long)e->begin, (unsigned long long)e->end,
                (unsigned long long)data_len);
  return CLI_OK;
}

/* Parse and check the header. On success *root owns the JSON tree that entry names point into;
 * the caller frees both. */
static int parse_header(const char *json, size_t hlen, uint64_t data_len, cJSON **root,
                        st_entry **entries, size_t *count, char *err, size_t errlen) {
  *root = NULL;
  *entries = NULL;
  *count = 0;
  const char *end = NULL;
  cJSON *r = cJSON_ParseWithLengthOpts(json, hlen, &end, 0);
  if (!r) {
    const char *at = cJSON_GetErrorPtr();
    size_t pos = at && at >= json && at <= json + hlen ? (size_t)(at - json) : 0;
    return fail(err, errlen, "the header is not valid JSON (error near header byte %zu)", pos);
  }
  /* Only padding may follow the JSON value. */
  for (const char *p = end; p < json + hlen; p++)
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      cJSON_Delete(r);
      return fail(err, errlen,
                  "the header is not valid JSON (unexpected data at header byte %zu)",
                  (size_t)(p - json));
    }
  int rc = CLI_OK;
  if (!cJSON_IsObject(r)) rc = fail(err, errlen, "the header is not a JSON object");

  size_t n = 0, nmeta = 0;
  for (const cJSON *it = rc ? NULL : r->child; it; it = it->next) n++;
  st_entry *ents = calloc(n ? n : 1, sizeof *ents);
  const char **names = calloc(n ? n : 1, sizeof *names);
  const st_entry **order = calloc(n ? n : 1, sizeof *order);
  if (!rc && (!ents || !names || !order)) rc = fail(err, errlen, "out of host memory");

  size_t k = 0, idx = 0;
  for (const cJSON *it = rc ? NULL : r->child; it && !rc; it = it->next) {
    names[idx++] = it->string;
    if (strcmp(it->string, "__metadata__") == 0) {
      if (++nmeta > 1) {
        rc = fail(err, errlen, "duplicate \"__metadata__\" entry in the header");
        break;
      }
      if (!cJSON_IsObject(it)) {
        rc = fail(err, errlen, "\"__metadata__\" is not a JSON object");
        break;
      }
      for (const cJSON *m = it->child; m; m = m->next)
        if (!cJSON_IsString(m)) {
          rc = fail(err, errlen, "\"__metadata__\" value '%s' is not a string", m->string);
          break;
        }
      continue;
    }
    rc = parse_entry(it, &ents[k], data_len, err, errlen);
    if (!rc) k++;
  }
  if (!rc) {
    /* cJSON keeps duplicate keys; a second tensor of the same name must not be dropped or win
     * silently. */
    qsort((void *)names, n, sizeof *names, cmp_str_ptr);
    for (size_t i = 1; i < n && !rc; i++)
      if (strcmp(names[i - 1], names[i]) == 0)
        rc = fail(err, errlen, "duplicate tensor name '%s' in the header", names[i]);
  }
  if (!rc) {
    for (size_t i = 0; i < k; i++) order[i] = &ents[i];
    qsort(order, k, sizeof *order, cmp_entry_offset);
    uint64_t reach = 0;
    const st_entry *last = NULL;
    for (size_t i = 0; i < k && !rc; i++) {
      if (order[i]->begin < reach && order[i]->end > order[i]->begin)
        rc = fail(err, errlen, "tensors '%s' and '%s' overlap in the data section", last->name,
                  order[i]->name);
      if (order[i]->end > reach) {
        reach = order[i]->end;
        last = order[i];
      }
    }
  }
  free((void *)names);
  free((void *)order);
  if (rc) {
    free(ents);
    cJSON_Delete(r);
    return rc;
  }
  *root = r;
  *entries = ents;
  *count = k;
  return CLI_OK;
}

static uint64_t le64(const unsigned char *b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | b[i];
  return v;
}

static int check_lengths(uint64_t file_size, uint64_t hlen, char *err, size_t errlen) {
  if (hlen > ST_MAX_HEADER)
    return fail(err, errlen,
                "header length %llu is absurdly large (limit %llu bytes): not a safetensors file?",
                (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
  if (hlen > file_size - 8)
    return fail(err, errlen, "header length %llu runs past the end of the file (%llu bytes)",
                (unsigned long long)hlen, (unsigned long long)file_size);
  if (hlen < 2) return fail(err, errlen, "header length %llu is too small for a JSON object",
                            (unsigned long long)hlen);
  return CLI_OK;
}

/* Move every tensor of src to the end of dst (src is emptied). */
static int append_all(cli_tensors *dst, cli_tensors *src) {
  if (dst->count + src->count > dst->cap) {
    size_t cap = dst->count + src->count;
    cli_tensor *items = realloc(dst->items, (cap ? cap : 1) * sizeof *items);
    if (!items) return -1;
    dst->items = items;
    dst->cap = cap;
  }
  if (src->count) memcpy(dst->items + dst->count, src->items, src->count * sizeof *src->items);
  dst->count += src->count;
  free(src->items);
  src->items = NULL;
  src->count = src->cap = 0;
  return 0;
}

int cli_st_parse(const void *buf, size_t len, cli_tensors *out, char *err, size_t errlen) {
  const unsigned char *b = buf;
  if (len < 8)
    return fail(err, errlen, "file is %zu bytes, shorter than the 8-byte header length", len);
  uint64_t hlen = le64(b);
  int rc = check_lengths(len, hlen, err, errlen);
  if (rc) return rc;
  cJSON *root;
  st_entry *ents;
  size_t n;
  const uint64_t data_len = len - 8 - hlen;
  rc = parse_header((const char *)b + 8, (size_t)hlen, data_len, &root, &ents, &n, err, errlen);
  if (rc) return rc;
  cli_tensors tmp = {0};
  const unsigned char *data = b + 8 + hlen;
  for (size_t i = 0; i < n && !rc; i++)
    if (cli_tensors_add(&tmp, ents[i].name, ents[i].dtype, ents[i].ndim, ents[i].shape,
                        data + ents[i].begin) != 0)
      rc = fail(err, errlen, "out of host memory reading tensor '%s'", ents[i].name);
  if (!rc && append_all(out, &tmp) != 0) rc = fail(err, errlen, "out of host memory");
  cli_tensors_free(&tmp);
  free(ents);
  cJSON_Delete(root);
  return rc;
}

static int read_exact(FILE *f, void *dst, size_t n) { return fread(dst, 1, n, f) == n ? 0 : -1; }

int cli_st_read(const char *path, cli_tensors *out, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) return fail(err, errlen, "cannot open '%s': %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return fail(err, errlen, "'%s' is not a regular file", path);
  }
  const uint64_t size = (uint64_t)st.st_size;
  unsigned char lenb[8];
  int rc = CLI_OK;
  char *hdr = NULL;
  cJSON *root = NULL;
  st_entry *ents = NULL;
  size_t n = 0;
  cli_tensors tmp = {0};
  if (size < 8) {
    rc = fail(err, errlen, "'%s': file is %llu bytes, shorter than the 8-byte header length",
              path, (unsigned long long)size);
    goto done;
  }
  if (read_exact(f, lenb, 8) != 0) {
    rc = fail(err, errlen, "'%s': read error", path);
    goto done;
  }
  uint64_t hlen = le64(lenb);
  char sub[512];
  if ((rc = check_lengths(size, hlen, sub, sizeof sub)) != 0) {
    fail(err, errlen, "'%s': %s", path, sub);
    goto done;
  }
  hdr = malloc((size_t)hlen);
  if (!hdr || read_exact(f, hdr, (size_t)hlen) != 0) {
    rc = fail(err, errlen, "'%s': cannot read the %llu-byte header", path,
              (unsigned long long)hlen);
    goto done;
  }
  if ((rc = parse_header(hdr, (size_t)hlen, size - 8 - hlen, &root, &ents, &n, sub,
                         sizeof sub)) != 0) {
    fail(err, errlen, "'%s': %s", path, sub);
    goto done;
  }
  for (size_t i = 0; i < n && !rc; i++) {
    if (cli_tensors_add(&tmp, ents[i].name, ents[i].dtype, ents[i].ndim, ents[i].shape, NULL)) {
      rc = fail(err, errlen, "'%s': out of host memory for tensor '%s'", path, ents[i].name);
      break;
    }
    cli_tensor *t = &tmp.items[tmp.count - 1];
    if (t->nbytes && (fseeko(f, (off_t)(8 + hlen + ents[i].begin), SEEK_SET) != 0 ||
                      read_exact(f, t->data, t->nbytes) != 0))
      rc = fail(err, errlen, "'%s': read error in tensor '%s'", path, ents[i].name);
  }
  if (!rc && append_all(out, &tmp) != 0) rc = fail(err, errlen, "out of host memory");
done:
  cli_tensors_free(&tmp);
  free(ents);
  cJSON_Delete(root);
  free(hdr);
  fclose(f);
  return rc;
}

/* ---- writer ------------------------------------------------------------------------------------ */
/* An integer as JSON text, exactly: cJSON prints a number with 15 significant digits whenever
 * they come within a relative DBL_EPSILON of it, so 2^53 went out as 9.00719925474099e+15 and
 * came back 2 less (the fuzz target found it). */
static cJSON *json_uint_item(uint64_t u) {
  char buf[24];
  snprintf(buf, sizeof buf, "%" PRIu64, u);
  return cJSON_CreateRaw(buf);
}

/* The header (8-byte length + padded JSON) for ts, malloc'd into *hdr. */
static int build_header(const cli_tensors *ts, const char *const *meta, char **hdr, size_t *hlen,
                        char *err, size_t errlen) {
  int rc = CLI_OK;
  cJSON *root = cJSON_CreateObject();
  if (!root) return fail(err, errlen, "out of host memory");
  if (meta && meta[0]) {
    cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
    for (const char *const *kv = meta; m && kv[0] && kv[1]; kv += 2)
      if (!cJSON_AddStringToObject(m, kv[0], kv[1])) m = NULL;
    if (!m) rc = fail(err, errlen, "out of host memory");
  }
  uint64_t off = 0;
  for (size_t i = 0; i < ts->count && !rc; i++) {
    const cli_tensor *t = &ts->items[i];
    const char *dn = cli_st_dtype_name(t->dtype);
    size_t need = 0;
    if (!dn) {
      rc = fail(err, errlen, "tensor '%s': dtype %d cannot be written", t->name, (int)t->dtype);
      break;
    }
    if (t->ndim < 0 || t->ndim > CLI_MAX_DIMS ||
        cli_shape_numel(t->ndim, t->shape, ng_dtype_size(t->dtype), &need) != 0 ||
        need != t->nbytes) {
      rc = fail(err, errlen, "tensor '%s': shape and byte size disagree", t->name);
      break;
    }
    /* what the reader takes (a dimension of 0 lets the others be anything) */
    for (int d = 0; d < t->ndim && !rc; d++)
      if ((uint64_t)t->shape[d] > ST_MAX_INT)
        rc = fail(err, errlen, "tensor '%s': shape entry %d is above 2^53, which JSON readers "
                  "cannot take exactly", t->name, d);
    if (rc) break;
    for (size_t j = 0; j < i; j++)
      if (strcmp(ts->items[j].name, t->name) == 0 || strcmp(t->name, "__metadata__") == 0) {
        rc = fail(err, errlen, "tensor name '%s' used twice or reserved", t->name);
        break;
      }
    if (rc) break;
    cJSON *e = cJSON_AddObjectToObject(root, t->name);
    bool ok = e && cJSON_AddStringToObject(e, "dtype", dn);
    cJSON *sh = ok ? cJSON_AddArrayToObject(e, "shape") : NULL;
    cJSON *of = sh ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
    ok = ok && sh && of;
    for (int d = 0; ok && d < t->ndim; d++) {
      cJSON *v = json_uint_item((uint64_t)t->shape[d]);
      ok = v && cJSON_AddItemToArray(sh, v);
    }
    cJSON *b = ok ? json_uint_item(off) : NULL;
    ok = b && cJSON_AddItemToArray(of, b);
    off += t->nbytes;
    cJSON *en = ok ? json_uint_item(off) : NULL;
    ok = en && cJSON_AddItemToArray(of, en);
    if (!ok) rc = fail(err, errlen, "out of host memory");
  }
  char *json = rc ? NULL : cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (rc) return rc;
  if (!json) return fail(err, errlen, "out of host memory");
  size_t jl = strlen(json), padded = (jl + 7) / 8 * 8;
  char *h = malloc(8 + padded);
  if (!h) {
    cJSON_free(json);
    return fail(err, errlen, "out of host memory");
  }
  for (int i = 0; i < 8; i++) h[i] = (char)(((uint64_t)padded >> (8 * i)) & 0xff);
  memcpy(h + 8, json, jl);
  memset(h + 8 + jl, ' ', padded - jl);
  cJSON_free(json);
  *hdr = h;
  *hlen = 8 + padded;
  return CLI_OK;
}

int cli_st_serialize(const cli_tensors *ts, const char *const *meta, void **buf, size_t *len,
                     char *err, size_t errlen) {
  char *h;
  size_t hl;
  int rc = build_header(ts, meta, &h, &hl, err, errlen);
  if (rc) return rc;
  size_t total = hl;
  for (size_t i = 0; i < ts->count; i++) total += ts->items[i].nbytes;
  char *b = realloc(h, total);
  if (!b) {
    free(h);
    return fail(err, errlen, "out of host memory");
  }
  size_t at = hl;
  for (size_t i = 0; i < ts->count; i++) {
    if (ts->items[i].nbytes) memcpy(b + at, ts->items[i].data, ts->items[i].nbytes);
    at += ts->items[i].nbytes;
  }
  *buf = b;
  *len = total;
  return CLI_OK;
}

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n > (1u << 30) ? (1u << 30) : n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

/* While a temporary exists, SIGINT/SIGTERM/SIGHUP remove it before the process goes on to
 * whatever it did before (the OpenCL runtime may have its own handlers: they are chained), so an
 * interrupted run leaves nothing behind either. */
static char sig_tmp_path[4096];
static volatile sig_atomic_t sig_tmp_active;
static const int sig_list[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction sig_saved[3];
static bool sig_installed[3];

static void on_signal(int sig, siginfo_t *info, void *uc) {
  if (sig_tmp_active) unlink(sig_tmp_path);
  sig_tmp_active = 0;
  for (int i = 0; i < 3; i++) {
    if (sig_list[i] != sig) continue;
    const struct sigaction *prev = &sig_saved[i];
    if (prev->sa_flags & SA_SIGINFO) {
      if (prev->sa_sigaction) prev->sa_sigaction(sig, info, uc);
    } else if (prev->sa_handler == SIG_DFL) {
      signal(sig, SIG_DFL);
      raise(sig); /* delivered when this handler returns */
    } else if (prev->sa_handler != SIG_IGN) {
      prev->sa_handler(sig);
    }
  }
}

static void guard_install(void) {
  for (int i = 0; i < 3; i++) {
    struct sigaction old, sa;
    sig_installed[i] = false;
    if (sigaction(sig_list[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig_list[i], &sa, &sig_saved[i]) == 0) sig_installed[i] = true;
  }
}

static void guard_path(const char *tmp) {
  if (strlen(tmp) >= sizeof sig_tmp_path) return;
  strcpy(sig_tmp_path, tmp);
  sig_tmp_active = 1;
}

static void guard_remove(void) {
  sig_tmp_active = 0;
  for (int i = 0; i < 3; i++)
    if (sig_installed[i]) sigaction(sig_list[i], &sig_saved[i], NULL);
}

int cli_st_write(const char *path, const cli_tensors *ts, const char *const *meta, char *err,
                 size_t errlen) {
  char *h = NULL;
  size_t hl = 0;
  int rc = build_header(ts, meta, &h, &hl, err, errlen);
  if (rc) return rc;

  /* The temporary lives next to the destination so that rename() is atomic (same file system). */
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  if (!*base) {
    free(h);
    return fail(err, errlen, "output path '%s' names a directory, not a file", path);
  }
  size_t dl = slash ? (size_t)(slash - path) : 0;
  size_t tl = dl + strlen(base) + 32;
  char *tmpl = malloc(tl), *dir = malloc(dl + 2);
  if (!tmpl || !dir) {
    free(h);
    free(tmpl);
    free(dir);
    return fail(err, errlen, "out of host memory");
  }
  if (slash) {
    memcpy(dir, path, dl);
    dir[dl] = '\0';
    if (dl == 0) strcpy(dir, "/");
  } else {
    strcpy(dir, ".");
  }
  snprintf(tmpl, tl, "%s/.%s.tmp-XXXXXX", dir, base);

  guard_install();
  int fd = mkstemp(tmpl);
  if (fd >= 0) guard_path(tmpl);
  if (fd < 0) {
    guard_remove();
    rc = fail(err, errlen, "cannot create a temporary file in '%s' for '%s': %s", dir, path,
              strerror(errno));
    goto out;
  }
  /* mkstemp makes the file 0600; give it the mode a plain create would have. */
  mode_t mask = umask(0);
  umask(mask);
  bool ok = fchmod(fd, 0666 & ~mask) == 0 && write_all(fd, h, hl) == 0;
  for (size_t i = 0; ok && i < ts->count; i++)
    ok = write_all(fd, ts->items[i].data, ts->items[i].nbytes) == 0;
  int saved = errno;
  if (ok && fsync(fd) != 0) {
    ok = false;
    saved = errno;
  }
  if (close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (ok && rename(tmpl, path) != 0) {
    ok = false;
    saved = errno;
  }
  if (!ok) unlink(tmpl);
  guard_remove();
  if (!ok) {
    rc = fail(err, errlen, "cannot write '%s': %s", path, strerror(saved));
    goto out;
  }
  /* Make the rename itself durable; failure here loses nothing already promised. */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
out:
  free(h);
  free(tmpl);
  free(dir);
  return rc;
}
