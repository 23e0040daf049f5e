/* libFuzzer target: normgrad-cli's argument parsing, every subcommand and every op option.
 *
 * The input is split at NUL bytes into argv[1..] (at most 48 arguments; an empty input is no
 * argument at all, a trailing NUL an empty last argument); cli_main runs in
 * parse-only mode (cli_parse_only), so it opens no device and reads or writes no file, but
 * takes every path that parsing and checking the arguments takes, including the messages.
 * Checked: the exit code is 0 or 2 (3 would mean a device was touched), and ASan + UBSan find
 * nothing. Run with -close_fd_mask=3: help texts go to stdout, errors to stderr. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 48

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* one copy with a NUL after every argument (and at the end) */
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = '\0';
  char *argv[MAX_ARGS + 2];
  int argc = 0;
  argv[argc++] = (char *)"normgrad-cli";
  for (size_t at = 0; size > 0 && at <= size && argc <= MAX_ARGS;) {
    argv[argc++] = buf + at;
    at += strlen(buf + at) + 1;
    if (at > size) break;
  }
  argv[argc] = NULL;
  cli_parse_only = true;
  int rc = cli_main(argc, argv);
  if (rc != CLI_OK && rc != CLI_USAGE) {
    fprintf(stderr, "fuzz_args: exit code %d in parse-only mode\n", rc);
    abort();
  }
  free(buf);
  return 0;
}
