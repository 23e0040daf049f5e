#!/usr/bin/env python3
"""Turn the JSON lines of tools/bench_sweep.sh (normgrad-cli bench and tools/bench_torch.py) into
a CSV and PNG plots (GB/s against N, one figure per op and pass, one line per implementation,
dtype and frozen setting, with the device's copy bandwidth as a line), or print them as tables.

    tools/plot_bench.py bench.jsonl [more.jsonl ...] --out-dir docs/perf [--title "H100, bf16"]
                        [--prefix bench] [--median]
    tools/plot_bench.py --summary bench.jsonl

Several files are read as one. --median keeps one row per cell (implementation, op, pass,
shape, dtype, frozen settings) where repeated sweeps give several: the run with the median time
(the faster of the two middle ones for an even count), so the plots and the CSV show the
median of the sweeps, as the README's tables do. --fastest-peers FILE ... adds the peers' lines
of other runs (their normgrad lines are left out) and keeps, per peer and cell, the fastest
time of every run given: the peers' Triton timings move from run to run, and the README sets
normgrad against the fastest of them.

    tools/plot_bench.py --summary --median docs/perf/h100_88eb26f_{1,2,3}.jsonl \
        --fastest-peers docs/perf/h100_88eb26f_peers.jsonl docs/perf/h100_170f046_peers.jsonl \
        docs/perf/h100_c9560ee.jsonl

tests/cli/plot_bench.sh checks those choices (medians, fastest peers, the derived "both" rows,
the least speedups) on made-up lines.

normgrad has no "both" pass of its own: its forward + backward is derived as the sum of the two
medians (bytes added too), marked `derived` in the CSV (not for flce, whose backward is already
the whole fused pass, as the peers' flce backward is). --summary prints every line, then
normgrad's speedup over the best peer (peer ms / normgrad ms; the bytes are the same) for each
cell (op, pass, N, rows, dtype, GroupNorm's groups and what is frozen: True is the weight, "all"
the weight and bias, as in LoRA), and over PyTorch eager. The CSV is always written; the PNGs need
matplotlib (it says so where it is missing)."""
import argparse
import csv
import json
import os
import sys
from collections import defaultdict

FIELDS = ["impl", "op", "pass", "rows", "hidden", "dtype", "frozen", "frozen_bias", "bytes",
          "median_ms", "gbps", "copy_gbps", "ratio", "copy_same_gbps", "ratio_same", "device",
          "derived"]
PASS_ORDER = {"forward": 0, "backward": 1, "both": 2}


def load(path):
    """(results, problems): timed lines, and the error / skipped lines."""
    rows, problems = [], []
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            problems.append({"error": "not JSON: " + line[:200]})
            continue
        r.setdefault("impl", "normgrad")
        if r.get("op") == "groupnorm" and r.get("groups") is None and "rows" in r:
            # lines from before the field (c9560ee): the CLI's default then, 32 or 1
            r["groups"] = 32 if r["rows"] % 32 == 0 else 1
        if r.get("ds_out") == 0:  # the fused add's backward without ds_out: its own op here
            r["op"] += "/no-ds"
        if "error" in r or "skipped" in r or "gbps" not in r:
            problems.append(r)
        else:
            rows.append(r)
    return rows, problems


def cell_key(r):
    """A cell of one implementation: op, pass, shape, dtype and frozen settings."""
    return (r["impl"],) + key(r)


def median_rows(rows):
    """One row per cell: the run whose time is the median of the cell's runs."""
    cells = defaultdict(list)
    for r in rows:
        cells[cell_key(r)].append(r)
    out = []
    for rs in cells.values():
        rs.sort(key=lambda r: r["median_ms"])
        out.append(rs[(len(rs) - 1) // 2])
    return out


def fastest_rows(rows):
    """One row per cell: the run with the fastest time."""
    cells = {}
    for r in rows:
        k = cell_key(r)
        if k not in cells or r["median_ms"] < cells[k]["median_ms"]:
            cells[k] = r
    return list(cells.values())


def add_derived_both(rows):
    """normgrad forward + backward (and + frozen backward) as a "both" row per cell."""
    by = {key(r): r for r in rows if r["impl"] == "normgrad"}
    out = []
    for b in by.values():
        # flce's backward is already the fused loss + gradients pass
        if b["pass"] != "backward" or b["op"] == "flce":
            continue
        f = by.get(key({**b, "pass": "forward", "frozen": False, "frozen_bias": False}))
        if f is None:
            continue
        ms = f["median_ms"] + b["median_ms"]
        by_ = f["bytes"] + b["bytes"]
        gbps = by_ / ms / 1e6 if ms > 0 else 0
        copy = b["copy_gbps"]
        extra = {}
        if f.get("copy_same_gbps") and b.get("copy_same_gbps"):
            # a copy of each pass's bytes, one after the other, against the two passes
            copy_ms = (f["bytes"] / f["copy_same_gbps"] + b["bytes"] / b["copy_same_gbps"]) / 1e6
            extra = {"copy_same_gbps": by_ / copy_ms / 1e6, "ratio_same": copy_ms / ms}
        out.append({**b, "pass": "both", "bytes": by_, "median_ms": ms, "gbps": gbps,
                    "ratio": gbps / copy if copy else 0, **extra, "derived": True})
    return rows + out


def frozen_label(r):
    """What a line freezes: False, True (the weight), "all" (weight and bias) or "bias"."""
    if r.get("frozen_bias"):
        return "all" if r.get("frozen") else "bias"
    return str(bool(r.get("frozen")))


def key(r):
    """A cell across implementations: a peer meets normgrad only on the same shape and settings."""
    g = r.get("groups")
    return (r["op"], PASS_ORDER.get(r["pass"], 9), r["hidden"], frozen_label(r), r["rows"],
            r.get("dtype") or "", -1 if g is None else g)


FROZEN_WHERE = {"False": "", "True": " frozen", "all": " all frozen", "bias": " bias frozen"}
FROZEN_PLOT = {"False": "", "True": " (frozen)", "all": " (all frozen)", "bias": " (bias frozen)"}
FROZEN_LINE = {"False": "-", "True": "--", "all": "-.", "bias": "--"}


def summary(rows, problems):
    print(f"{'impl':14} {'op':23} {'pass':9} {'N':>6} {'dtype':5} {'frozen':6} {'ms':>9} "
          f"{'GB/s':>8} {'copy':>7} {'ratio':>6} {'same':>6}")
    for r in sorted(rows, key=lambda r: key(r) + (r["impl"],)):
        print(f"{r['impl']:14} {r['op']:23} {r['pass']:9} {r['hidden']:>6} "
              f"{r.get('dtype') or '':5} {frozen_label(r):6} {r['median_ms']:9.4f} "
              f"{r['gbps']:8.1f} {r['copy_gbps']:7.0f} {r['ratio']:6.3f} "
              + (f"{r['ratio_same']:6.3f}" if "ratio_same" in r else f"{'':6}")
              + ("  (fwd+bwd sum)" if r.get("derived") else ""))
    for p in problems:
        what = "ERROR" if "error" in p else "skipped"
        where = " ".join(str(p[k]) for k in ("impl", "op", "pass", "hidden", "dtype") if k in p)
        where += FROZEN_WHERE[frozen_label(p)]
        print(f"{what}: {where}: {p.get('error', p.get('skipped', ''))}")
    groups = defaultdict(dict)
    for r in rows:
        groups[key(r)][r["impl"]] = r
    print()
    print("normgrad's speedup (peer ms / normgrad ms, same bytes):")
    print(f"{'op':23} {'pass':9} {'N':>6} {'dtype':5} {'frozen':6} {'normgrad ms':>11} "
          f"{'best peer':>14} {'peer ms':>9} {'speedup':>8} {'vs eager':>8}")
    least = {}
    for k in sorted(groups):
        g = groups[k]
        ng = g.get("normgrad")
        peers = {i: r for i, r in g.items() if i != "normgrad"}
        if ng is None or not peers:
            continue
        best = min(peers.values(), key=lambda r: r["median_ms"])
        eager = peers.get("torch-eager")
        sp = best["median_ms"] / ng["median_ms"] if ng["median_ms"] > 0 else 0
        ve = ""
        if eager and ng["median_ms"] > 0:
            ve = f"{eager['median_ms'] / ng['median_ms']:7.2f}x"
        print(f"{k[0]:23} {ng['pass']:9} {k[2]:>6} {k[5]:5} {k[3]:6} {ng['median_ms']:11.4f} "
              f"{best['impl']:>14} {best['median_ms']:9.4f} {sp:7.2f}x {ve:>8}")
        where = f"{k[0]} {ng['pass']} N={k[2]} {k[5]}" + FROZEN_WHERE[k[3]]
        for p in ("any", "both") if ng["pass"] == "both" else ("any",):
            if p not in least or sp < least[p][0]:
                least[p] = (sp, f"{where}, beside {best['impl']}")
    for p, what in (("any", "every pass"), ("both", "forward + backward")):
        if p in least:
            print(f"least speedup, {what}: {least[p][0]:.2f}x ({least[p][1]})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl", nargs="+")
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--title", default="")
    ap.add_argument("--prefix", default="bench")
    ap.add_argument("--summary", action="store_true", help="print tables instead of files")
    ap.add_argument("--median", action="store_true", help="one row per cell: the median run")
    ap.add_argument("--fastest-peers", nargs="+", default=[], metavar="JSONL",
                    help="more runs' peer lines; each peer keeps its fastest time per cell")
    a = ap.parse_args()
    rows, problems = [], []
    for path in a.jsonl:
        r, p = load(path)
        rows += r
        problems += p
    more = []
    for path in a.fastest_peers:
        r, p = load(path)
        more += [x for x in r if x["impl"] != "normgrad"]
        problems += [x for x in p if x.get("impl", "normgrad") != "normgrad"]
    if a.fastest_peers:
        peers = [r for r in rows if r["impl"] != "normgrad"] + more
        rows = [r for r in rows if r["impl"] == "normgrad"]
        rows = (median_rows(rows) if a.median else rows) + fastest_rows(peers)
    elif a.median:
        rows = median_rows(rows)
    rows = add_derived_both(rows)
    if a.summary:
        summary(rows, problems)
        return 0
    os.makedirs(a.out_dir, exist_ok=True)
    csv_path = os.path.join(a.out_dir, a.prefix + ".csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in sorted(rows, key=lambda r: key(r) + (r["impl"],)):
            w.writerow({**r, "derived": bool(r.get("derived"))})
    print(f"wrote {csv_path} ({len(rows)} rows)")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_bench: matplotlib is not installed, no PNGs drawn")
        return 0
    groups = defaultdict(list)
    for r in rows:
        groups[(r["op"], r["pass"])].append(r)
    for (op, pass_), rs in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(8.6, 4.2))
        series = defaultdict(list)
        dtypes = sorted({r.get("dtype") or "" for r in rs})
        for r in rs:
            fr = frozen_label(r) if pass_ != "forward" else "False"
            dt = r.get("dtype") or ""
            label = r["impl"] + (f" {dt}" if len(dtypes) > 1 else "")
            label += (" (fwd+bwd sum)" if r.get("derived") else "") + FROZEN_PLOT[fr]
            series[(r["impl"], dt, fr, label)].append((r["hidden"], r["gbps"]))
        impls = sorted({k[0] for k in series}, key=lambda i: (i != "normgrad", i))
        colour = {i: f"C{n % 10}" for n, i in enumerate(impls)}
        marks = {d: "osd^v"[n % 5] for n, d in enumerate(dtypes)}
        for (impl, dt, fr, label), pts in sorted(series.items()):
            pts.sort()
            # one colour per implementation, a marker per dtype, frozen runs dashed
            ax.plot([p[0] for p in pts], [p[1] for p in pts], FROZEN_LINE[fr],
                    marker=marks[dt], color=colour[impl], label=label)
        copies = sorted(r["copy_gbps"] for r in rs)
        copy = copies[len(copies) // 2]
        ax.axhline(copy, color="gray", linestyle=":", label=f"copy {copy:.0f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N (hidden size)")
        ax.set_ylabel("effective GB/s")
        # the copy line stays in view (matplotlib 3.6+ leaves axhline out of the autoscale)
        ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1], copy * 1.05))
        what = "forward + backward" if pass_ == "both" else pass_
        ax.set_title(f"{op} {what}" + (f" — {a.title}" if a.title else ""))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # off the lines
        png = os.path.join(a.out_dir, f"{a.prefix}_{op.replace('/', '-')}_{pass_}.png")
        fig.tight_layout()
        fig.savefig(png, dpi=110)
        plt.close(fig)
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
