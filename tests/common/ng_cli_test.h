/* Scaffolding shared by the normgrad-cli tests (tests/test_cli*.c): a scratch folder per test
 * process, the real binary (NORMGRAD_CLI, set by CTest) run with posix_spawn — no shell — with
 * stdout and stderr captured, or with stderr on a pseudo-terminal, and the safetensors helpers
 * those tests build their inputs and check their outputs with.
 *
 * Built into its own library with tools/cli/safetensors.c and tensors.c, linked only into the
 * test_cli* tests (tests/CMakeLists.txt); the other tests need neither cJSON nor the CLI. */
#ifndef NG_CLI_TEST_H
#define NG_CLI_TEST_H

#include "cli.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the scratch folder ---------------------------------------------------------------------- */
extern const char *ng_cli_path; /* the normgrad-cli binary */
extern char ng_cli_dir[256];    /* this process's scratch folder */
extern char ng_cli_in[320];     /* <dir>/in.safetensors: where tests write their inputs */
extern char ng_cli_out[320];    /* <dir>/out.safetensors: where `run` writes */

/* Find the binary (NORMGRAD_CLI) and make "$TMPDIR/ng-test-<tag>-XXXXXX" (logs go to its logs/
 * subfolder). Returns 0, or 1 with the reason on stderr (call it from main, before cmocka). */
int ng_cli_test_init(const char *tag);
/* Remove the scratch folder and everything in it. */
void ng_cli_test_cleanup(void);
/* "<dir>/<name>" in one of 8 rotating static buffers. */
char *ng_cli_path_in(const char *dir, const char *name);

/* ---- running the binary ---------------------------------------------------------------------- */
typedef struct ng_cli_proc {
  int code;  /* exit status, or 128 + signal */
  char *out; /* everything written on stdout */
  char *err; /* ... on stderr (with ng_cli_run_tty: what the terminal received) */
} ng_cli_proc;

/* A file's contents, NUL-terminated (malloc'ed; "" when it cannot be opened). */
char *ng_cli_slurp(const char *path);
/* Run normgrad-cli with `args` (NULL-terminated, without argv[0]); stdout and stderr go to
 * files in the scratch folder, read back after the exit. */
ng_cli_proc ng_cli_run(const char *const *args);
/* The same with extra "NAME=value" environment entries (NULL-terminated, may be NULL); an entry
 * replaces the inherited variable of that name. */
ng_cli_proc ng_cli_run_env(const char *const *args, const char *const *extra_env);
/* The same with stdout going to `stdout_path` (e.g. /dev/full; p.out is "" for a /dev/ path). */
ng_cli_proc ng_cli_run_to(const char *const *args, const char *stdout_path);
/* The same with stderr on a pseudo-terminal (raw output: no "\n" → "\r\n" translation, 100
 * columns) so that isatty(2) holds in the child; stdout still goes to a file. */
ng_cli_proc ng_cli_run_tty(const char *const *args);
void ng_cli_proc_free(ng_cli_proc *p);
/* Case-insensitive substring test. */
bool ng_cli_contains_nocase(const char *hay, const char *needle);

/* ---- safetensors ----------------------------------------------------------------------------- */
/* Append tensor `name` holding v[0 .. numel) stored as `dt` (floats rounded as the kernels round;
 * for I32/I64 the values are converted to integers). */
void ng_cli_add(cli_tensors *ts, const char *name, ng_dtype dt, int ndim, const int64_t *shape,
                const float *v);
/* Write `ts` to `path` / read `path` into *ts; a failure fails the test. */
void ng_cli_write(const char *path, const cli_tensors *ts);
void ng_cli_read(const char *path, cli_tensors *ts);
/* Output tensor `name`, which must exist with exactly this dtype and shape. */
const cli_tensor *ng_cli_need(const cli_tensors *ts, const char *name, ng_dtype dt, int ndim,
                              const int64_t *shape);
/* Output tensor `name` must not exist (a frozen parameter's gradient). */
void ng_cli_absent(const cli_tensors *ts, const char *name);
/* A tensor's elements as floats (malloc'ed). */
float *ng_cli_floats(const cli_tensor *t);

#endif
