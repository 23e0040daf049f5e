/* libFuzzer target: the safetensors reader (tools/cli/safetensors.c) on arbitrary bytes.
 *
 * Beyond "no crash, no leak, no undefined behaviour" (ASan + UBSan), every input checks:
 *  - the in-memory reader returns CLI_OK or CLI_USAGE; on CLI_USAGE a message and no tensors;
 *  - an accepted file is self-consistent (byte size = shape · dtype, unique names) and
 *    survives writer → reader with every name, dtype, shape and byte equal;
 *  - the file reader (cli_st_read, its own code path) gives the same verdict and the same
 *    tensors for the same bytes (they are written to a memfd).
 * Any disagreement aborts, which libFuzzer reports as a crash with the input saved.
 * FUZZ_NO_FILE=1 in the environment skips the file reader (about 3x more executions/s). */
#define _GNU_SOURCE
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "fuzz_safetensors: check failed at line %d: %s\n", __LINE__, #cond);      \
      abort();                                                                                   \
    }                                                                                            \
  } while (0)

static int memfd = -1;
static char memfd_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  memfd = getenv("FUZZ_NO_FILE") ? -1 : memfd_create("fuzz_safetensors", 0);
  if (memfd >= 0) snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", memfd);
  return 0;
}

static void same_tensors(const cli_tensors *a, const cli_tensors *b) {
  CHECK(a->count == b->count);
  for (size_t i = 0; i < a->count; i++) {
    const cli_tensor *x = &a->items[i], *y = &b->items[i];
    CHECK(strcmp(x->name, y->name) == 0);
    CHECK(x->dtype == y->dtype && x->ndim == y->ndim && x->nbytes == y->nbytes);
    for (int d = 0; d < x->ndim; d++) CHECK(x->shape[d] == y->shape[d]);
    CHECK(x->nbytes == 0 || memcmp(x->data, y->data, x->nbytes) == 0);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cli_tensors ts = {0};
  char err[1024] = "";
  int rc = cli_st_parse(data, size, &ts, err, sizeof err);
  CHECK(rc == CLI_OK || rc == CLI_USAGE);
  if (rc != CLI_OK) {
    CHECK(ts.count == 0 && ts.items == NULL);
    CHECK(err[0] != '\0');
  } else {
    for (size_t i = 0; i < ts.count; i++) {
      const cli_tensor *t = &ts.items[i];
      size_t bytes = 0;
      CHECK(t->ndim >= 0 && t->ndim <= CLI_MAX_DIMS);
      CHECK(cli_shape_numel(t->ndim, t->shape, ng_dtype_size(t->dtype), &bytes) == 0);
      CHECK(bytes == t->nbytes && t->data != NULL);
      CHECK(strcmp(t->name, "__metadata__") != 0);
      for (size_t j = 0; j < i; j++) CHECK(strcmp(ts.items[j].name, t->name) != 0);
    }
    /* writer → reader round trip */
    void *buf = NULL;
    size_t len = 0;
    const char *meta[] = {"producer", "fuzz", NULL};
    CHECK(cli_st_serialize(&ts, meta, &buf, &len, err, sizeof err) == CLI_OK);
    cli_tensors back = {0};
    CHECK(cli_st_parse(buf, len, &back, err, sizeof err) == CLI_OK);
    same_tensors(&ts, &back);
    cli_tensors_free(&back);
    free(buf);
  }
  /* the file reader agrees */
  if (memfd >= 0 && ftruncate(memfd, 0) == 0 &&
      (size == 0 || pwrite(memfd, data, size, 0) == (ssize_t)size)) {
    cli_tensors ft = {0};
    int frc = cli_st_read(memfd_path, &ft, err, sizeof err);
    CHECK(frc == rc);
    if (frc == CLI_OK) same_tensors(&ts, &ft);
    else CHECK(ft.count == 0 && err[0] != '\0');
    cli_tensors_free(&ft);
  }
  cli_tensors_free(&ts);
  return 0;
}
