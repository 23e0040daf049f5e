/* Kernel build options: integer `-DNAME=value` defines only. Floats (eps, offsets, scales) are
 * kernel arguments, so no locale can change a build and no value forces a rebuild. */
#include "ng_internal.h"

#include <stdio.h>
#include <string.h>

void ng_opts_init(ng_opts *o) {
  o->text[0] = '\0';
  o->len = 0;
  o->overflow = false;
  /* The library's kernels assume IEEE single semantics (no fast-math), and OpenCL C 1.2. */
  ng_opts_add(o, "NG_OPENCL", 1);
}

void ng_opts_add(ng_opts *o, const char *name, long long value) {
  if (o->overflow) return;
  int n = snprintf(o->text + o->len, sizeof o->text - o->len, "%s-D%s=%lld",
                   o->len ? " " : "", name, value);
  if (n < 0 || (size_t)n >= sizeof o->text - o->len) {
    o->overflow = true;
    o->text[o->len] = '\0';
    return;
  }
  o->len += (size_t)n;
}
