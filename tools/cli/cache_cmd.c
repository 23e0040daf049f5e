/* normgrad-cli cache list|clear|prebuild: the on-disk program cache (docs/cache.md). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char cli_cache_usage[] =
    "usage: normgrad-cli cache list [--dir DIR] [--json]\n"
    "       normgrad-cli cache clear [--dir DIR]\n"
    "       normgrad-cli cache prebuild [OP...] [--dir DIR] [--device SEL]\n"
    "\n"
    "The on-disk program cache (docs/cache.md): compiled kernels kept between runs, keyed by\n"
    "device, driver version, normgrad version, kernel source and build options. The folder is\n"
    "NORMGRAD_CACHE_DIR (\"off\" turns the cache off), else $XDG_CACHE_HOME/normgrad, else\n"
    "~/.cache/normgrad; NORMGRAD_CACHE_MAX_BYTES bounds its size (default 512M).\n"
    "  list       every entry, most recently used first: program, build options, size, last\n"
    "             use, device and driver, and whether its checksums hold\n"
    "  clear      remove every entry (other files in the folder are left alone)\n"
    "  prebuild   build every program variant the OPs (default: all) can use on the device and\n"
    "             store them, so later runs compile nothing\n"
    "  --dir DIR      use DIR instead of the folder above\n"
    "  --json         list: one JSON array of objects on stdout\n"
    "  --device SEL   prebuild: index from `normgrad-cli devices` or a name substring\n"
    "Exit: 0 ok, 2 usage, cache off or folder not readable/writable, 3 device or build failure.\n";

static void json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

typedef struct list_state {
  bool json;
  unsigned count, bad;
  uint64_t bytes;
} list_state;

static int print_entry(const ng_cache_entry *e, void *user) {
  list_state *st = user;
  char when[32] = "?";
  const time_t t = (time_t)e->last_used;
  struct tm tm;
  if (localtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  if (st->json) {
    printf("%s\n  {\"program\": ", st->count ? "," : "");
    json_str(e->program);
    printf(", \"options\": ");
    json_str(e->options);
    printf(", \"bytes\": %llu, \"last_used\": %lld, \"device\": ", (unsigned long long)e->bytes,
           (long long)e->last_used);
    json_str(e->device);
    printf(", \"driver\": ");
    json_str(e->driver);
    printf(", \"platform\": ");
    json_str(e->platform);
    printf(", \"normgrad\": ");
    json_str(e->normgrad);
    printf(", \"valid\": %s, \"path\": ", e->valid ? "true" : "false");
    json_str(e->path);
    printf("}");
  } else {
    printf("%-8s %9.1f KiB  %s  %s\n", *e->program ? e->program : "?",
           (double)e->bytes / 1024.0, when, e->valid ? "ok" : "CORRUPT (rebuilt when next used)");
    printf("    %s\n", *e->options ? e->options : "(unreadable)");
    if (*e->device)
      printf("    %s | driver %s | normgrad %s\n", e->device, e->driver, e->normgrad);
  }
  st->count++;
  st->bad += !e->valid;
  st->bytes += e->bytes;
  return 0;
}

/* The folder: --dir, else the environment's. "" when the cache is off. */
static int folder(const char *dir, char *buf, size_t len, const char *cmd) {
  if (dir) {
    snprintf(buf, len, "%s", dir);
    return CLI_OK;
  }
  ng_status s = ng_cache_default_dir(buf, len);
  if (s != NG_SUCCESS)
    return cli_error(CLI_USAGE, "cache %s: %s (%s)", cmd, ng_status_message(s),
                     ng_last_error_detail());
  if (!*buf)
    return cli_error(CLI_USAGE, "cache %s: the disk cache is off (NORMGRAD_CACHE_DIR=off, or no "
                     "HOME); name a folder with --dir", cmd);
  return CLI_OK;
}

static int do_list(const char *dir, bool json) {
  char d[4096];
  int rc = folder(dir, d, sizeof d, "list");
  if (rc || cli_parse_only) return rc;
  list_state st = {json, 0, 0, 0};
  if (json) printf("[");
  ng_status s = ng_cache_list(d, print_entry, &st);
  if (json) printf("%s]\n", st.count ? "\n" : "");
  if (s != NG_SUCCESS)
    return cli_error(CLI_USAGE, "cache list: %s", ng_last_error_detail());
  if (!json) {
    printf("%s: %u entr%s, %.1f MiB", d, st.count, st.count == 1 ? "y" : "ies",
           (double)st.bytes / (1024.0 * 1024.0));
    if (st.bad) printf(", %u corrupt", st.bad);
    printf("\n");
  }
  return CLI_OK;
}

static int do_clear(const char *dir) {
  char d[4096];
  int rc = folder(dir, d, sizeof d, "clear");
  if (rc || cli_parse_only) return rc;
  uint64_t removed = 0;
  ng_status s = ng_cache_clear(d, &removed);
  printf("%s: removed %llu file%s\n", d, (unsigned long long)removed, removed == 1 ? "" : "s");
  if (s != NG_SUCCESS) return cli_error(CLI_USAGE, "cache clear: %s", ng_last_error_detail());
  return CLI_OK;
}

static int do_prebuild(const char *dir, const char *dev, char **ops, int nops) {
  char d[4096], err[1024];
  int rc = folder(dir, d, sizeof d, "prebuild");
  if (rc) return rc;
  for (int i = 0; i < nops; i++) {
    bool known = false;
    for (unsigned k = 0; ng_prebuild_op_name(k); k++) known |= !strcmp(ops[i], ng_prebuild_op_name(k));
    if (!known) {
      char list[512] = "";
      size_t used = 0;
      for (unsigned k = 0; ng_prebuild_op_name(k) && used < sizeof list; k++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", k ? ", " : "",
                                 ng_prebuild_op_name(k));
      return cli_error(CLI_USAGE, "cache prebuild: unknown op '%s' (available: %s)", ops[i], list);
    }
  }
  if (cli_parse_only) return CLI_OK;
  cli_env env;
  rc = cli_env_open(dev, &env, err, sizeof err);
  if (rc) return cli_error(rc, "cache prebuild: %s", err);
  ng_status s = ng_context_set_cache_dir(env.ctx, d);
  cli_device_desc desc;
  cli_describe_device(env.device, &desc);
  printf("prebuilding on %s into %s\n", desc.name, d);
  unsigned total = 0;
  const int n = nops ? nops : 1;
  for (int i = 0; i < n && s == NG_SUCCESS; i++) {
    ng_context_stats before, after;
    ng_context_get_stats(env.ctx, &before);
    unsigned programs = 0;
    const double t0 = cli_now_s();
    s = ng_prebuild(env.ctx, nops ? ops[i] : NULL, &programs);
    const double t1 = cli_now_s();
    ng_context_get_stats(env.ctx, &after);
    if (s != NG_SUCCESS) break;
    printf("  %-10s %3u programs: %llu built, %llu from the cache, %llu already in memory "
           "(%.1f s)\n",
           nops ? ops[i] : "all ops", programs,
           (unsigned long long)(after.programs_built - before.programs_built),
           (unsigned long long)(after.disk_hits - before.disk_hits),
           (unsigned long long)(after.cache_hits - before.cache_hits), t1 - t0);
    total += programs;
  }
  ng_context_stats st;
  ng_context_get_stats(env.ctx, &st);
  if (s != NG_SUCCESS) {
    rc = cli_fail_status(s, "cache prebuild", err, sizeof err);
    cli_env_close(&env);
    return cli_error(rc, "%s", err);
  }
  cli_env_close(&env);
  if (st.disk_errors)
    return cli_error(CLI_USAGE, "cache prebuild: %llu of %u programs could not be stored in %s "
                     "(not writable, or full?)", (unsigned long long)st.disk_errors, total, d);
  return CLI_OK;
}

int cli_cmd_cache(int argc, char **argv) {
  const char *action = NULL, *dir = NULL, *dev = NULL;
  bool json = false, dashdash = false;
  char **ops = calloc((size_t)argc + 1, sizeof *ops);
  int nops = 0;
  if (!ops) return cli_error(CLI_DEVICE, "out of host memory");
  int rc = CLI_OK;
  for (int i = 1; i < argc && rc == CLI_OK; i++) {
    const char *a = argv[i];
    if (!dashdash && !strcmp(a, "--")) {
      dashdash = true;
    } else if (!dashdash && a[0] == '-' && a[1]) {
      const char *eq = strchr(a, '=');
      const size_t nl = eq ? (size_t)(eq - a) : strlen(a);
      const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
      if ((nl == 5 && !strncmp(a, "--dir", 5)) || (nl == 8 && !strncmp(a, "--device", 8))) {
        if (!v) rc = cli_error(CLI_USAGE, "cache: option %.*s needs a value", (int)nl, a);
        else if (nl == 5) dir = v;
        else dev = v;
        if (!eq) i++;
      } else if (!strcmp(a, "--json")) {
        json = true;
      } else {
        rc = cli_error(CLI_USAGE, "cache: unknown option '%s'", a);
      }
    } else if (!action) {
      action = a;
    } else {
      ops[nops++] = argv[i];
    }
  }
  if (rc == CLI_OK && dir && !*dir) rc = cli_error(CLI_USAGE, "cache: --dir needs a folder name");
  if (rc == CLI_OK && !action)
    rc = cli_error(CLI_USAGE, "cache: missing action: list, clear or prebuild");
  if (rc == CLI_OK) {
    const bool list = !strcmp(action, "list"), clear = !strcmp(action, "clear"),
               pre = !strcmp(action, "prebuild");
    if (!list && !clear && !pre)
      rc = cli_error(CLI_USAGE, "cache: unknown action '%s' (list, clear or prebuild)", action);
    else if (!pre && nops)
      rc = cli_error(CLI_USAGE, "cache %s: unexpected argument '%s'", action, ops[0]);
    else if (json && !list)
      rc = cli_error(CLI_USAGE, "cache %s: --json is for list", action);
    else if (dev && !pre)
      rc = cli_error(CLI_USAGE, "cache %s: --device is for prebuild", action);
    else
      rc = list ? do_list(dir, json) : clear ? do_clear(dir) : do_prebuild(dir, dev, ops, nops);
  }
  free(ops);
  return rc;
}
