/* Kernel sources: embedded into the library at build time (cmake/embed_cl.cmake generates the
 * table), or, in a development build (-DNG_DEV_KERNEL_DIR=ON), read from cl/ (or the folder
 * NORMGRAD_KERNEL_DIR names) at every build so a kernel edit needs no relink. Each program is the
 * shared header followed by one op file. */
#include "ng_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NG_COMMON_HEADER "ng_common.clh"

uint64_t ng_fnv1a(uint64_t h, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

#ifdef NG_KERNEL_DIR
/* The folder a development build reads: cl/ of the source tree, or the one NORMGRAD_KERNEL_DIR
 * names (a copy of cl/ with a kernel edited), so that one binary runs either kernel in an A/B
 * comparison (tools/ab_bench.py --env NAME:NORMGRAD_KERNEL_DIR=...). Release builds embed their
 * sources and never read this variable. */
static const char *kernel_dir(void) {
  const char *d = getenv("NORMGRAD_KERNEL_DIR");
  return d && d[0] ? d : NG_KERNEL_DIR;
}

static ng_status read_file(const char *file, char **out, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", kernel_dir(), file);
  FILE *f = fopen(path, "rb");
  if (!f) return ng_fail(NG_ERR_IO, "cannot open kernel source %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    fclose(f);
    return ng_fail(NG_ERR_IO, "cannot read kernel source %s", path);
  }
  fclose(f);
  buf[n] = '\0';
  *out = buf;
  *len = (size_t)n;
  return NG_SUCCESS;
}
#endif

static ng_status find_part(const char *file, ng_source *src, int slot) {
#ifdef NG_KERNEL_DIR
  ng_status s = read_file(file, &src->owned[slot], &src->lens[slot]);
  src->parts[slot] = src->owned[slot];
  return s;
#else
  for (size_t i = 0; i < ng_embedded_count; i++) {
    if (strcmp(ng_embedded_sources[i].name, file) == 0) {
      src->parts[slot] = ng_embedded_sources[i].data;
      src->lens[slot] = ng_embedded_sources[i].len;
      return NG_SUCCESS;
    }
  }
  return ng_fail(NG_ERR_INTERNAL, "no embedded kernel source named %s", file);
#endif
}

ng_status ng_source_get(const char *name, ng_source *src) {
  memset(src, 0, sizeof *src);
  char file[128];
  snprintf(file, sizeof file, "%s.cl", name);
  ng_status s = find_part(NG_COMMON_HEADER, src, 0);
  if (s == NG_SUCCESS) s = find_part(file, src, 1);
  if (s != NG_SUCCESS) ng_source_free(src);
  return s;
}

void ng_source_free(ng_source *src) {
  for (int i = 0; i < 2; i++) {
    free(src->owned[i]);
    src->owned[i] = NULL;
  }
}
