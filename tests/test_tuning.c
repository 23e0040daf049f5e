/* The tuned-parameter table (tuning.txt) and NORMGRAD_TUNE: what ng_tuning_store writes, later
 * contexts on the device use (seen through the RMSNorm scratch size, which is groups·4·n bytes);
 * overrides beat the table; NG_TUNE_TABLE=1 ignores it; a line of one dtype comes before one for
 * every dtype, and a line of row lengths before the bucket's; damaged, foreign or unsafe lines are ignored, never fatal; ng_tuning_lookup
 * reports what the tables give; a malformed NORMGRAD_TUNE fails context creation with a clear
 * status. */
#include "common/ng_test.h"
#include "ng_internal.h" /* ng_tuned_lookup, to see each dtype's line; NG_SCRATCH_VEC_PAD */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

/* The built-in table keys on the device's exact name; these tests are about tuning.txt and
 * NORMGRAD_TUNE, and their expected scratch sizes are the rules', so an H200 running them must
 * not find its entries (a split launch at n = 1000 in f32 has another scratch) */
static ng_context *off_table(ng_context *c) {
  snprintf(c->info.name, sizeof c->info.name, "%s", "normgrad test device");
  return c;
}

static ng_context *fresh(void) {
  ng_test_env *e = ng_test_env_get();
  ng_context *c = NULL;
  NG_OK(ng_context_create(e->cl_ctx, e->device, &c));
  return off_table(c);
}

/* the partial rows' bytes: the size query's, less the headroom for an unaligned offset */
static size_t scratch(ng_context *c, size_t n) {
  ng_rmsnorm_params p = {4096, n, 1e-6f, 0.0f, NG_CAST_LLAMA};
  size_t b = 0;
  NG_OK(ng_rmsnorm_backward_scratch_size(c, &p, 1, &b));
  assert_true(b > NG_SCRATCH_VEC_PAD);
  return b - NG_SCRATCH_VEC_PAD;
}

static void tuning_path(char *buf, size_t len) { snprintf(buf, len, "%s/tuning.txt", dir); }

/* The tuned lines in the file */
static int lines_in_file(void) {
  char p[300], line[512];
  tuning_path(p, sizeof p);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  int entries = 0;
  while (fgets(line, sizeof line, f)) entries += strncmp(line, "ng-tune-1 ", 10) == 0;
  fclose(f);
  return entries;
}

static int setup(void **st) {
  (void)st;
  snprintf(dir, sizeof dir, "/tmp/ng-tuning-%ld", (long)getpid());
  setenv("NORMGRAD_CACHE_DIR", dir, 1);
  unsetenv("NORMGRAD_TUNE");
  return 0;
}

static int teardown(void **st) {
  (void)st;
  char p[300];
  tuning_path(p, sizeof p);
  unlink(p);
  rmdir(dir);
  unsetenv("NORMGRAD_CACHE_DIR");
  return 0;
}

static void test_store_then_use(void **st) {
  (void)st;
  ng_context *c = fresh();
  const size_t def1000 = scratch(c, 1000), def3000 = scratch(c, 3000);
  unsigned v[7] = {0};
  v[NG_TUNE_GROUPS] = 3;
  NG_OK(ng_tuning_store(c, "rmsnorm.bwd", 1000, v, "test"));
  /* the storing context keeps its launches */
  assert_int_equal(scratch(c, 1000), def1000);
  ng_context_release(c);

  c = fresh();
  assert_int_equal(scratch(c, 1000), 3 * 4 * 1000);
  assert_int_equal(scratch(c, 600), 3 * 4 * 600);   /* same bucket [512, 1024) */
  assert_int_equal(scratch(c, 3000), def3000);      /* another bucket */
  /* an override beats the table; NG_TUNE_TABLE=1 ignores it */
  NG_OK(ng_context_override(c, NG_TUNE_GROUPS, 5));
  assert_int_equal(scratch(c, 1000), 5 * 4 * 1000);
  NG_OK(ng_context_override(c, NG_TUNE_GROUPS, NG_TUNE_AUTO));
  NG_OK(ng_context_override(c, NG_TUNE_TABLE, 1));
  assert_int_equal(scratch(c, 1000), def1000);
  NG_OK(ng_context_override(c, NG_TUNE_TABLE, NG_TUNE_AUTO));
  assert_int_equal(scratch(c, 1000), 3 * 4 * 1000);

  /* a second store for the same key replaces the first; other keys stay */
  v[NG_TUNE_GROUPS] = 7;
  NG_OK(ng_tuning_store(c, "rmsnorm.bwd", 700, v, NULL));
  v[NG_TUNE_GROUPS] = 2;
  NG_OK(ng_tuning_store(c, "fused-add-rmsnorm.bwd", 1000, v, NULL));
  ng_context_release(c);
  c = fresh();
  assert_int_equal(scratch(c, 1000), 7 * 4 * 1000);
  assert_int_equal(lines_in_file(), 2);
  ng_context_release(c);
}

static void test_bad_store(void **st) {
  (void)st;
  ng_context *c = fresh();
  unsigned v[7] = {0};
  NG_EXPECT_STATUS(ng_tuning_store(NULL, "rmsnorm.bwd", 8, v, NULL), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_tuning_store(c, "rmsnorm.bwd", 8, NULL, NULL), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_tuning_store(c, "flce", 8, v, NULL), NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(ng_tuning_store(c, NULL, 8, v, NULL), NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(ng_tuning_store(c, "rmsnorm.bwd", 0, v, NULL), NG_ERR_INVALID_VALUE);
  v[NG_TUNE_WORKGROUP] = 48; /* neither a power of two nor a multiple of 32 */
  NG_EXPECT_STATUS(ng_tuning_store(c, "rmsnorm.bwd", 8, v, NULL), NG_ERR_INVALID_VALUE);
  v[NG_TUNE_WORKGROUP] = 4128; /* a multiple of 32 past 4096 */
  NG_EXPECT_STATUS(ng_tuning_store(c, "rmsnorm.bwd", 8, v, NULL), NG_ERR_INVALID_VALUE);
  v[NG_TUNE_WORKGROUP] = 0;
  v[NG_TUNE_REG_COLS] = 3;
  NG_EXPECT_STATUS(ng_tuning_store(c, "rmsnorm.bwd", 8, v, NULL), NG_ERR_INVALID_VALUE);
  v[NG_TUNE_REG_COLS] = 0;
  NG_OK(ng_context_set_cache_dir(c, NULL));
  NG_EXPECT_STATUS(ng_tuning_store(c, "rmsnorm.bwd", 8, v, NULL), NG_ERR_INVALID_VALUE);
  NG_OK(ng_context_set_cache_dir(c, "/proc/no-such-folder/x"));
  NG_EXPECT_STATUS(ng_tuning_store(c, "rmsnorm.bwd", 8, v, NULL), NG_ERR_IO);
  ng_context_release(c);
}

/* Lines for another device, malformed lines (numbers out of range or signed included), values
 * the device cannot take, and a file others can write are all ignored. */
static void test_damaged_file(void **st) {
  (void)st;
  ng_context *c = fresh();
  const size_t def = scratch(c, 1000);
  unsigned v[7] = {0};
  v[NG_TUNE_GROUPS] = 3;
  NG_OK(ng_tuning_store(c, "rmsnorm.bwd", 1000, v, NULL)); /* creates the file and folder */
  ng_context_release(c);
  char p[300], line[512];
  tuning_path(p, sizeof p);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  char id[64] = "";
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "ng-tune-1 %63s", id) == 1) break;
  fclose(f);
  f = fopen(p, "w");
  assert_non_null(f);
  fprintf(f, "ng-tune-1 0000000000000000 rmsnorm.bwd 9 groups=3\n"); /* another device */
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 groups=x\n", id);          /* not a number */
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 wg=48\n", id); /* not a power of 2 nor of 32 */
  fprintf(f, "ng-tune-1 %s nosuchop.bwd 9 groups=3\n", id);         /* unknown kind */
  /* numbers that sscanf's %u would have wrapped or taken with a sign, and items run together:
   * each would have meant groups=3 on row lengths of 2^9 */
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 groups=4294967299\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 4294967305 groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 groups=+3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 groups=-4294967293\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 groups= 3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 wg=64groups=3\n", id);
  /* a dtype that the row kernels do not take, or not where the key has it */
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 dtype=bf17 groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 dtype=i32 groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 dtype= groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 dtype=bf16groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 groups=3 dtype=bf16\n", id);
  /* row lengths that are no range, not in the line's bucket, or not where the key has them */
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 n=0 groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 n=1000-999 groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 10 n=1000 groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 n=1000x groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 n= groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 n=1000- groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 n=-1000 groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 n=1000groups=3\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 groups=3 n=1000\n", id);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 n=1000 dtype=bf16 groups=3\n", id);
  fprintf(f, "garbage\n\n#comment\n");
  fclose(f);
  chmod(p, 0600);
  c = fresh();
  assert_int_equal(scratch(c, 1000), def);
  ng_context_release(c);
  /* a valid line in a file others may write is not trusted */
  f = fopen(p, "w");
  assert_non_null(f);
  fprintf(f, "ng-tune-1 %s rmsnorm.bwd 9 groups=3\n", id);
  fclose(f);
  chmod(p, 0666);
  c = fresh();
  assert_int_equal(scratch(c, 1000), def);
  ng_context_release(c);
  chmod(p, 0600);
  c = fresh();
  assert_int_equal(scratch(c, 1000), 3 * 4 * 1000);
  ng_context_release(c);
}

/* The groups a later context's table gives calls of dtype d at n = 1000 (0: none) */
static unsigned tuned_groups(ng_dtype d) {
  ng_context *c = fresh();
  unsigned v[NG_TUNE_SLOTS] = {0};
  const unsigned g = ng_tuned_lookup(c, "rmsnorm.bwd", d, 1000, v) ? v[NG_TUNE_GROUPS] : 0;
  ng_context_release(c);
  return g;
}

/* Lines of one dtype (ng_tuning_store_dtype, what `normgrad-cli tune` stores) serve that dtype
 * alone and come before a line for every dtype; a later store for the same dtype replaces its
 * line, one for every dtype replaces all of the bucket's lines. */
static void test_dtype_lines(void **st) {
  (void)st;
  ng_context *c = fresh();
  const size_t def = scratch(c, 1000);
  unsigned v[7] = {0};
  v[NG_TUNE_GROUPS] = 3;
  NG_OK(ng_tuning_store_dtype(c, "rmsnorm.bwd", NG_BF16, 1000, v, "bf16"));
  assert_int_equal(tuned_groups(NG_BF16), 3);
  assert_int_equal(tuned_groups(NG_F16), 0);
  assert_int_equal(tuned_groups(NG_F32), 0);
  ng_context_release(c);
  c = fresh(); /* the scratch query asks every dtype: f32's default launch is the largest */
  assert_int_equal(scratch(c, 1000), def);
  v[NG_TUNE_GROUPS] = 5;
  NG_OK(ng_tuning_store(c, "rmsnorm.bwd", 1000, v, "every")); /* replaces the bf16 line */
  assert_int_equal(lines_in_file(), 1);
  v[NG_TUNE_GROUPS] = 9;
  NG_OK(ng_tuning_store_dtype(c, "rmsnorm.bwd", NG_F16, 600, v, NULL)); /* the same bucket */
  v[NG_TUNE_GROUPS] = 7;
  NG_OK(ng_tuning_store_dtype(c, "rmsnorm.bwd", NG_BF16, 1000, v, NULL));
  v[NG_TUNE_GROUPS] = 2;
  NG_OK(ng_tuning_store_dtype(c, "rmsnorm.bwd", NG_BF16, 1000, v, NULL)); /* replaces the 7 */
  assert_int_equal(lines_in_file(), 3);
  assert_int_equal(tuned_groups(NG_BF16), 2);
  assert_int_equal(tuned_groups(NG_F16), 9);
  assert_int_equal(tuned_groups(NG_F32), 5);
  ng_context_release(c);
  c = fresh();
  assert_int_equal(scratch(c, 1000), 9 * 4 * 1000); /* f16's, the largest grid */
  NG_EXPECT_STATUS(ng_tuning_store_dtype(c, "rmsnorm.bwd", NG_I32, 1000, v, NULL),
                   NG_ERR_UNSUPPORTED_DTYPE);
  NG_EXPECT_STATUS(ng_tuning_store_dtype(NULL, "rmsnorm.bwd", NG_BF16, 1000, v, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_tuning_store_dtype(c, "nosuch", NG_BF16, 1000, v, NULL),
                   NG_ERR_INVALID_VALUE);
  v[NG_TUNE_GROUPS] = 4;
  NG_OK(ng_tuning_store(c, "rmsnorm.bwd", 1000, v, NULL)); /* every dtype: replaces all three */
  assert_int_equal(lines_in_file(), 1);
  assert_int_equal(tuned_groups(NG_F16), 4);
  ng_context_release(c);
}

/* The groups a later context's table gives calls of dtype d at n (0: none) */
static unsigned tuned_groups_at(ng_dtype d, size_t n) {
  ng_context *c = fresh();
  unsigned v[NG_TUNE_SLOTS] = {0};
  const unsigned g = ng_tuned_lookup(c, "rmsnorm.bwd", d, n, v) ? v[NG_TUNE_GROUPS] : 0;
  ng_context_release(c);
  return g;
}

/* Lines of row lengths (ng_tuning_store_range, what `normgrad-cli tune` stores: the length it
 * measured) serve those lengths alone and come before the bucket's lines, the narrowest first;
 * a store of the same lengths replaces its line, a store of the bucket its lines of lengths. */
static void test_length_lines(void **st) {
  (void)st;
  ng_context *c = fresh();
  unsigned v[7] = {0};
  v[NG_TUNE_GROUPS] = 5;
  NG_OK(ng_tuning_store_dtype(c, "rmsnorm.bwd", NG_BF16, 600, v, NULL)); /* 512..1023 */
  v[NG_TUNE_GROUPS] = 3;
  NG_OK(ng_tuning_store_range(c, "rmsnorm.bwd", NG_BF16, 1000, 1000, v, "one length"));
  v[NG_TUNE_GROUPS] = 7;
  NG_OK(ng_tuning_store_range(c, "rmsnorm.bwd", NG_BF16, 900, 1010, v, NULL));
  assert_int_equal(lines_in_file(), 3);
  assert_int_equal(tuned_groups_at(NG_BF16, 1000), 3); /* the narrowest that holds it */
  assert_int_equal(tuned_groups_at(NG_BF16, 950), 7);
  assert_int_equal(tuned_groups_at(NG_BF16, 1011), 5); /* the bucket's */
  assert_int_equal(tuned_groups_at(NG_BF16, 899), 5);
  assert_int_equal(tuned_groups_at(NG_F16, 1000), 0); /* bf16's lines alone */
  assert_int_equal(tuned_groups_at(NG_BF16, 1024), 0); /* the next bucket */
  v[NG_TUNE_GROUPS] = 4;
  NG_OK(ng_tuning_store_range(c, "rmsnorm.bwd", NG_BF16, 1000, 1000, v, NULL)); /* replaces 3 */
  assert_int_equal(lines_in_file(), 3);
  assert_int_equal(tuned_groups_at(NG_BF16, 1000), 4);
  /* a range across buckets is keyed by its first; the line serves all of it */
  v[NG_TUNE_GROUPS] = 6;
  NG_OK(ng_tuning_store_range(c, "rmsnorm.bwd", NG_BF16, 1020, 2000, v, NULL));
  assert_int_equal(tuned_groups_at(NG_BF16, 1500), 6);
  assert_int_equal(tuned_groups_at(NG_BF16, 1015), 5);
  /* the bucket's store replaces its lines of lengths (1020..2000 starts in it too) */
  v[NG_TUNE_GROUPS] = 8;
  NG_OK(ng_tuning_store_dtype(c, "rmsnorm.bwd", NG_BF16, 700, v, NULL));
  assert_int_equal(lines_in_file(), 1);
  assert_int_equal(tuned_groups_at(NG_BF16, 1000), 8);
  assert_int_equal(tuned_groups_at(NG_BF16, 1500), 0);
  /* the scratch follows a line of lengths as it follows a bucket's: every dtype is asked, so
   * each has a line (a GPU's rules take more groups than these) */
  v[NG_TUNE_GROUPS] = 40;
  NG_OK(ng_tuning_store_range(c, "rmsnorm.bwd", NG_F32, 1000, 1000, v, NULL));
  NG_OK(ng_tuning_store_range(c, "rmsnorm.bwd", NG_F16, 990, 1000, v, NULL));
  ng_context_release(c);
  c = fresh();
  assert_int_equal(scratch(c, 1000), 40 * 4 * 1000);
  NG_EXPECT_STATUS(ng_tuning_store_range(c, "rmsnorm.bwd", NG_BF16, 0, 10, v, NULL),
                   NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(ng_tuning_store_range(c, "rmsnorm.bwd", NG_BF16, 1000, 999, v, NULL),
                   NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(
      ng_tuning_store_range(c, "rmsnorm.bwd", NG_BF16, 1000, (size_t)1 << 32, v, NULL),
      NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(ng_tuning_store_range(c, "rmsnorm.bwd", NG_I32, 1000, 1000, v, NULL),
                   NG_ERR_UNSUPPORTED_DTYPE);
  NG_EXPECT_STATUS(ng_tuning_store_range(NULL, "rmsnorm.bwd", NG_BF16, 1000, 1000, v, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_tuning_store_range(c, "nosuch", NG_BF16, 1000, 1000, v, NULL),
                   NG_ERR_INVALID_VALUE);
  assert_int_equal(lines_in_file(), 3);
  ng_context_release(c);
}

/* ng_tuning_lookup: what the context's tables give a kind, dtype and length, as it loaded them:
 * its tuning.txt line (the dtype's, else every dtype's), else the built-in entry; nothing with
 * NG_TUNE_TABLE = 1; the argument checks. */
static void test_lookup(void **st) {
  (void)st;
  ng_context *c = fresh();
  unsigned got[7];
  int found = 7;
  memset(got, 0xff, sizeof got);
  NG_OK(ng_tuning_lookup(c, "rmsnorm.bwd", NG_BF16, 1000, got, &found));
  assert_int_equal(found, 0);
  for (int k = 0; k < 7; k++) assert_int_equal(got[k], 0);
  unsigned v[7] = {0};
  v[NG_TUNE_GROUPS] = 3, v[NG_TUNE_PREFETCH] = 1;
  NG_OK(ng_tuning_store_dtype(c, "rmsnorm.bwd", NG_BF16, 1000, v, NULL));
  NG_OK(ng_tuning_lookup(c, "rmsnorm.bwd", NG_BF16, 1000, got, &found));
  assert_int_equal(found, 0); /* the storing context keeps what it loaded */
  ng_context_release(c);
  c = fresh();
  NG_OK(ng_tuning_lookup(c, "rmsnorm.bwd", NG_BF16, 600, got, &found)); /* the same bucket */
  assert_int_equal(found, 1);
  assert_int_equal(got[NG_TUNE_GROUPS], 3);
  assert_int_equal(got[NG_TUNE_PREFETCH], 1);
  assert_int_equal(got[NG_TUNE_WORKGROUP], 0);
  NG_OK(ng_tuning_lookup(c, "rmsnorm.bwd", NG_F16, 1000, got, &found));
  assert_int_equal(found, 0);
  NG_OK(ng_tuning_lookup(c, "rmsnorm.bwd", NG_BF16, 3000, got, &found));
  assert_int_equal(found, 0);
  NG_OK(ng_tuning_lookup(c, "rmsnorm.bwd_frozen", NG_BF16, 1000, got, &found));
  assert_int_equal(found, 0); /* a kind of its own */
  v[NG_TUNE_GROUPS] = 5, v[NG_TUNE_PREFETCH] = 0;
  v[NG_TUNE_WORKGROUP] = 96; /* a multiple of 32: a row of 1536 vectors held by 96 × 2 */
  NG_OK(ng_tuning_store(c, "rmsnorm.bwd", 1000, v, NULL)); /* every dtype */
  ng_context_release(c);
  c = fresh();
  NG_OK(ng_tuning_lookup(c, "rmsnorm.bwd", NG_F16, 1000, got, &found));
  assert_int_equal(found, 1);
  assert_int_equal(got[NG_TUNE_GROUPS], 5);
  assert_int_equal(got[NG_TUNE_WORKGROUP], 96);
  NG_OK(ng_context_override(c, NG_TUNE_TABLE, 1));
  memset(got, 0xff, sizeof got);
  NG_OK(ng_tuning_lookup(c, "rmsnorm.bwd", NG_F16, 1000, got, &found));
  assert_int_equal(found, 0);
  for (int k = 0; k < 7; k++) assert_int_equal(got[k], 0);
  NG_OK(ng_context_override(c, NG_TUNE_TABLE, 0));
  /* the built-in table, on a context named as its device (src/tuning.c's first entry) */
  snprintf(c->info.name, sizeof c->info.name, "%s", "NVIDIA H200");
  const unsigned cu = c->info.compute_units;
  c->info.compute_units = 132;
  NG_OK(ng_tuning_lookup(c, "rmsnorm.bwd", NG_BF16, 16384, got, &found));
  assert_int_equal(found, 1);
  assert_int_equal(got[NG_TUNE_WORKGROUP], 1024);
  assert_int_equal(got[NG_TUNE_GROUPS], 132);
  NG_OK(ng_tuning_lookup(c, "rmsnorm.bwd", NG_F16, 16384, got, &found));
  assert_int_equal(found, 0);
  c->info.compute_units = cu;
  off_table(c);
  NG_EXPECT_STATUS(ng_tuning_lookup(NULL, "rmsnorm.bwd", NG_BF16, 1000, got, &found),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_tuning_lookup(c, NULL, NG_BF16, 1000, got, &found), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_tuning_lookup(c, "rmsnorm.bwd", NG_BF16, 1000, NULL, &found),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_tuning_lookup(c, "rmsnorm.bwd", NG_BF16, 1000, got, NULL),
                   NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_tuning_lookup(c, "nosuch", NG_BF16, 1000, got, &found),
                   NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(ng_tuning_lookup(c, "rmsnorm.bwd", NG_BF16, 0, got, &found),
                   NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(ng_tuning_lookup(c, "rmsnorm.bwd", NG_I32, 1000, got, &found),
                   NG_ERR_UNSUPPORTED_DTYPE);
  ng_context_release(c);
}

static void test_env(void **st) {
  (void)st;
  ng_test_env *e = ng_test_env_get();
  ng_context *c = NULL;
  setenv("NORMGRAD_TUNE", "groups=9", 1);
  NG_OK(ng_context_create(e->cl_ctx, e->device, &c));
  off_table(c);
  assert_int_equal(scratch(c, 1000), 9 * 4 * 1000);
  ng_context_release(c);
  /* prefetch= takes 1, 2 or a distance in bytes (a power of two, 64-65536) */
  setenv("NORMGRAD_TUNE", "prefetch=4096", 1);
  NG_OK(ng_context_create(e->cl_ctx, e->device, &c));
  ng_context_release(c);
  static const char *bad[] = {"groups",        "groups=",      "groups=x",        "wg=48",
                              "reg=3",         "vec=4",        "prefetch=3",      "prefetch=32",
                              "prefetch=1000", "prefetch=131072", "table=5",      "nosuch=1",
                              ",",             "groups=1,,wg=1",
                              /* tuning.txt's number syntax: digits only, within 32 bits */
                              "groups=+9",     "groups= 9",    "groups=-0",       "groups=9 ",
                              "groups=4294967296"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("NORMGRAD_TUNE", bad[i], 1);
    c = (ng_context *)1;
    NG_EXPECT_STATUS(ng_context_create(e->cl_ctx, e->device, &c), NG_ERR_INVALID_VALUE);
    assert_null(c);
    assert_non_null(strstr(ng_last_error_detail(), "NORMGRAD_TUNE"));
  }
  unsetenv("NORMGRAD_TUNE");
}

/* ng_tune_gemm's argument checks (a real search compiles CLBlast once per candidate: seconds on
 * a GPU, minutes on PoCL, so CI does not run one), and stored CLBlast lines that are damaged are
 * ignored at context creation. */
static void test_gemm_tuning_args(void **st) {
  (void)st;
  ng_test_env *e = ng_test_env_get();
  ng_context *c = fresh();
  ng_gemm_tune_result r;
  NG_EXPECT_STATUS(ng_tune_gemm(NULL, e->queue, 256, 0, &r), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_tune_gemm(c, NULL, 256, 0, &r), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_tune_gemm(c, e->queue, 256, 0, NULL), NG_ERR_NULL_HANDLE);
  NG_EXPECT_STATUS(ng_tune_gemm(c, e->queue, 100, 0, &r), NG_ERR_INVALID_VALUE);
  NG_EXPECT_STATUS(ng_tune_gemm(c, e->queue, 32768, 0, &r), NG_ERR_INVALID_VALUE);
  unsigned v[7] = {0};
  v[NG_TUNE_GROUPS] = 3;
  NG_OK(ng_tuning_store(c, "rmsnorm.bwd", 1000, v, NULL)); /* creates the file */
  ng_context_release(c);
  char p[300], id[64] = "", line[512];
  tuning_path(p, sizeof p);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "ng-tune-1 %63s", id) == 1) break;
  fclose(f);
  f = fopen(p, "a");
  assert_non_null(f);
  fprintf(f, "ng-clblast-1 %s Xgemm KWG=x\n", id);
  fprintf(f, "ng-clblast-1 %s Xgemm GEMMK=0 KREG=1\n", id); /* incomplete */
  fclose(f);
  c = fresh(); /* damaged CLBlast lines cost nothing: the rest of the table still applies */
  assert_int_equal(scratch(c, 1000), 3 * 4 * 1000);
  ng_context_release(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_store_then_use, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_store, setup, teardown),
      cmocka_unit_test_setup_teardown(test_damaged_file, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dtype_lines, setup, teardown),
      cmocka_unit_test_setup_teardown(test_length_lines, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lookup, setup, teardown),
      cmocka_unit_test_setup_teardown(test_env, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gemm_tuning_args, setup, teardown),
  };
  int rc = NG_RUN_GROUP_TESTS(tests, NULL, NULL);
  ng_test_env_release();
  return rc;
}
