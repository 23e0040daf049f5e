/* Scaffolding of the normgrad-cli tests: see ng_cli_test.h. */
#include "ng_cli_test.h"
#include "ng_test.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

extern char **environ;

const char *ng_cli_path;
char ng_cli_dir[256], ng_cli_in[320], ng_cli_out[320];
static char log_out[320], log_err[320];

/* ---- the scratch folder ---------------------------------------------------------------------- */
int ng_cli_test_init(const char *tag) {
  ng_cli_path = getenv("NORMGRAD_CLI");
  if (!ng_cli_path || access(ng_cli_path, X_OK) != 0) {
    fprintf(stderr, "NORMGRAD_CLI must name the normgrad-cli binary (run through CTest)\n");
    return 1;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(ng_cli_dir, sizeof ng_cli_dir, "%s/ng-test-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp",
           tag);
  if (!mkdtemp(ng_cli_dir)) {
    perror("mkdtemp");
    return 1;
  }
  char logs[300];
  snprintf(logs, sizeof logs, "%s/logs", ng_cli_dir);
  if (mkdir(logs, 0755) != 0) {
    perror("mkdir logs");
    return 1;
  }
  snprintf(ng_cli_in, sizeof ng_cli_in, "%s/in.safetensors", ng_cli_dir);
  snprintf(ng_cli_out, sizeof ng_cli_out, "%s/out.safetensors", ng_cli_dir);
  snprintf(log_out, sizeof log_out, "%s/stdout", logs);
  snprintf(log_err, sizeof log_err, "%s/stderr", logs);
  return 0;
}

void ng_cli_test_cleanup(void) {
  if (ng_cli_dir[0]) ng_test_remove_tree(ng_cli_dir);
}

char *ng_cli_path_in(const char *dir, const char *name) {
  static char bufs[8][600];
  static int k;
  char *b = bufs[k++ % 8];
  snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
  return b;
}

/* ---- running the binary ---------------------------------------------------------------------- */
char *ng_cli_slurp(const char *path) {
  char *s = ng_test_slurp(path, NULL);
  return s ? s : strdup("");
}

/* argv for the binary: ng_cli_path, then args. */
static const char **make_argv(const char *const *args, const char **argv, size_t cap) {
  size_t n = 0;
  argv[n++] = ng_cli_path;
  for (; args[n - 1] && n + 1 < cap; n++) argv[n] = args[n - 1];
  if (args[n - 1]) fail_msg("ng_cli_run: more than %zu arguments", cap - 2);
  argv[n] = NULL;
  return argv;
}

/* environ with `extra` entries replacing the inherited ones of the same name (malloc'ed array;
 * the strings are borrowed). */
static char **make_envp(const char *const *extra) {
  size_t ne = 0, nx = 0;
  while (environ[ne]) ne++;
  while (extra && extra[nx]) nx++;
  char **envp = calloc(ne + nx + 1, sizeof *envp);
  assert_non_null(envp);
  size_t k = 0;
  for (size_t i = 0; i < ne; i++) {
    bool overridden = false;
    for (size_t j = 0; j < nx && !overridden; j++) {
      const char *eq = strchr(extra[j], '=');
      const size_t l = eq ? (size_t)(eq - extra[j]) + 1 : strlen(extra[j]);
      overridden = strncmp(environ[i], extra[j], l) == 0;
    }
    if (!overridden) envp[k++] = environ[i];
  }
  for (size_t j = 0; j < nx; j++) envp[k++] = (char *)extra[j];
  envp[k] = NULL;
  return envp;
}

static int wait_exit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* stdout to `out_path` (read back into p.out unless it is a device such as /dev/full). */
static ng_cli_proc spawn_to(const char *const *args, const char *const *extra_env,
                            const char *out_path) {
  const char *argv[64];
  make_argv(args, argv, NG_ARRAY_LEN(argv));
  char **envp = make_envp(extra_env);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, log_err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  int e = posix_spawn(&pid, ng_cli_path, &fa, NULL, (char *const *)argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  free(envp);
  if (e != 0) fail_msg("posix_spawn(%s) failed: %s", ng_cli_path, strerror(e));
  ng_cli_proc p;
  p.code = wait_exit(pid);
  p.out = strncmp(out_path, "/dev/", 5) ? ng_cli_slurp(out_path) : strdup("");
  p.err = ng_cli_slurp(log_err);
  return p;
}

ng_cli_proc ng_cli_run_env(const char *const *args, const char *const *extra_env) {
  return spawn_to(args, extra_env, log_out);
}

ng_cli_proc ng_cli_run_to(const char *const *args, const char *stdout_path) {
  return spawn_to(args, NULL, stdout_path);
}

ng_cli_proc ng_cli_run(const char *const *args) { return ng_cli_run_env(args, NULL); }

ng_cli_proc ng_cli_run_tty(const char *const *args) {
  const char *argv[64];
  make_argv(args, argv, NG_ARRAY_LEN(argv));
  int master = -1, slave = -1;
  struct winsize ws = {30, 100, 0, 0};
  if (openpty(&master, &slave, NULL, NULL, &ws) != 0) fail_msg("openpty: %s", strerror(errno));
  /* Raw output: the test sees exactly the bytes the tool wrote. */
  struct termios t;
  if (tcgetattr(slave, &t) == 0) {
    t.c_oflag &= ~(tcflag_t)OPOST;
    tcsetattr(slave, TCSANOW, &t);
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, slave, 2);
  posix_spawn_file_actions_addclose(&fa, slave);
  posix_spawn_file_actions_addclose(&fa, master);
  pid_t pid;
  int e = posix_spawn(&pid, ng_cli_path, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(slave);
  if (e != 0) fail_msg("posix_spawn(%s) failed: %s", ng_cli_path, strerror(e));
  /* Drain the terminal while the child runs (it would block on a full pty buffer); once the
   * child has exited and closed its side, read() fails with EIO. */
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  assert_non_null(buf);
  for (;;) {
    struct pollfd pf = {master, POLLIN, 0};
    const int r = poll(&pf, 1, 1000);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      if (waitpid(pid, NULL, WNOHANG) == pid) fail_msg("child exited without closing the pty");
      continue;
    }
    if (len + 1024 > cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
    const ssize_t n = read(master, buf + len, cap - len - 1);
    if (n > 0) len += (size_t)n;
    else if (n < 0 && errno == EINTR) continue;
    else break; /* EIO: every slave descriptor is closed */
  }
  close(master);
  buf[len] = '\0';
  ng_cli_proc p;
  p.code = wait_exit(pid);
  p.out = ng_cli_slurp(log_out);
  p.err = buf;
  return p;
}

void ng_cli_proc_free(ng_cli_proc *p) {
  free(p->out);
  free(p->err);
  p->out = p->err = NULL;
}

bool ng_cli_contains_nocase(const char *hay, const char *needle) {
  const size_t n = strlen(needle);
  for (; *hay; hay++)
    if (strncasecmp(hay, needle, n) == 0) return true;
  return n == 0;
}

/* ---- safetensors ----------------------------------------------------------------------------- */
void ng_cli_add(cli_tensors *ts, const char *name, ng_dtype dt, int ndim, const int64_t *shape,
                const float *v) {
  assert_int_equal(cli_tensors_add(ts, name, dt, ndim, shape, NULL), 0);
  cli_tensor *t = &ts->items[ts->count - 1];
  const size_t n = cli_tensor_numel(t);
  if (dt == NG_I32 || dt == NG_I64) {
    for (size_t i = 0; i < n; i++) {
      if (dt == NG_I32) ((int32_t *)t->data)[i] = (int32_t)v[i];
      else ((int64_t *)t->data)[i] = (int64_t)v[i];
    }
  } else {
    cli_pack_floats(dt, v, t->data, n);
  }
}

void ng_cli_write(const char *path, const cli_tensors *ts) {
  char err[512];
  if (cli_st_write(path, ts, NULL, err, sizeof err) != CLI_OK)
    fail_msg("writing %s: %s", path, err);
}

void ng_cli_read(const char *path, cli_tensors *ts) {
  char err[512];
  if (cli_st_read(path, ts, err, sizeof err) != CLI_OK) fail_msg("reading %s: %s", path, err);
}

const cli_tensor *ng_cli_need(const cli_tensors *ts, const char *name, ng_dtype dt, int ndim,
                              const int64_t *shape) {
  const cli_tensor *t = cli_tensors_find(ts, name);
  if (!t) fail_msg("output lacks '%s'", name);
  if (t->dtype != dt)
    fail_msg("output '%s' has dtype %s, expected %s", name, cli_st_dtype_name(t->dtype),
             cli_st_dtype_name(dt));
  char got[160];
  bool same = t->ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
  if (!same) fail_msg("output '%s' has shape %s", name, cli_shape_str(t, got, sizeof got));
  return t;
}

void ng_cli_absent(const cli_tensors *ts, const char *name) {
  if (cli_tensors_find(ts, name)) fail_msg("output has '%s', which must be absent", name);
}

float *ng_cli_floats(const cli_tensor *t) {
  const size_t n = cli_tensor_numel(t);
  float *v = malloc((n ? n : 1) * sizeof *v);
  assert_non_null(v);
  for (size_t i = 0; i < n; i++) v[i] = (float)cli_tensor_get(t, i);
  return v;
}
