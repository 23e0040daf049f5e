#!/usr/bin/env bash
# Runs normgrad-cli bench over ops × N × pass × frozen at rows·N = TOTAL (default 2^25, i.e.
# 64 MiB per bf16 tensor, past a 50 MB L2), and beside it the peers of tools/bench_torch.py
# (PyTorch eager, torch.compile, Liger-Kernel) on the same kind of device: CUDA when normgrad runs
# on a GPU, the CPU when it runs on a CPU OpenCL device (PoCL). Writes JSON lines to OUT (default
# bench.jsonl), prints every line as a table, then normgrad's speedup over the best peer for each
# (op, pass, N, frozen), where "both" = forward + backward (for normgrad the sum of its two
# passes).
#   tools/bench_sweep.sh [--cli PATH] [--ops "rmsnorm layernorm" | all] [--ns "1024 4096"]
#                        [--dtype bf16] [--total N] [--out FILE] [--device SEL]
#                        [--frozen weight|all] [--no-torch] [--torch-device auto|cuda|cpu]
#                        [--torch-impls eager,compile,liger] [--torch-passes forward,backward,both]
#                        [--liger-path DIR] [--torch-ns "1024 16384"] [--flce-rows R]
#                        [--flce-ns "4096"] [--vocab V] [--gn-block E] [--no-ds-out]
# --ops all = the five norm ops; flce runs only when named, at --flce-rows × each of --flce-ns with
# --vocab classes. --frozen weight (default) freezes the weight alone in the frozen backward; all
# freezes the bias too (both sides get the same flags). --gn-block E gives GroupNorm (rows =
# channels of one sample) groups of max(1, E/N) channels, blocks of max(E, N) elements, instead of
# the CLI's 32 groups (many groups, as in a diffusion U-Net; the peers get the same G); E and N
# powers of two. --no-ds-out times the fused add's backward without ds_out (the last layer's; its
# rows carry "ds_out": 0 and plot_bench.py lists them as fused-add-rmsnorm/no-ds) and runs no
# peers for it: PyTorch's autograd always returns the residual's gradient, so no peer does the
# same work. --torch-impls defaults to
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
case "$frozen" in
  weight) freeze_flags="--freeze-weight" ;;
  all) freeze_flags="--freeze-weight --freeze-bias" ;;
  *) echo "bench_sweep: --frozen is weight or all" >&2; exit 2 ;;
esac
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
# errline IMPL OP ROWS N PASS FROZEN MESSAGE: one JSON error line on stdout
errline() {
  python3 -c 'import json, sys
i, op, r, n, p, f, msg = sys.argv[1:]
print(json.dumps({"impl": i, "op": op, "rows": int(r), "hidden": int(n), "pass": p,
                  "frozen": f == "1", "error": msg.strip() or "failed with no message"}))' "$@"
}
: > "$out"
for op in $ops; do
  op_ns=$ns
  [ "$op" = flce ] && op_ns=$flce_ns
  extra=()
  [ "$op" = flce ] && extra=(--vocab "$vocab")
  for n in $op_ns; do
    if [ "$op" = flce ]; then rows=$flce_rows; else rows=$((total / n)); fi
    gopt=()
    if [ "$op" = groupnorm ] && [ -n "$gn_block" ]; then
      cpg=$((gn_block / n)); [ "$cpg" -ge 1 ] || cpg=1
      gopt=(--groups $((rows / cpg)))
    fi
    for pass in forward backward; do
      for fr in 0 1; do
        [ "$pass" = forward ] && [ "$fr" = 1 ] && continue
        flags=()
        [ "$fr" = 1 ] && flags=($freeze_flags)
        [ "$no_ds" = 1 ] && [ "$op" = fused-add-rmsnorm ] && [ "$pass" = backward ] &&
          flags+=(--no-ds-out)
        if "$cli" bench "$op" --rows "$rows" --hidden "$n" --dtype "$dtype" --pass "$pass" \
             "${flags[@]}" "${extra[@]}" "${gopt[@]}" "${devopt[@]}" --json > "$tmp" 2> "$err"; then
          cat "$tmp" >> "$out"
        else
          failed=1
          errline normgrad "$op" "$rows" "$n" "$pass" "$fr" "$(tail -n 1 "$err")" >> "$out"
        fi
      done
    done
    [ "$torch" = 1 ] || continue
    [ "$no_ds" = 1 ] && [ "$op" = fused-add-rmsnorm ] && continue
    if [ "$op" != flce ] && [ -n "$torch_ns" ]; then
      case " $torch_ns " in *" $n "*) ;; *) continue ;; esac
    fi
    # one process per (op, N): the trained passes, then the frozen backward ones
    if python3 "$here/bench_torch.py" --op "$op" --rows "$rows" --hidden "$n" --dtype "$dtype" \
         --device "$tdev" --impls "$timpls" --pass "$tpasses" --with-frozen "$frozen" \
         "${extra[@]}" "${gopt[@]}" "${ligeropt[@]}" > "$tmp" 2> "$err"; then
      cat "$tmp" >> "$out"
    else
      failed=1
      cat "$tmp" >> "$out"
      # the peer script prints its own error lines; a crash leaves none
      grep -q '"error"' "$tmp" ||
        errline peers "$op" "$rows" "$n" "$tpasses" 0 "$(tail -n 1 "$err")" >> "$out"
    fi
  done
done
python3 "$here/plot_bench.py" --summary "$out"
exit $failed
