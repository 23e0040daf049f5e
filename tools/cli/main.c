/* normgrad-cli: list devices, run an op on a safetensors file, benchmark an op, inspect a file.
 * The contract (subcommands, options, tensor names, exit codes) is SPEC.md's "normgrad-cli
 * contract"; docs/cli.md is the user's page. */
#include "cli.h"
#include "progress.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERRLEN 1024

bool cli_parse_only = false;

int cli_error(int code, const char *fmt, ...) {
  cli_progress_clear(); /* never append the message to a progress line */
  va_list ap;
  va_start(ap, fmt);
  fputs("normgrad-cli: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return code;
}

static int errf(char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int errf(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return CLI_USAGE;
}

/* ---- numbers ------------------------------------------------------------------------------------ */
int cli_parse_double(const char *opt, const char *text, double lo, double hi, double *out,
                     char *err, size_t errlen) {
  if (!text || !*text || (*text >= '\t' && *text <= '\r') || *text == ' ')
    return errf(err, errlen, "%s: '%s' is not a number", opt, text ? text : "");
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end != '\0')
    return errf(err, errlen, "%s: '%s' is not a number", opt, text);
  if (isnan(v)) return errf(err, errlen, "%s: NaN is not allowed", opt);
  if (errno == ERANGE || v < lo || v > hi)
    return errf(err, errlen, "%s: %s is out of range [%g, %g]", opt, text, lo, hi);
  *out = v;
  return CLI_OK;
}

int cli_parse_ll(const char *opt, const char *text, long long lo, long long hi, long long *out,
                 char *err, size_t errlen) {
  if (!text || !*text || (*text >= '\t' && *text <= '\r') || *text == ' ')
    return errf(err, errlen, "%s: '%s' is not an integer", opt, text ? text : "");
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (end == text || *end != '\0')
    return errf(err, errlen, "%s: '%s' is not an integer", opt, text);
  if (errno == ERANGE || v < lo || v > hi)
    return errf(err, errlen, "%s: %s is out of range [%lld, %lld]", opt, text, lo, hi);
  *out = v;
  return CLI_OK;
}

/* A float option: a finite double in [lo, hi] that must not silently flush to zero in f32. */
static int parse_float(const char *opt, const char *text, double lo, double hi, float *out,
                       char *err, size_t errlen) {
  double v = 0.0; /* -O3 cannot see cli_parse_double sets it on success */
  int rc = cli_parse_double(opt, text, lo, hi, &v, err, errlen);
  if (rc) return rc;
  if (v != 0.0 && (float)v == 0.0f)
    return errf(err, errlen, "%s: %s is too small for f32 (it would become 0)", opt, text);
  *out = (float)v;
  return CLI_OK;
}

void cli_options_init(cli_options *o) {
  memset(o, 0, sizeof *o);
  o->eps = 1e-6f;
  o->casting_mode = NG_CAST_LLAMA;
  o->ignore_index = -100;
  o->reduction = CLI_RED_MEAN;
  o->grad_output = 1.0f;
}

/* ---- argument scanning ------------------------------------------------------------------------- */
/* Walks argv[1..]: options (with "--name value" or "--name=value") and positionals. */
typedef struct args {
  int argc, i;
  char **argv;
  const char *name;  /* current option name, "--eps" */
  const char *value; /* its "=value" part, or NULL */
  char buf[64];
} args;

/* Value of the current option: "=value" or the next argument. */
static int take_value(args *a, const char **v, char *err, size_t errlen) {
  if (a->value) {
    *v = a->value;
    return CLI_OK;
  }
  if (a->i + 1 >= a->argc) return errf(err, errlen, "option %s needs a value", a->name);
  *v = a->argv[++a->i];
  return CLI_OK;
}

static int no_value(const args *a, char *err, size_t errlen) {
  return a->value ? errf(err, errlen, "option %s takes no value", a->name) : CLI_OK;
}

/* The op options of SPEC.md. Returns CLI_OK when handled, -1 when `a->name` is not one, or
 * CLI_USAGE with err filled. */
static int op_option(args *a, cli_options *o, char *err, size_t errlen) {
  const char *n = a->name, *v = NULL;
  int rc;
#define VALUE()                                                                                  \
  do {                                                                                           \
    if ((rc = take_value(a, &v, err, errlen)) != 0) return rc;                                   \
  } while (0)
  if (!strcmp(n, "--eps")) {
    VALUE();
    return parse_float(n, v, 0.0, FLT_MAX, &o->eps, err, errlen);
  }
  if (!strcmp(n, "--offset")) {
    VALUE();
    return parse_float(n, v, -FLT_MAX, FLT_MAX, &o->offset, err, errlen);
  }
  if (!strcmp(n, "--casting-mode")) {
    VALUE();
    if (!strcmp(v, "llama")) o->casting_mode = NG_CAST_LLAMA;
    else if (!strcmp(v, "gemma")) o->casting_mode = NG_CAST_GEMMA;
    else if (!strcmp(v, "none")) o->casting_mode = NG_CAST_NONE;
    else return errf(err, errlen, "%s: '%s' is not llama, gemma or none", n, v);
    return CLI_OK;
  }
  if (!strcmp(n, "--groups")) {
    VALUE();
    return cli_parse_ll(n, v, 1, INT32_MAX, &o->groups, err, errlen);
  }
  if (!strcmp(n, "--ignore-index")) {
    VALUE();
    return cli_parse_ll(n, v, INT64_MIN, INT64_MAX, &o->ignore_index, err, errlen);
  }
  if (!strcmp(n, "--label-smoothing")) {
    VALUE();
    return parse_float(n, v, 0.0, 1.0, &o->label_smoothing, err, errlen);
  }
  if (!strcmp(n, "--reduction")) {
    VALUE();
    if (!strcmp(v, "mean")) o->reduction = CLI_RED_MEAN;
    else if (!strcmp(v, "sum")) o->reduction = CLI_RED_SUM;
    else if (!strcmp(v, "none")) o->reduction = CLI_RED_NONE;
    else return errf(err, errlen, "%s: '%s' is not mean, sum or none", n, v);
    return CLI_OK;
  }
  if (!strcmp(n, "--softcap")) {
    VALUE();
    return parse_float(n, v, 0.0, FLT_MAX, &o->softcap, err, errlen);
  }
  if (!strcmp(n, "--lse-square-scale")) {
    VALUE();
    return parse_float(n, v, 0.0, FLT_MAX, &o->lse_square_scale, err, errlen);
  }
  if (!strcmp(n, "--grad-output")) {
    VALUE();
    rc = parse_float(n, v, -FLT_MAX, FLT_MAX, &o->grad_output, err, errlen);
    if (!rc) o->grad_output_set = true;
    return rc;
  }
  long long *ll = !strcmp(n, "--vocab")            ? &o->vocab
                  : !strcmp(n, "--batch")          ? &o->batch
                  : !strcmp(n, "--chunk-rows")     ? &o->chunk_rows
                  : !strcmp(n, "--scratch-budget") ? &o->scratch_budget
                                                   : NULL;
  if (ll) {
    VALUE();
    return cli_parse_ll(n, v, 1, n[2] == 's' ? INT64_MAX : INT32_MAX, ll, err, errlen);
  }
#undef VALUE
  bool *flag = !strcmp(n, "--freeze-weight")   ? &o->freeze_weight
               : !strcmp(n, "--freeze-bias")   ? &o->freeze_bias
               : !strcmp(n, "--no-input-grad") ? &o->no_input_grad
               : !strcmp(n, "--no-ds-out")     ? &o->no_ds_out
                                               : NULL;
  if (!flag) return -1;
  if ((rc = no_value(a, err, errlen)) != 0) return rc;
  *flag = true;
  return CLI_OK;
}

/* Next argument: returns 1 with a->name set for an option, 2 with *pos set for a positional,
 * 0 at the end. "--" ends options. */
static int next_arg(args *a, const char **pos, bool *dashdash) {
  if (++a->i >= a->argc) return 0;
  const char *s = a->argv[a->i];
  if (!*dashdash && strcmp(s, "--") == 0) {
    *dashdash = true;
    return next_arg(a, pos, dashdash);
  }
  if (*dashdash || s[0] != '-' || s[1] == '\0') {
    *pos = s;
    return 2;
  }
  a->value = NULL;
  a->name = s;
  const char *eq = strchr(s, '=');
  if (eq && s[1] == '-' && (size_t)(eq - s) < sizeof a->buf) {
    memcpy(a->buf, s, (size_t)(eq - s));
    a->buf[eq - s] = '\0';
    a->name = a->buf;
    a->value = eq + 1;
  }
  return 1;
}

static void list_ops(char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (const cli_op *const *op = cli_ops; *op && used < len; op++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", op == cli_ops ? "" : ", ",
                             (*op)->name);
}

static int find_op(const char *name, const cli_op **op, const char *cmd) {
  if (!name) return cli_error(CLI_USAGE, "%s: missing OP (see `normgrad-cli %s --help`)", cmd, cmd);
  *op = cli_find_op(name);
  if (*op) return CLI_OK;
  char list[512];
  list_ops(list, sizeof list);
  return cli_error(CLI_USAGE, "%s: unknown op '%s' (available: %s)", cmd, name,
                   *list ? list : "none");
}

/* ---- devices ------------------------------------------------------------------------------------ */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static int cmd_devices(int argc, char **argv) {
  args a = {argc, 0, argv, NULL, NULL, {0}};
  bool json = false, dd = false;
  const char *pos;
  char err[ERRLEN];
  for (int k; (k = next_arg(&a, &pos, &dd)) != 0;) {
    if (k == 2) return cli_error(CLI_USAGE, "devices: unexpected argument '%s'", pos);
    if (!strcmp(a.name, "--json")) {
      if (no_value(&a, err, sizeof err)) return cli_error(CLI_USAGE, "devices: %s", err);
      json = true;
    } else {
      return cli_error(CLI_USAGE, "devices: unknown option '%s'", a.name);
    }
  }
  if (cli_parse_only) return CLI_OK;
  cl_uint count = 0;
  ng_status s = ng_list_devices(NULL, 0, &count);
  if (s != NG_SUCCESS) {
    cli_fail_status(s, "devices", err, sizeof err);
    return cli_error(CLI_DEVICE, "%s", err);
  }
  cl_device_id *ds = calloc(count ? count : 1, sizeof *ds);
  if (!ds) return cli_error(CLI_DEVICE, "out of host memory");
  ng_list_devices(ds, count, &count);
  cl_device_id def = NULL;
  if (count) ng_select_device(NULL, &def);
  if (json) printf("[");
  for (cl_uint i = 0; i < count; i++) {
    cli_device_desc d;
    cli_describe_device(ds[i], &d);
    if (json) {
      printf("%s\n  {\"index\": %u, \"name\": ", i ? "," : "", i);
      json_str(stdout, d.name);
      printf(", \"vendor\": ");
      json_str(stdout, d.vendor);
      printf(", \"type\": \"%s\", \"platform\": ", cli_device_type_str(d.type));
      json_str(stdout, d.platform);
      printf(", \"driver\": ");
      json_str(stdout, d.driver);
      printf(", \"version\": ");
      json_str(stdout, d.version);
      printf(", \"compute_units\": %u, \"global_mem_bytes\": %llu, \"max_alloc_bytes\": %llu, "
             "\"default\": %s}",
             d.compute_units, (unsigned long long)d.global_mem,
             (unsigned long long)d.max_alloc, ds[i] == def ? "true" : "false");
    } else {
      printf("%u%s %-11s %s\n", i, ds[i] == def ? "*" : " ", cli_device_type_str(d.type), d.name);
      printf("    vendor: %s | platform: %s | driver: %s\n", d.vendor, d.platform, d.driver);
      printf("    compute units: %u | global memory: %.1f GiB | max allocation: %.1f GiB\n",
             d.compute_units, (double)d.global_mem / (1u << 30),
             (double)d.max_alloc / (1u << 30));
    }
  }
  if (json) printf("%s]\n", count ? "\n" : "");
  else if (count) printf("(* = the default device; select with --device INDEX|NAME or "
                         "NORMGRAD_DEVICE)\n");
  free(ds);
  if (!count) return cli_error(CLI_DEVICE, "no OpenCL device found on any platform");
  return CLI_OK;
}

/* ---- run ------------------------------------------------------------------------------------------ */
static int cmd_run(int argc, char **argv) {
  args a = {argc, 0, argv, NULL, NULL, {0}};
  cli_options o;
  cli_options_init(&o);
  const char *op_name = NULL, *in = NULL, *out = NULL, *dev = NULL, *pos;
  bool dd = false;
  char err[ERRLEN];
  for (int k; (k = next_arg(&a, &pos, &dd)) != 0;) {
    if (k == 2) {
      if (op_name) return cli_error(CLI_USAGE, "run: unexpected argument '%s'", pos);
      op_name = pos;
      continue;
    }
    const char **dst = !strcmp(a.name, "--in")       ? &in
                       : !strcmp(a.name, "--out")    ? &out
                       : !strcmp(a.name, "--device") ? &dev
                                                     : NULL;
    if (dst) {
      if (take_value(&a, dst, err, sizeof err)) return cli_error(CLI_USAGE, "run: %s", err);
      continue;
    }
    int rc = op_option(&a, &o, err, sizeof err);
    if (rc < 0) return cli_error(CLI_USAGE, "run: unknown option '%s'", a.name);
    if (rc) return cli_error(rc, "run: %s", err);
  }
  const cli_op *op = NULL;
  int rc = find_op(op_name, &op, "run");
  if (rc) return rc;
  if (!in) return cli_error(CLI_USAGE, "run: missing --in IN.safetensors");
  if (!out) return cli_error(CLI_USAGE, "run: missing --out OUT.safetensors");
  if (cli_parse_only) return CLI_OK;

  cli_tensors tin = {0}, tout = {0};
  rc = cli_st_read(in, &tin, err, sizeof err);
  if (rc) return cli_error(rc, "run %s: %s", op->name, err);
  cli_env env;
  rc = cli_env_open(dev, &env, err, sizeof err);
  if (rc) {
    cli_tensors_free(&tin);
    return cli_error(rc, "run %s: %s", op->name, err);
  }
  err[0] = '\0';
  rc = op->run(&env, &o, &tin, &tout, err, sizeof err);
  cli_device_desc d;
  cli_describe_device(env.device, &d);
  cli_env_close(&env);
  cli_tensors_free(&tin);
  if (rc) {
    cli_tensors_free(&tout); /* nothing is written when the op failed */
    return cli_error(rc, "run %s: %s", op->name, *err ? err : "failed");
  }
  const char *meta[] = {"producer", "normgrad-cli " NG_VERSION_STRING, "op", op->name, NULL};
  rc = cli_st_write(out, &tout, meta, err, sizeof err);
  if (rc) {
    cli_tensors_free(&tout);
    return cli_error(rc, "run %s: %s", op->name, err);
  }
  printf("%s on %s: wrote %s\n", op->name, d.name, out);
  for (size_t i = 0; i < tout.count; i++) {
    char s[160];
    printf("  %-10s %-5s %s\n", tout.items[i].name, cli_st_dtype_name(tout.items[i].dtype),
           cli_shape_str(&tout.items[i], s, sizeof s));
  }
  cli_tensors_free(&tout);
  return CLI_OK;
}

/* ---- bench ---------------------------------------------------------------------------------------- */
static int cmd_bench(int argc, char **argv) {
  args a = {argc, 0, argv, NULL, NULL, {0}};
  cli_options o;
  cli_options_init(&o);
  const char *op_name = NULL, *dev = NULL, *pass = "backward", *pos, *v = NULL;
  const char *save = NULL, *check = NULL;
  long long rows = 0, hidden = 0;
  int dtype = -1;
  bool json = false, dd = false;
  char err[ERRLEN];
  for (int k; (k = next_arg(&a, &pos, &dd)) != 0;) {
    if (k == 2) {
      if (op_name) return cli_error(CLI_USAGE, "bench: unexpected argument '%s'", pos);
      op_name = pos;
      continue;
    }
    int rc = CLI_OK;
    if (!strcmp(a.name, "--rows") || !strcmp(a.name, "--hidden")) {
      rc = take_value(&a, &v, err, sizeof err);
      if (!rc)
        rc = cli_parse_ll(a.name, v, 1, INT32_MAX, a.name[2] == 'r' ? &rows : &hidden, err,
                          sizeof err);
    } else if (!strcmp(a.name, "--dtype")) {
      rc = take_value(&a, &v, err, sizeof err);
      if (!rc) {
        dtype = !strcmp(v, "f32") ? NG_F32 : !strcmp(v, "f16") ? NG_F16
                : !strcmp(v, "bf16")                            ? NG_BF16
                                                                : -1;
        if (dtype < 0) rc = errf(err, sizeof err, "--dtype: '%s' is not f32, f16 or bf16", v);
      }
    } else if (!strcmp(a.name, "--pass")) {
      rc = take_value(&a, &pass, err, sizeof err);
    } else if (!strcmp(a.name, "--device")) {
      rc = take_value(&a, &dev, err, sizeof err);
    } else if (!strcmp(a.name, "--save-outputs")) {
      rc = take_value(&a, &save, err, sizeof err);
    } else if (!strcmp(a.name, "--check-outputs")) {
      rc = take_value(&a, &check, err, sizeof err);
    } else if (!strcmp(a.name, "--json")) {
      rc = no_value(&a, err, sizeof err);
      json = true;
    } else {
      rc = op_option(&a, &o, err, sizeof err);
      if (rc < 0) return cli_error(CLI_USAGE, "bench: unknown option '%s'", a.name);
    }
    if (rc) return cli_error(rc, "bench: %s", err);
  }
  if (save && check)
    return cli_error(CLI_USAGE, "bench: --save-outputs and --check-outputs: one at a time");
  if ((save && !*save) || (check && !*check))
    return cli_error(CLI_USAGE, "bench: --%s-outputs: an empty file name", save ? "save" : "check");
  const cli_op *op = NULL;
  int rc = find_op(op_name, &op, "bench");
  if (rc) return rc;
  if (!rows) return cli_error(CLI_USAGE, "bench: missing --rows R");
  if (!hidden) return cli_error(CLI_USAGE, "bench: missing --hidden N");
  if (dtype < 0) return cli_error(CLI_USAGE, "bench: missing --dtype f32|f16|bf16");
  if (!op->bench_setup) return cli_error(CLI_USAGE, "bench: op '%s' has no benchmark", op->name);
  cli_bench_spec spec = {(size_t)rows, (size_t)hidden, (ng_dtype)dtype, o.freeze_weight,
                         o.freeze_bias, 0};
  if (cli_parse_only) return CLI_OK;
  /* the reference outputs are read and checked before any device work */
  cli_tensors ref = {0};
  if (check && (rc = cli_st_read(check, &ref, err, sizeof err)))
    return cli_error(rc, "bench: --check-outputs: %s", err);
  const cli_bench_io io = {save, check ? &ref : NULL};
  cli_env env;
  rc = cli_env_open(dev, &env, err, sizeof err);
  if (rc) {
    cli_tensors_free(&ref);
    return cli_error(rc, "bench %s: %s", op->name, err);
  }
  rc = cli_bench(&env, op, &spec, &o, pass, json, &io);
  cli_env_close(&env);
  cli_tensors_free(&ref);
  return rc;
}

/* ---- inspect -------------------------------------------------------------------------------------- */
static int cmd_inspect(int argc, char **argv) {
  args a = {argc, 0, argv, NULL, NULL, {0}};
  const char *file = NULL, *pos;
  bool dd = false;
  for (int k; (k = next_arg(&a, &pos, &dd)) != 0;) {
    if (k == 1) return cli_error(CLI_USAGE, "inspect: unknown option '%s'", a.name);
    if (file) return cli_error(CLI_USAGE, "inspect: unexpected argument '%s'", pos);
    file = pos;
  }
  if (!file) return cli_error(CLI_USAGE, "inspect: missing FILE");
  if (cli_parse_only) return CLI_OK;
  cli_tensors ts = {0};
  char err[ERRLEN];
  int rc = cli_st_read(file, &ts, err, sizeof err);
  if (rc) return cli_error(rc, "inspect: %s", err);
  printf("%s: %zu tensor%s\n", file, ts.count, ts.count == 1 ? "" : "s");
  printf("  %-16s %-5s %-18s %14s %14s %14s\n", "name", "dtype", "shape", "min", "max", "mean");
  for (size_t i = 0; i < ts.count; i++) {
    const cli_tensor *t = &ts.items[i];
    char s[160];
    size_t n = cli_tensor_numel(t), nonfinite = 0;
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    for (size_t j = 0; j < n; j++) {
      double x = cli_tensor_get(t, j);
      if (!isfinite(x)) {
        nonfinite++;
        continue;
      }
      mn = x < mn ? x : mn;
      mx = x > mx ? x : mx;
      sum += x;
    }
    printf("  %-16s %-5s %-18s", t->name, cli_st_dtype_name(t->dtype),
           cli_shape_str(t, s, sizeof s));
    if (n > nonfinite)
      printf(" %14.6g %14.6g %14.6g", mn, mx, sum / (double)(n - nonfinite));
    else
      printf(" %14s %14s %14s", "-", "-", "-");
    if (nonfinite) printf("  (%zu NaN/Inf)", nonfinite);
    printf("\n");
  }
  cli_tensors_free(&ts);
  return CLI_OK;
}

/* ---- the table ------------------------------------------------------------------------------------ */
#define OP_OPTIONS_HELP                                                                          \
  "Op options (each op uses the ones that apply to it; see docs/cli.md):\n"                      \
  "  --eps F                 variance epsilon (default 1e-6)\n"                                  \
  "  --offset F              RMSNorm weight offset: w' = offset + w (default 0)\n"               \
  "  --casting-mode M        RMSNorm rounding: llama (default), gemma, none\n"                   \
  "  --groups G              GroupNorm group count\n"                                            \
  "  --batch B               GroupNorm bench: samples, x = [B, rows, hidden] (default 1)\n"      \
  "  --no-ds-out             fused-add-rmsnorm bench: the backward without ds_out (last layer)\n" \
  "  --freeze-weight         no weight gradient (dweight absent)\n"                              \
  "  --freeze-bias           no bias gradient (dbias absent)\n"                                  \
  "  --no-input-grad         FLCE: no dinput\n"                                                  \
  "  --ignore-index I        FLCE: target value to ignore (default -100)\n"                      \
  "  --label-smoothing F     FLCE: in [0, 1] (default 0)\n"                                      \
  "  --reduction R           FLCE: mean (default), sum, none\n"                                  \
  "  --softcap F             FLCE: logit soft-capping c·tanh(z/c); 0 = off\n"                    \
  "  --lse-square-scale F    FLCE: z-loss weight (default 0)\n"                                  \
  "  --grad-output F         FLCE: scalar upstream gradient (default 1)\n"                       \
  "  --vocab V               FLCE bench: vocabulary size (default 32000)\n"                      \
  "  --chunk-rows N          FLCE: rows per chunk (default: the most the scratch budget allows)\n" \
  "  --scratch-budget B      FLCE: bytes the op may allocate (default 1/64 of device memory,\n"  \
  "                          at least 256 MiB)\n"

static int cmd_help(int argc, char **argv);

/* The subcommands. To add one (e.g. `cache`): write `int cli_cmd_cache(int argc, char **argv)`
 * in its own file, declare it in cli.h, and add its row here. */
static const cli_command commands[] = {
    {"devices", cmd_devices, "list OpenCL devices (indices for --device)",
     "usage: normgrad-cli devices [--json]\n"
     "\n"
     "Lists every OpenCL device of every platform: index (for --device / NORMGRAD_DEVICE), type,\n"
     "name, vendor, platform, driver, compute units, global memory. '*' marks the device used\n"
     "when none is selected (the first GPU, else the first device).\n"
     "  --json   one JSON array of objects on stdout\n"
     "Exit: 0, or 3 when no device is found.\n"},
    {"run", cmd_run, "run an op's forward (and backward) on a safetensors file",
     "usage: normgrad-cli run OP --in IN.safetensors --out OUT.safetensors [--device SEL]\n"
     "                        [op options]\n"
     "\n"
     "Reads the op's input tensors from IN, runs the forward and, when the gradient input\n"
     "(`dy`) is present, the backward, and writes the outputs to OUT (written to a temporary\n"
     "file and renamed: OUT is created only when everything succeeded).\n"
     "  rmsnorm: inputs x [..., N], weight [N] (optional), dy like x (optional)\n"
     "           outputs y, rstd (F32, x's shape without the last dim; [1] for 1-D x),\n"
     "           dx, dweight (absent without weight or with --freeze-weight)\n"
     "  flce:    inputs input [..., H], weight [V, H] F32, target (input's shape without H;\n"
     "           I32/I64), bias [V], ce_weight [V], grad_output ([] or [1]; like target for\n"
     "           --reduction none), the last three optional; outputs loss, z_loss (F32; []\n"
     "           or like target), dinput (unless --no-input-grad), dweight (unless\n"
     "           --freeze-weight), dbias (with bias, unless --freeze-bias)\n"
     "  --device SEL   index from `normgrad-cli devices` or a name substring\n"
     "                 (default: NORMGRAD_DEVICE, else the first GPU, else the first device)\n" OP_OPTIONS_HELP
     "Exit: 0 ok, 2 usage or bad input, 3 device or OpenCL failure.\n"},
    {"bench", cmd_bench, "time an op's forward or backward pass",
     "usage: normgrad-cli bench OP --rows R --hidden N --dtype f32|f16|bf16 [--freeze-weight]\n"
     "                          [--freeze-bias] [--pass forward|backward] [--json]\n"
     "                          [--save-outputs FILE | --check-outputs FILE]\n"
     "                          [--device SEL] [op options]\n"
     "\n"
     "Random data of rows x hidden (weights f32). The chosen pass (default backward; the passes\n"
     "before it run once first) is warmed up 3 times, then timed >= 20 times (more for short\n"
     "passes, about 1.5 s in all) by the OpenCL profiling times of its kernels; the median is\n"
     "reported with the bytes it must move, GB/s, and the device's copy bandwidth measured in\n"
     "the same run (a 16-byte-element copy kernel over 256 MiB, and again over the pass's own\n"
     "byte count, which pays one kernel's start and drain as the pass does). Working sets under\n"
     "64 MiB are evicted from caches between repetitions by overwriting a 128 MiB buffer.\n"
     "  --json   exactly one JSON object on stdout (op, pass, rows, hidden, dtype, frozen,\n"
     "           frozen_bias, bytes, median_ms, gbps, copy_gbps, ratio, copy_same_gbps,\n"
     "           ratio_same, device, …)\n"
     "  --save-outputs FILE   write the pass's outputs after the timed runs (safetensors,\n"
     "           tensors out0.. in the pass's order; the random inputs are the same in every\n"
     "           run of the same op, pass, shape, dtype and flags)\n"
     "  --check-outputs FILE  compare them with FILE's instead (another build, launch or\n"
     "           NORMGRAD_TUNE): reports the worst difference as a multiple of the allowed one\n"
     "           (relative 2^-6 for 16-bit values, 1e-4 for f32, as `tune` checks; <= 1 agrees;\n"
     "           JSON outputs_check, null for a NaN where FILE has none) and the output it is\n"
     "           in (dx, dweight, ...: JSON outputs_check_worst); the exit code stays 0\n" OP_OPTIONS_HELP},
    {"inspect", cmd_inspect, "list the tensors of a safetensors file",
     "usage: normgrad-cli inspect FILE\n"
     "\n"
     "Checks FILE like `run` does and prints each tensor's name, dtype and shape, with the\n"
     "minimum, maximum and mean of its finite values (and the count of NaN/Inf ones).\n"},
    {"cache", cli_cmd_cache, "list, clear or fill the on-disk program cache", cli_cache_usage},
    {"tune", cli_cmd_tune, "search an op's launch parameters and store the fastest",
     cli_tune_usage},
    {"help", cmd_help, "help for a subcommand", "usage: normgrad-cli help [SUBCOMMAND]\n"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
  fprintf(f,
          "normgrad-cli %s: OpenCL training kernels for LLM norm layers and fused linear + "
          "cross-entropy\n"
          "\n"
          "usage: normgrad-cli SUBCOMMAND [options]   (normgrad-cli SUBCOMMAND --help)\n"
          "       normgrad-cli --version\n"
          "\n"
          "subcommands:\n",
          NG_VERSION_STRING);
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
  char list[512];
  list_ops(list, sizeof list);
  fprintf(f, "\nops: %s\nexit codes: 0 ok, 2 usage or bad input, 3 device or OpenCL failure\n",
          list);
}

static const cli_command *find_command(const char *name) {
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (!strcmp(commands[i].name, name)) return &commands[i];
  return NULL;
}

static int cmd_help(int argc, char **argv) {
  if (argc < 2) {
    usage(stdout);
    return CLI_OK;
  }
  if (argc > 2) return cli_error(CLI_USAGE, "help: unexpected argument '%s'", argv[2]);
  const cli_command *c = find_command(argv[1]);
  if (!c) return cli_error(CLI_USAGE, "help: unknown subcommand '%s'", argv[1]);
  fputs(c->usage, stdout);
  return CLI_OK;
}

/* Every subcommand's exit goes through here: output that could not be written (a full disk, a
 * closed pipe) is a failure, not a success with a truncated result. */
static int finish(int rc) {
  if (fflush(stdout) != 0 && rc == CLI_OK) return cli_error(CLI_USAGE, "cannot write stdout");
  return rc;
}

int cli_main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  const char *a1 = argv[1];
  if (!strcmp(a1, "--help") || !strcmp(a1, "-h")) /* `--help SUB` is `help SUB` */
    return finish(cmd_help(argc - 1, argv + 1));
  if (!strcmp(a1, "--version")) {
    if (argc > 2) return cli_error(CLI_USAGE, "--version: unexpected argument '%s'", argv[2]);
    printf("normgrad-cli %s (library %s)\n", NG_VERSION_STRING, ng_version_string());
    return finish(CLI_OK);
  }
  const cli_command *c = find_command(a1);
  if (!c) {
    if (a1[0] == '-') return cli_error(CLI_USAGE, "unknown option '%s' (try --help)", a1);
    return cli_error(CLI_USAGE, "unknown subcommand '%s' (try --help)", a1);
  }
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--")) break;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(c->usage, stdout);
      return finish(CLI_OK);
    }
  }
  return finish(c->fn(argc - 1, argv + 1));
}
