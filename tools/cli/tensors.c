/* Host tensors: the list type, dtype names and conversions, and the input checks that op files
 * share. No OpenCL here, so tests can link this file alone. */
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- the list ------------------------------------------------------------------------------- */
const cli_tensor *cli_tensors_find(const cli_tensors *ts, const char *name) {
  for (size_t i = 0; ts && i < ts->count; i++)
    if (strcmp(ts->items[i].name, name) == 0) return &ts->items[i];
  return NULL;
}

int cli_shape_numel(int ndim, const int64_t *shape, size_t elem_size, size_t *out) {
  size_t n = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0) return -1;
    if ((uint64_t)shape[d] > SIZE_MAX) return -1;
    size_t s = (size_t)shape[d];
    if (s != 0 && n > SIZE_MAX / s) return -1;
    n *= s;
  }
  if (elem_size && n > SIZE_MAX / elem_size) return -1;
  *out = elem_size ? n * elem_size : n;
  return 0;
}

int cli_tensors_add(cli_tensors *ts, const char *name, ng_dtype dtype, int ndim,
                    const int64_t *shape, const void *data) {
  size_t es = ng_dtype_size(dtype), nbytes = 0;
  if (!es || ndim < 0 || ndim > CLI_MAX_DIMS || strlen(name) >= sizeof ts->items[0].name)
    return -1;
  if (cli_shape_numel(ndim, shape, es, &nbytes) != 0) return -1;
  if (ts->count == ts->cap) {
    size_t cap = ts->cap ? ts->cap * 2 : 8;
    cli_tensor *items = realloc(ts->items, cap * sizeof *items);
    if (!items) return -1;
    ts->items = items;
    ts->cap = cap;
  }
  /* calloc(…, 1) so that an empty tensor still gets a distinct non-NULL pointer. */
  void *buf = nbytes ? malloc(nbytes) : calloc(1, 1);
  if (!buf) return -1;
  if (nbytes) {
    if (data) memcpy(buf, data, nbytes);
    else memset(buf, 0, nbytes);
  }
  cli_tensor *t = &ts->items[ts->count++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->dtype = dtype;
  t->ndim = ndim;
  for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
  t->data = buf;
  t->nbytes = nbytes;
  return 0;
}

void cli_tensors_free(cli_tensors *ts) {
  if (!ts) return;
  for (size_t i = 0; i < ts->count; i++) free(ts->items[i].data);
  free(ts->items);
  ts->items = NULL;
  ts->count = ts->cap = 0;
}

size_t cli_tensor_numel(const cli_tensor *t) {
  size_t n = 0;
  return cli_shape_numel(t->ndim, t->shape, 0, &n) == 0 ? n : 0;
}

/* ---- dtypes -------------------------------------------------------------------------------- */
static const struct {
  const char *name;
  ng_dtype dt;
} st_names[] = {{"F32", NG_F32}, {"F16", NG_F16}, {"BF16", NG_BF16}, {"I32", NG_I32},
                {"I64", NG_I64}};

const char *cli_st_dtype_name(ng_dtype dt) {
  for (size_t i = 0; i < sizeof st_names / sizeof st_names[0]; i++)
    if (st_names[i].dt == dt) return st_names[i].name;
  return NULL;
}

int cli_st_dtype_parse(const char *name, ng_dtype *out) {
  for (size_t i = 0; i < sizeof st_names / sizeof st_names[0]; i++)
    if (strcmp(st_names[i].name, name) == 0) {
      *out = st_names[i].dt;
      return 0;
    }
  return -1;
}

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t cli_f32_to_bf16(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float cli_bf16_to_f32(uint16_t b) { return u2f((uint32_t)b << 16); }

uint16_t cli_f32_to_f16(float f) {
  uint32_t u = f2u(f);
  uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* ≥ 65520 rounds to Inf */
  if (a < 0x38800000u) {                                     /* half subnormal or zero */
    if (a < 0x33000000u) return (uint16_t)sign;
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, sh = 126 - e;
    uint32_t r = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = a - 0x38000000u, q = r >> 13, rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++;
  return (uint16_t)(sign | q);
}

float cli_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return u2f(sign | 0x7f800000u | (m << 13));
  if (e == 0) { /* zero or subnormal: m·2^-24, exact in f32 */
    float v = (float)m * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

void cli_pack_floats(ng_dtype dt, const float *src, void *dst, size_t count) {
  if (dt == NG_F32) {
    memcpy(dst, src, count * 4);
    return;
  }
  uint16_t *d = dst;
  for (size_t i = 0; i < count; i++)
    d[i] = dt == NG_BF16 ? cli_f32_to_bf16(src[i]) : cli_f32_to_f16(src[i]);
}

double cli_tensor_get(const cli_tensor *t, size_t i) {
  const unsigned char *p = (const unsigned char *)t->data + i * ng_dtype_size(t->dtype);
  switch (t->dtype) {
  case NG_F32: {
    float v;
    memcpy(&v, p, 4);
    return v;
  }
  case NG_F16:
  case NG_BF16: {
    uint16_t v;
    memcpy(&v, p, 2);
    return t->dtype == NG_F16 ? cli_f16_to_f32(v) : cli_bf16_to_f32(v);
  }
  case NG_I32: {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
  }
  case NG_I64: {
    int64_t v;
    memcpy(&v, p, 8);
    return (double)v;
  }
  }
  return 0;
}

const char *cli_shape_str(const cli_tensor *t, char *buf, size_t len) {
  size_t used = 0;
  if (len == 0) return buf;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < t->ndim && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? ", " : "",
                             (long long)t->shape[d]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

/* ---- input checks ---------------------------------------------------------------------------- */
int cli_input(const cli_tensors *in, const char *op, const char *name, bool required,
              const cli_tensor **t, char *err, size_t errlen) {
  *t = cli_tensors_find(in, name);
  if (!*t && required)
    return fail(err, errlen, "%s: missing required tensor '%s' in the input file", op, name);
  return CLI_OK;
}

int cli_check_names(const cli_tensors *in, const char *op, const char *const *allowed, char *err,
                    size_t errlen) {
  for (size_t i = 0; i < in->count; i++) {
    bool ok = false;
    for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, in->items[i].name) == 0;
    if (ok) continue;
    char list[256] = "";
    size_t used = 0;
    for (const char *const *a = allowed; *a && used < sizeof list; a++)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", a == allowed ? "" : ", ",
                               *a);
    return fail(err, errlen, "%s: unexpected tensor '%s' in the input file (%s takes: %s)", op,
                in->items[i].name, op, list);
  }
  return CLI_OK;
}

int cli_expect_dtype(const cli_tensor *t, unsigned mask, char *err, size_t errlen) {
  if ((unsigned)t->dtype < 32 && (mask & (1u << t->dtype))) return CLI_OK;
  char list[64] = "";
  size_t used = 0;
  for (unsigned d = 0; d <= NG_I64 && used < sizeof list; d++)
    if (mask & (1u << d))
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "",
                               cli_st_dtype_name((ng_dtype)d));
  const char *have = cli_st_dtype_name(t->dtype);
  return fail(err, errlen, "tensor '%s' has dtype %s, expected one of %s", t->name,
              have ? have : "?", list);
}

int cli_expect_same_dtype(const cli_tensor *t, const cli_tensor *like, char *err,
                          size_t errlen) {
  if (t->dtype == like->dtype) return CLI_OK;
  const char *a = cli_st_dtype_name(t->dtype), *b = cli_st_dtype_name(like->dtype);
  return fail(err, errlen, "tensor '%s' has dtype %s but must match '%s' (%s)", t->name,
              a ? a : "?", like->name, b ? b : "?");
}

int cli_rows_n(const cli_tensor *t, size_t *rows, size_t *n, char *err, size_t errlen) {
  char s[160];
  if (t->ndim < 1)
    return fail(err, errlen, "tensor '%s' is a scalar; it needs at least one dim", t->name);
  size_t total = cli_tensor_numel(t);
  if (total == 0)
    return fail(err, errlen, "tensor '%s' has shape %s: no elements", t->name,
                cli_shape_str(t, s, sizeof s));
  *n = (size_t)t->shape[t->ndim - 1];
  *rows = total / *n;
  return CLI_OK;
}

static bool same_shape(int nd, const int64_t *a, int nd2, const int64_t *b) {
  if (nd != nd2) return false;
  for (int d = 0; d < nd; d++)
    if (a[d] != b[d]) return false;
  return true;
}

int cli_expect_same_shape(const cli_tensor *t, const cli_tensor *like, char *err,
                          size_t errlen) {
  if (same_shape(t->ndim, t->shape, like->ndim, like->shape)) return CLI_OK;
  char a[160], b[160];
  return fail(err, errlen, "tensor '%s' has shape %s but must have the shape of '%s' %s",
              t->name, cli_shape_str(t, a, sizeof a), like->name,
              cli_shape_str(like, b, sizeof b));
}

int cli_expect_shape(const cli_tensor *t, int ndim, const int64_t *shape, const char *why,
                     char *err, size_t errlen) {
  if (same_shape(t->ndim, t->shape, ndim, shape)) return CLI_OK;
  cli_tensor want;
  memset(&want, 0, sizeof want);
  want.ndim = ndim;
  for (int d = 0; d < ndim && d < CLI_MAX_DIMS; d++) want.shape[d] = shape[d];
  char a[160], b[160];
  return fail(err, errlen, "tensor '%s' has shape %s, expected %s%s%s%s", t->name,
              cli_shape_str(t, a, sizeof a), cli_shape_str(&want, b, sizeof b),
              why ? " (" : "", why ? why : "", why ? ")" : "");
}

void cli_rows_shape(const cli_tensor *t, int *ndim, int64_t *shape) {
  if (t->ndim <= 1) {
    *ndim = 1;
    shape[0] = 1;
    return;
  }
  *ndim = t->ndim - 1;
  for (int d = 0; d < t->ndim - 1; d++) shape[d] = t->shape[d];
}
