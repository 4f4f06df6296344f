"""A committed pytest-benchmark JSON -> the README's performance table and plots.

    python bench/report.py bench/results/<file>.json --markdown out.md --plots bench/results/

The table has one row per group (op/dtype/shape): dmlq's fastest entry, its
median time, achieved GB/s or TOPS, the same-run limit and % of it, the fastest
peer and the speedup over it (peer time / dmlq time). It opens with the GPU,
versions, date and limits of the run, so every number names its source. Plots:
one PNG per operator family (quantize, dequantize, add, matmul, avgpool,
overhead, graph): dmlq's best, each peer, and the limit, per group.

Targets: a result whose extra_info carries ``target_s`` (the Python-overhead
benchmarks of bench/test_bench_plan.py) is judged here, median against target,
in a table of its own; ``--check-targets`` exits 1 when one is missed. No test
asserts a time: the judgment is made on a committed run, not on a busy CI box.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script (python bench/report.py): the checkout's root first
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.timing import format_time  # noqa: E402
from bench.workloads import unit_of  # noqa: E402


# ------------------------------------------------------------------ summaries

def _median(bench):
    stats = bench.get("stats") or {}
    return stats.get("median")


def summarize(benchmarks):
    """One row per group: the fastest dmlq entry against the limit and the fastest peer
    (a ``...graph`` row, a CUDA graph's replay, counts as dmlq's only where a peer's does).

    ``benchmarks`` are pytest-benchmark JSON entries (group, stats.median,
    extra_info). Speedup = best peer time / best dmlq time.
    """
    groups = {}
    for b in benchmarks:
        info = b.get("extra_info") or {}
        impl = info.get("impl") or (b.get("params") or {}).get("impl")
        if b.get("group") and impl and _median(b):
            groups.setdefault(b["group"], []).append((impl, _median(b), info))
    rows = []
    for group, entries in groups.items():
        op, dtype, shape = (group.split("/", 2) + ["", ""])[:3]
        dm = [e for e in entries if e[0].startswith("dmlq:")]
        peers = [e for e in entries if e[0].startswith("peer:")]
        if not dm:
            continue
        # a CUDA graph's replay (no host enqueue) is dmlq's best only beside a peer's replay: an
        # eager peer is compared with dmlq's eager calls
        graphed = any(e[0].endswith("graph") for e in peers)
        best = min([e for e in dm if graphed or not e[0].endswith("graph")] or dm, key=lambda e: e[1])
        peer = min(peers, key=lambda e: e[1]) if peers else None
        unit = unit_of(group)
        key = "tops" if unit == "TOPS" else "gb_per_s"
        rows.append({
            "group": group, "op": op, "dtype": dtype, "shape": shape, "unit": unit,
            "impl": best[0], "time_s": best[1], "achieved": best[2].get(key),
            "limit": best[2].get("limit"), "fraction": best[2].get("fraction_of_limit"),
            "peer": peer[0] if peer else None, "peer_time_s": peer[1] if peer else None,
            "peer_achieved": peer[2].get(key) if peer else None,
            "speedup": (peer[1] / best[1]) if peer else None,
            "bytes": best[2].get("bytes"), "ops": best[2].get("ops"),
            "entries": {impl: {"time_s": t, "achieved": info.get(key), "limit": info.get("limit")}
                        for impl, t, info in entries},
        })
    return rows


def targets(benchmarks):
    """Every result that names a time target (extra_info ``target_s``), judged:
    name, impl, median_s, target_s and met (median <= target)."""
    judged = []
    for b in benchmarks:
        info = b.get("extra_info") or {}
        target, median = info.get("target_s"), _median(b)
        if target is None or median is None:
            continue
        judged.append({"name": b.get("name") or b.get("fullname") or "?", "impl": info.get("impl"),
                       "median_s": median, "target_s": target, "met": median <= target})
    return judged


def format_row(row):
    """Cells: operator, dtype, shape, dmlq impl, time, achieved, limit, % of limit, peer, peer time, speedup."""
    fmt = lambda v: "-" if v is None else f"{v:,.1f}" if v >= 10 else f"{v:.3g}"  # noqa: E731
    return [row["op"], row["dtype"], row["shape"], row["impl"], format_time(row["time_s"]),
            f"{fmt(row['achieved'])} {row['unit']}", f"{fmt(row['limit'])} {row['unit']}",
            "-" if row["fraction"] is None else f"{100 * row['fraction']:.1f}%",
            row["peer"] or "-", format_time(row["peer_time_s"]),
            "-" if row["speedup"] is None else f"{row['speedup']:.2f}x"]


HEADER = ["operator", "dtype", "shape", "dmlq", "time", "achieved", "limit", "% of limit",
          "best peer", "peer time", "speedup"]


def text_table(rows):
    cells = [HEADER] + [format_row(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def load(path):
    with open(path) as f:
        return json.load(f)


def run_date(data):
    return (data.get("machine_info") or {}).get("date") or data.get("datetime") or "unknown date"


def provenance(data, source=None):
    """One paragraph naming the GPU, software, date and same-run limits."""
    mi = data.get("machine_info") or {}
    lim = mi.get("dmlq_limits") or {}
    gpu = mi.get("gpu") or "unknown GPU"
    cc = mi.get("compute_capability")
    parts = [f"Measured on **{gpu}**" + (f" (compute capability {cc})" if cc else ""),
             f"driver {mi.get('driver', '?')}", f"CUDA runtime {mi.get('cuda_runtime', '?')}",
             f"CuPy {mi.get('cupy', '?')}", f"torch {mi.get('torch') or 'absent'}",
             f"on {run_date(data)}"]
    text = ", ".join(parts) + (f" (`{source}`)." if source else ".")
    if lim:
        def tops(key):
            v = lim.get(key + "_tops")
            return "unknown" if v is None else f"{v:,.0f} TOPS ({lim.get(key + '_source', '')})"
        text += (f" Limits from the same run: copy bandwidth {lim['copy_gb_per_s']:,.0f} GB/s"
                 f" ({lim.get('copy_source', '')}); int8 tensor-core peak {tops('int8_tc')};"
                 f" dp4a peak {tops('dp4a')}.")
    return text


def markdown(data, source=None):
    rows = summarize(data.get("benchmarks", []))
    lines = [provenance(data, source), "",
             "| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in format_row(r)) + " |" for r in rows]
    lines.append("")
    lines.append("time: median per call; achieved and limit in GB/s (element-wise, pooling, overhead, "
                 "graph) or TOPS (matmul, roofline min(peak, ops x copy bandwidth / bytes)); "
                 "speedup = best peer time / dmlq time.")
    judged = targets(data.get("benchmarks", []))
    if judged:
        lines += ["", "| target | implementation | median | target | met |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| {t['name'].replace('|', chr(92) + '|')} | {t['impl'] or '-'} | {format_time(t['median_s'])} | "
                  f"{format_time(t['target_s'])} | {'yes' if t['met'] else '**no**'} |" for t in judged]
        missed = sum(not t["met"] for t in judged)
        lines += ["", f"{len(judged) - missed} of {len(judged)} time targets met (median per call)."]
    return "\n".join(lines) + "\n"


def plot(data, outdir):
    """One PNG per operator family; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = summarize(data.get("benchmarks", []))
    families = {}
    for r in rows:
        families.setdefault(r["op"], []).append(r)
    gpu = (data.get("machine_info") or {}).get("gpu") or "unknown GPU"
    written = []
    for family, frows in families.items():
        # Every bar is the operator's work (dmlq's bytes or ops) over that entry's time, so
        # bars compare like speedups do (a float16 peer moving twice the bytes gets no credit).
        def effective(r, impl):
            e = r["entries"].get(impl)
            amount = r["ops"] if r["unit"] == "TOPS" else r["bytes"]  # None: a row of time only
            work = amount / (1e12 if r["unit"] == "TOPS" else 1e9) if amount else None
            return work / e["time_s"] if e and work else None

        peers = sorted({i for r in frows for i in r["entries"] if i.startswith("peer:")})
        series = [("dmlq (best variant)", [effective(r, r["impl"]) for r in frows])]
        series += [(p, [effective(r, p) for r in frows]) for p in peers]
        width = 0.8 / len(series)
        fig, ax = plt.subplots(figsize=(max(7.0, 1.3 * len(frows) + 4), 4.5))
        for k, (label, values) in enumerate(series):
            xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(frows))]
            ax.bar(xs, [v or 0 for v in values], width, label=label)
        limits = [r["limit"] for r in frows]
        for i, v in enumerate(limits):
            if v:
                ax.hlines(v, i - 0.45, i + 0.45, colors="black", linestyles="--",
                          label="limit (same run)" if i == 0 else None)
        ax.set_xticks(range(len(frows)))
        ax.set_xticklabels([f"{r['dtype']}\n{r['shape']}" for r in frows], fontsize=7)
        ax.set_ylabel(("TOPS" if frows[0]["unit"] == "TOPS" else "GB/s") + " (operator work / time)")
        values = [v for _, vs in series for v in vs if v] + [v for v in limits if v]
        if values and max(values) / min(values) > 100:
            ax.set_yscale("log")
        ax.set_title(f"{family}: dmlq vs same-run limit vs peers\n{gpu}, {run_date(data)[:10]}", fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        path = outdir / f"{family}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="pytest-benchmark JSON (bench/results/<file>.json)")
    parser.add_argument("--markdown", metavar="OUT.md", help="write the table here (default: print it)")
    parser.add_argument("--plots", metavar="DIR", help="write <family>.png plots into DIR")
    parser.add_argument("--check-targets", action="store_true",
                        help="exit 1 when a result misses its time target (extra_info target_s)")
    args = parser.parse_args(argv)
    data = load(args.json)
    text = markdown(data, source=args.json)
    if args.markdown:
        Path(args.markdown).write_text(text)
    else:
        print(text, end="")
    if args.plots:
        for path in plot(data, args.plots):
            print(f"wrote {path}", file=sys.stderr)
    missed = [t for t in targets(data.get("benchmarks", [])) if not t["met"]]
    for t in missed:
        print(f"target missed: {t['name']}: {format_time(t['median_s'])} > {format_time(t['target_s'])}",
              file=sys.stderr)
    return 1 if args.check_targets and missed else 0


if __name__ == "__main__":
    sys.exit(main())
