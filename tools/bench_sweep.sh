#!/usr/bin/env bash
# Runs normgrad-cli bench over ops × N × pass × frozen at rows·N = TOTAL (default 2^25, i.e.
# 64 MiB per bf16 tensor, past a 50 MB L2), and beside it the peers of tools/bench_torch.py
# (PyTorch eager, torch.compile, Liger-Kernel) on the same kind of device: CUDA when normgrad runs
# on a GPU, the CPU when it runs on a CPU OpenCL device (PoCL). Writes JSON lines to OUT (default
# bench.jsonl), prints every line as a table, then normgrad's speedup over the best peer for each
# (op, pass, N, frozen), where "both" = forward + backward (for normgrad the sum of its two
# passes).
#   tools/bench_sweep.sh [--cli PATH] [--ops "rmsnorm layernorm" | all] [--ns "1024 4096"]
#                        [--dtype "bf16 f16" | all] [--total N] [--out FILE] [--device SEL]
#                        [--frozen weight|all|weight,all] [--no-torch]
#                        [--torch-device auto|cuda|cpu]
#                        [--torch-impls eager,compile,liger] [--torch-passes forward,backward,both]
#                        [--liger-path DIR] [--torch-ns "1024 16384"] [--flce-rows R]
#                        [--flce-ns "4096"] [--vocab V] [--gn-block E] [--no-ds-out]
# --ops all = the five norm ops; flce runs only when named, at --flce-rows × each of --flce-ns with
# --vocab classes. --dtype takes a list (spaces or commas; all = bf16 f16 f32, default bf16).
# --frozen weight (default) freezes the weight alone in the frozen backward; all freezes the bias
# too (both sides get the same flags), as LoRA does; weight,all runs both frozen backwards, except
# for RMSNorm and the fused add, which have no bias (their one frozen backward is both).
# --gn-block E gives GroupNorm (rows = channels of one sample) groups of max(1, E/N) channels,
# blocks of max(E, N) elements, instead of the CLI's 32 groups (many groups, as in a diffusion
# U-Net; the peers get the same G); E and N powers of two. --no-ds-out times the fused add's
# backward without ds_out (the last layer's; its rows carry "ds_out": 0 and plot_bench.py lists
# them as fused-add-rmsnorm/no-ds) and runs no peers for it: PyTorch's autograd always returns the
# residual's gradient, so no peer does the same work. --torch-impls defaults to
# eager,compile,liger on CUDA and eager on a CPU; --torch-ns runs the norm ops' peers at those N
# only (each peer process costs seconds of start-up and torch.compile time). A run that fails
# leaves an "error" line (the table shows it) and the sweep goes on; the exit status is then 1.
set -euo pipefail
cli=./build/normgrad-cli ops="rmsnorm" ns="1024 2048 4096 8192 16384 32768 65536"
dtype=bf16 total=$((1 << 25)) out=bench.jsonl torch=1 tdev=auto timpls=""
tpasses="forward,backward,both"
liger="" device="" frozen=weight flce_rows=8192 flce_ns=4096 vocab=32000 torch_ns="" gn_block=""
no_ds=0
all_ops="rmsnorm fused-add-rmsnorm layernorm groupnorm polynorm"
while [ $# -gt 0 ]; do
  case "$1" in
    --cli) cli=$2; shift 2 ;; --ops) ops=$2; shift 2 ;; --ns) ns=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;; --total) total=$2; shift 2 ;; --out) out=$2; shift 2 ;;
    --no-torch) torch=0; shift ;; --torch-device) tdev=$2; shift 2 ;;
    --torch-impls) timpls=$2; shift 2 ;; --torch-passes) tpasses=$2; shift 2 ;;
    --liger-path) liger=$2; shift 2 ;; --device) device=$2; shift 2 ;;
    --frozen) frozen=$2; shift 2 ;; --flce-rows) flce_rows=$2; shift 2 ;;
    --flce-ns) flce_ns=$2; shift 2 ;; --vocab) vocab=$2; shift 2 ;;
    --torch-ns) torch_ns=$2; shift 2 ;; --gn-block) gn_block=$2; shift 2 ;;
    --no-ds-out) no_ds=1; shift ;;
    *) echo "bench_sweep: unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$ops" = all ] && ops=$all_ops
# check_list OPTION "ITEMS" WHAT ALLOWED...: exits 2 unless ITEMS has an item and each is allowed
check_list() {
  local opt=$1 items=$2 what=$3 it
  shift 3
  [ -n "${items// /}" ] || { echo "bench_sweep: $opt is empty" >&2; exit 2; }
  for it in $items; do
    case " $* " in
      *" $it "*) ;;
      *) echo "bench_sweep: $opt takes $what" >&2; exit 2 ;;
    esac
  done
}
dtype=${dtype//,/ }
[ "$dtype" = all ] && dtype="bf16 f16 f32"
check_list --dtype "$dtype" "bf16, f16, f32 or all" bf16 f16 f32
frozen=${frozen//,/ }
check_list --frozen "$frozen" "weight, all or weight,all" weight all
# freeze_flags SETTING: the CLI's flags of one frozen setting
freeze_flags() {
  if [ "$1" = all ]; then echo "--freeze-weight --freeze-bias"; else echo "--freeze-weight"; fi
}
# frozen_for OP: the frozen settings OP runs (an op without a bias runs its frozen backward once)
frozen_for() {
  case "$1" in
    rmsnorm|fused-add-rmsnorm) set -- $frozen; [ $# -gt 1 ] && echo weight || echo "$1" ;;
    *) echo "$frozen" ;;
  esac
}
here=$(cd "$(dirname "$0")" && pwd)
devopt=()
[ -n "$device" ] && devopt=(--device "$device")
ligeropt=()
[ -n "$liger" ] && ligeropt=(--liger-path "$liger")

# The peers' device: the kind of the OpenCL device normgrad runs on (the --device selection, or
# the CLI's default), unless given.
if [ "$torch" = 1 ] && [ "$tdev" = auto ]; then
  tdev=$("$cli" devices --json | python3 -c '
import json, sys
sel = sys.argv[1]
devs = json.load(sys.stdin)
pick = None
if sel.isdigit():
    pick = next((d for d in devs if d["index"] == int(sel)), None)
elif sel:
    pick = next((d for d in devs if sel in d["name"]), None)
else:
    pick = next((d for d in devs if d.get("default")), devs[0] if devs else None)
print("cpu" if pick is not None and pick["type"] == "CPU" else "cuda")' "$device")
fi
if [ -z "$timpls" ]; then
  if [ "$tdev" = cpu ]; then timpls=eager; else timpls=eager,compile,liger; fi
fi

failed=0
err=$(mktemp) tmp=$(mktemp)
trap 'rm -f "$err" "$tmp"' EXIT
# errline IMPL OP ROWS N DTYPE PASS FROZEN MESSAGE: one JSON error line on stdout; FROZEN is 0,
# weight or all
errline() {
  python3 -c 'import json, sys
i, op, r, n, dt, p, f, msg = sys.argv[1:]
print(json.dumps({"impl": i, "op": op, "rows": int(r), "hidden": int(n), "dtype": dt, "pass": p,
                  "frozen": f != "0", "frozen_bias": f == "all",
                  "error": msg.strip() or "failed with no message"}))' "$@"
}
: > "$out"
for op in $ops; do
  op_ns=$ns
  [ "$op" = flce ] && op_ns=$flce_ns
  extra=()
  [ "$op" = flce ] && extra=(--vocab "$vocab")
  op_frozen=$(frozen_for "$op")
  for dt in $dtype; do
  for n in $op_ns; do
    if [ "$op" = flce ]; then rows=$flce_rows; else rows=$((total / n)); fi
    gopt=()
    if [ "$op" = groupnorm ] && [ -n "$gn_block" ]; then
      cpg=$((gn_block / n)); [ "$cpg" -ge 1 ] || cpg=1
      gopt=(--groups $((rows / cpg)))
    fi
    # forward, backward, then one frozen backward per setting (weight, all)
    for run in forward backward $op_frozen; do
      pass=$run flags=() fr=0
      case "$run" in
        forward|backward) ;;
        *) pass=backward fr=$run; read -r -a flags <<<"$(freeze_flags "$fr")" ;;
      esac
      [ "$no_ds" = 1 ] && [ "$op" = fused-add-rmsnorm ] && [ "$pass" = backward ] &&
        flags+=(--no-ds-out)
      if "$cli" bench "$op" --rows "$rows" --hidden "$n" --dtype "$dt" --pass "$pass" \
           "${flags[@]}" "${extra[@]}" "${gopt[@]}" "${devopt[@]}" --json > "$tmp" 2> "$err"; then
        cat "$tmp" >> "$out"
      else
        failed=1
        errline normgrad "$op" "$rows" "$n" "$dt" "$pass" "$fr" "$(tail -n 1 "$err")" >> "$out"
      fi
    done
    [ "$torch" = 1 ] || continue
    [ "$no_ds" = 1 ] && [ "$op" = fused-add-rmsnorm ] && continue
    if [ "$op" != flce ] && [ -n "$torch_ns" ]; then
      case " $torch_ns " in *" $n "*) ;; *) continue ;; esac
    fi
    # one process per (op, dtype, N): the trained passes, then the frozen backward ones
    wf=$(echo $op_frozen | tr ' ' ,)
    if python3 "$here/bench_torch.py" --op "$op" --rows "$rows" --hidden "$n" --dtype "$dt" \
         --device "$tdev" --impls "$timpls" --pass "$tpasses" --with-frozen "$wf" \
         "${extra[@]}" "${gopt[@]}" "${ligeropt[@]}" > "$tmp" 2> "$err"; then
      cat "$tmp" >> "$out"
    else
      failed=1
      cat "$tmp" >> "$out"
      # the peer script prints its own error lines; a crash leaves none
      grep -q '"error"' "$tmp" ||
        errline peers "$op" "$rows" "$n" "$dt" "$tpasses" 0 "$(tail -n 1 "$err")" >> "$out"
    fi
  done
  done
done
python3 "$here/plot_bench.py" --summary "$out"
exit $failed
