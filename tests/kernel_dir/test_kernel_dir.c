/* A development build's kernel folder (src/sources.c with NG_KERNEL_DIR, as -DNG_DEV_KERNEL_DIR=ON
 * builds it): sources come from cl/ of the tree, or from the folder NORMGRAD_KERNEL_DIR names,
 * header and op file alike; an empty value means cl/; a folder without the op's file fails with
 * NG_ERR_IO naming the path. Built from sources.c and status.c alone, so the release builds that
 * CI makes test it without a development build of the library (tests/CMakeLists.txt). */
#include "ng_internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ng_test.h" /* its inline helpers alone: nothing of the test library is linked */

static char tmp[64];

static void put(const char *dir, const char *file, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  ng_test_write(path, text, strlen(text));
}

/* src's two parts are exactly the files header and op of folder dir */
static void expect_parts(const ng_source *src, const char *dir, const char *op) {
  const char *files[2] = {"ng_common.clh", op};
  for (int i = 0; i < 2; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    size_t len = 0;
    char *want = ng_test_slurp(path, &len);
    assert_non_null(want);
    assert_int_equal(src->lens[i], len);
    assert_memory_equal(src->parts[i], want, len);
    free(want);
  }
}

static void test_tree_folder(void **state) {
  (void)state;
  unsetenv("NORMGRAD_KERNEL_DIR");
  ng_source src;
  assert_int_equal(ng_source_get("rmsnorm", &src), NG_SUCCESS);
  expect_parts(&src, NG_KERNEL_DIR, "rmsnorm.cl");
  ng_source_free(&src);
  setenv("NORMGRAD_KERNEL_DIR", "", 1); /* empty: the tree's folder */
  assert_int_equal(ng_source_get("layernorm", &src), NG_SUCCESS);
  expect_parts(&src, NG_KERNEL_DIR, "layernorm.cl");
  ng_source_free(&src);
}

static void test_named_folder(void **state) {
  (void)state;
  put(tmp, "ng_common.clh", "/* a header variant */\n");
  put(tmp, "rmsnorm.cl", "/* an rmsnorm variant */\n__kernel void k(void) {}\n");
  setenv("NORMGRAD_KERNEL_DIR", tmp, 1);
  ng_source src;
  assert_int_equal(ng_source_get("rmsnorm", &src), NG_SUCCESS);
  expect_parts(&src, tmp, "rmsnorm.cl");
  assert_non_null(strstr(src.parts[1], "an rmsnorm variant"));
  ng_source_free(&src);
  /* the folder has no layernorm.cl: a clear error, nothing left allocated */
  assert_int_equal(ng_source_get("layernorm", &src), NG_ERR_IO);
  assert_non_null(strstr(ng_last_error_detail(), tmp));
  assert_non_null(strstr(ng_last_error_detail(), "layernorm.cl"));
  assert_null(src.owned[0]);
  assert_null(src.owned[1]);
  unsetenv("NORMGRAD_KERNEL_DIR");
}

int main(void) {
  snprintf(tmp, sizeof tmp, "/tmp/ng-kernel-dir-XXXXXX");
  if (!mkdtemp(tmp)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tree_folder),
      cmocka_unit_test(test_named_folder),
  };
  const int r = NG_RUN_GROUP_TESTS(tests, NULL, NULL);
  char path[128];
  snprintf(path, sizeof path, "%s/ng_common.clh", tmp);
  unlink(path);
  snprintf(path, sizeof path, "%s/rmsnorm.cl", tmp);
  unlink(path);
  rmdir(tmp);
  return r;
}
