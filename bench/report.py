"""A committed pytest-benchmark JSON -> the README's performance table and plots.

    python bench/report.py bench/results/<file>.json --markdown out.md --plots bench/results/

The table has one row per group (op/dtype/shape): dmlq's fastest entry, its
median time, achieved GB/s or TOPS, the same-run limit and % of it, the fastest
peer and the speedup over it (peer time / dmlq time). It opens with the GPU,
versions, date and limits of the run, so every number names its source. Plots:
one PNG per operator family (quantize, dequantize, add, matmul, avgpool,
overhead, graph): dmlq's best, each peer, and the limit, per group.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

try:
    from dmlq import bench as B
except ImportError:  # run from a checkout without PYTHONPATH: the repo root is bench/..
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dmlq import bench as B


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
    rows = B.summarize(data.get("benchmarks", []))
    lines = [provenance(data, source), "",
             "| " + " | ".join(B.HEADER) + " |", "|" + " --- |" * len(B.HEADER)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in B.format_row(r)) + " |" for r in rows]
    lines.append("")
    lines.append("time: median per call; achieved and limit in GB/s (element-wise, pooling, overhead, "
                 "graph) or TOPS (matmul, roofline min(peak, ops x copy bandwidth / bytes)); "
                 "speedup = best peer time / dmlq time.")
    return "\n".join(lines) + "\n"


def plot(data, outdir):
    """One PNG per operator family; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = B.summarize(data.get("benchmarks", []))
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
            work = r["ops"] / 1e12 if r["unit"] == "TOPS" else r["bytes"] / 1e9
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
