#!/usr/bin/env bash
# Data-parallel training over MPI (examples/data_parallel_step.c, docs/data-parallel.md): one
# step of RMSNorm → FLCE on 2 ranks, each with its own device (on PoCL: a sub-device each) and
# its shard of the batch, gradients accumulated over micro-batches and summed with an in-place
# MPI_Allreduce, against the same step on 1 rank over the whole batch with the plain `mean`
# loss. tests/mpi/dp_check.c compares the files with a bound from f32 summation order.
#   data_parallel.sh MPIEXEC "MPIEXEC FLAGS" EXAMPLE DP_CHECK WORK_DIR
set -euo pipefail
mpiexec=$1 flags=$2 example=$3 check=$4 dir=$5
mkdir -p "$dir"
rm -f "$dir"/*.safetensors
# BT = 75 rows: shards of 37 and 38, micro-batches of 18–19 (none a multiple of 8); V = 1000
# (not a multiple of 64); more ignored targets in the second half of the batch, so the ranks and
# micro-batches hold unequal counts.
shape=(--batch 75 --hidden 96 --vocab 1000 --seed 7)
run() {
  echo "+ $*"
  "$@"
}
# In sanitizer builds (.ci/run's second pass) Open MPI's own allocations are still live at exit,
# in plugins it has unloaded by then, so no LSan suppression can name them: leak checks are off
# for the MPI processes only (every other ASan/UBSan check stays on; the other tests check
# normgrad's memory, and dp_check below runs with leak checks).
mpi_asan="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# mpi NP ARGS…: run the example on NP ranks and check that NP ranks really ran (each prints
# "rank R of NP: DEVICE; rows …").
mpi() {
  local np=$1 log="$dir/log.txt"
  shift
  # shellcheck disable=SC2086 # the flags are a list of words
  ASAN_OPTIONS=$mpi_asan run "$mpiexec" $flags -n "$np" "$@" | tee "$log"
  for ((r = 0; r < np; r++)); do
    grep -q "^rank $r of $np: " "$log" || { echo "rank $r of $np did not report" >&2; exit 1; }
  done
}

echo "== the reference: one rank, one micro-batch, mean over the whole batch"
mpi 1 "$example" "$dir/single.safetensors" "${shape[@]}" --micro-batches 1 \
  --loss-scaling average-of-means
mpi 1 "$example" "$dir/single_frozen.safetensors" "${shape[@]}" --micro-batches 1 \
  --loss-scaling average-of-means --freeze-norm-weight

echo "== data-parallel: 2 ranks, global-count loss scaling"
mpi 2 "$example" "$dir/dp2.safetensors" "${shape[@]}" --micro-batches 2
mpi 2 "$example" "$dir/dp2_frozen.safetensors" "${shape[@]}" --micro-batches 3 \
  --freeze-norm-weight
echo "== negative control: 2 ranks averaging per-micro-batch means (wrong with unequal counts)"
mpi 2 "$example" "$dir/dp2_avg.safetensors" "${shape[@]}" --micro-batches 2 \
  --loss-scaling average-of-means

echo "== compare (tolerance: tests/mpi/dp_check.c)"
run "$check" "${shape[@]}" "$dir/single.safetensors" "$dir/dp2.safetensors"
run "$check" "${shape[@]}" --frozen "$dir/single_frozen.safetensors" "$dir/dp2_frozen.safetensors" \
  --identical "$dir/single.safetensors"
run "$check" "${shape[@]}" --expect-mismatch "$dir/single.safetensors" "$dir/dp2_avg.safetensors"
