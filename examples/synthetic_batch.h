/* A deterministic synthetic batch and model for examples/data_parallel_step.c (and for the test
 * that checks it, tests/mpi/dp_check.c).
 *
 * Every value is a pure function of (seed, tensor, index): a rank can make just the rows of its
 * own shard, and they are bit for bit the rows that a single process makes for the whole batch.
 * Integer hashing and single, correctly rounded f32 operations only (no library functions), so
 * every IEEE machine and compiler gives the same bits.
 *
 * The model block is  x[BT, H] → RMSNorm(weight g[H]) → FLCE(head W[V, H], bias b[V], targets).
 * Some targets are the ignore index, more of them in the second half of the batch (as padding at
 * the end of sequences would be), so that shards and micro-batches hold unequal numbers of
 * counted targets: the case where averaging per-rank means goes wrong. */
#ifndef NG_SYNTHETIC_BATCH_H
#define NG_SYNTHETIC_BATCH_H

#include <stddef.h>
#include <stdint.h>

#define SB_IGNORE_INDEX (-100)

enum { SB_X = 1, SB_IGNORED = 2, SB_CLASS = 3, SB_NORM_W = 4, SB_HEAD_W = 5, SB_HEAD_B = 6 };

/* splitmix64 of the three numbers: a counter-based generator, so no state to share. */
static inline uint64_t sb_hash(uint64_t seed, uint64_t tensor, uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + tensor * 0xD1B54A32D192ED03ull + index;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1), a multiple of 2^-23 (exact in f32). */
static inline float sb_sym(uint64_t seed, uint64_t tensor, uint64_t index) {
  return (float)(int32_t)(sb_hash(seed, tensor, index) >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

/* Input activation x[row, col] of a batch with `h` columns: rows of different scales (so rstd
 * varies from row to row). */
static inline float sb_x(uint64_t seed, size_t h, size_t row, size_t col) {
  return sb_sym(seed, SB_X, (uint64_t)row * h + col) * (float)(1 + row % 5);
}

/* Target of `row` in a batch of `bt` rows: ignored with probability 1/8 in the first half of the
 * batch and 1/2 in the second, otherwise a class in [0, v). */
static inline int64_t sb_target(uint64_t seed, size_t bt, size_t v, size_t row) {
  const uint64_t r = sb_hash(seed, SB_IGNORED, row) >> 40; /* 24 random bits */
  const uint64_t cut = row < bt / 2 ? (1u << 24) / 8 : (1u << 24) / 2;
  if (r < cut) return SB_IGNORE_INDEX;
  return (int64_t)((sb_hash(seed, SB_CLASS, row) >> 11) % v);
}

/* Parameters: norm weight near 1; head weight uniform with a spread of about 2/sqrt(h), so that
 * logits are of order 1–3 (a softmax that is neither one-hot nor flat); a small bias. The
 * spread is a power of two near 2·sqrt(3/h). */
static inline float sb_norm_weight(uint64_t seed, size_t col) {
  return 1.0f + 0.25f * sb_sym(seed, SB_NORM_W, col);
}
static inline float sb_head_spread(size_t h) {
  float s = 4.0f; /* largest power of two ≤ 2·sqrt(3/h), i.e. s² ≤ 12/h */
  while (s * s * (float)h > 12.0f) s *= 0.5f;
  return s;
}
static inline float sb_head_weight(uint64_t seed, size_t h, size_t row, size_t col) {
  return sb_head_spread(h) * sb_sym(seed, SB_HEAD_W, (uint64_t)row * h + col);
}
static inline float sb_head_bias(uint64_t seed, size_t v) {
  return 0.5f * sb_sym(seed, SB_HEAD_B, v);
}

#endif
