#!/usr/bin/env python3
"""Turn the JSON lines of tools/bench_sweep.sh into a CSV and PNG plots (GB/s against N, one
figure per op and pass, with the device's copy bandwidth as a line).

    tools/plot_bench.py bench.jsonl --out-dir docs/perf [--title "H100, bf16"]

The CSV is always written; the PNGs need matplotlib (it says so where it is missing)."""
import argparse
import csv
import json
import os
import sys
from collections import defaultdict

FIELDS = ["impl", "op", "pass", "rows", "hidden", "dtype", "frozen", "bytes", "median_ms", "gbps",
          "copy_gbps", "ratio", "device"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl")
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--title", default="")
    ap.add_argument("--prefix", default="bench")
    a = ap.parse_args()
    rows = []
    for line in open(a.jsonl):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        if "error" in r or "skipped" in r or "gbps" not in r:
            continue
        r.setdefault("impl", "normgrad")
        rows.append(r)
    os.makedirs(a.out_dir, exist_ok=True)
    csv_path = os.path.join(a.out_dir, a.prefix + ".csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
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
        fig, ax = plt.subplots(figsize=(7, 4.2))
        series = defaultdict(list)
        for r in rs:
            label = r["impl"] + (" (frozen)" if r.get("frozen") and pass_ == "backward" else "")
            series[label].append((r["hidden"], r["gbps"]))
        for label, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        copy = sorted(r["copy_gbps"] for r in rs)[len(rs) // 2]
        ax.axhline(copy, color="gray", linestyle="--", label=f"copy {copy:.0f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N (hidden size)")
        ax.set_ylabel("effective GB/s")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{op} {pass_}" + (f" — {a.title}" if a.title else ""))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        png = os.path.join(a.out_dir, f"{a.prefix}_{op}_{pass_}.png")
        fig.tight_layout()
        fig.savefig(png, dpi=110)
        plt.close(fig)
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
