"""Commit-ready records of device calls: ``python tools/gpu_record.py DIR...``, each DIR what one
``tools/gpu_session.sh STAGE`` call brought back (the device tool's files_at: summary.txt,
STAGE.json, STAGE-logs.tar.gz, benchmark JSON).

Writes, under the repository (or --root):
  bench/results/<benchmark JSON>            as it came (bench/report.py reads it)
  bench/results/gpu-DATE/STAGE.json, STAGE-summary.txt and STAGE/ (the logs archive unpacked)
  bench/results/hardening.md                a section per call: the GPU, the steps (rc, seconds,
                                            tally), fuzz examples per operator and kernel variant,
                                            sanitizer error counts
--run N keeps a later session of the same day apart: gpu-DATE-runN/, <benchmark>-runN.json
and "DATE, run N" in hardening.md (the device names its benchmark JSON by the day alone).
Nothing here judges the results: the rows are what the logs say.
"""
from __future__ import annotations

import argparse
import datetime
import io
import json
import re
import shutil
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _gpu(files: dict) -> str:
    smi = files.get("nvidia-smi.txt", "")
    m = re.search(r"NVIDIA [A-Z]\w+[\w -]*?(?=\s{2,}|\s+(On|Off)\b)", smi)
    return m.group(0).strip() if m else "GPU unknown (no nvidia-smi output)"


def _section(stage: str, date: str, rows: list, files: dict) -> str:
    out = [f"## {date}: `{stage}` on {_gpu(files)}", "",
           "| step | rc | seconds (cap) | tally |", "| --- | --- | --- | --- |"]
    out += [f"| {r['step']} | {r['rc']} | {r['seconds']} ({r['cap']}) | {r['tally'].strip()} |" for r in rows]
    fuzz = [json.loads(line) for name, text in sorted(files.items()) if name.endswith(".jsonl")
            for line in text.splitlines() if line.strip()]
    if fuzz:
        out += ["", "| fuzz test | device | examples | seconds | examples per kernel variant |",
                "| --- | --- | --- | --- | --- |"]
        out += [f"| {f['test']} | {f['device']} | {f['examples']} | {f['seconds']} | "
                f"{', '.join(f'{k} {v}' for k, v in f['variants'].items())} |" for f in fuzz]
    reports = {name: text for name, text in sorted(files.items()) if name.endswith(".report")}
    if reports:
        out += ["", "| sanitizer | errors (its ERROR SUMMARY) |", "| --- | --- |"]
        for name, text in reports.items():
            # memcheck, initcheck, synccheck: "ERROR SUMMARY: 0 errors"; racecheck:
            # "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
            m = re.findall(r"(?:ERROR|RACECHECK) SUMMARY: (?:\d+ hazards displayed \()?(\d+) error", text)
            out.append(f"| {name[len('sanitize_'):-len('.report')]} | "
                       f"{m[-1] if m else 'no summary (cut off or did not start)'} |")
    return "\n".join(out) + "\n"


def record(folder: Path, root: Path = ROOT, date: str | None = None, run: int | None = None) -> list:
    """Write one call's records; returns the paths written."""
    tag = f"-run{run}" if run else ""
    results = root / "bench" / "results"
    stage_files = sorted(folder.glob("*-logs.tar.gz"))
    if not stage_files:
        raise SystemExit(f"{folder}: no STAGE-logs.tar.gz (is this what tools/gpu_session.sh left in $OUT?)")
    written = []
    for archive in stage_files:
        stage = archive.name[:-len("-logs.tar.gz")]
        day = date or datetime.date.today().isoformat()
        dest = results / f"gpu-{day}{tag}"
        (dest / stage).mkdir(parents=True, exist_ok=True)
        files = {}
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    name = Path(member.name).name
                    data = tar.extractfile(member).read()
                    (dest / stage / name).write_bytes(data)
                    files[name] = io.TextIOWrapper(io.BytesIO(data), errors="replace").read()
        rows = json.loads((folder / f"{stage}.json").read_text()) if (folder / f"{stage}.json").is_file() else []
        for name, target in ((f"{stage}.json", f"{stage}.json"), ("summary.txt", f"{stage}-summary.txt")):
            if (folder / name).is_file():
                shutil.copyfile(folder / name, dest / target)
                written.append(dest / target)
        for bench in folder.glob("*.json"):
            stages = {a.name[:-len("-logs.tar.gz")] + ".json" for a in stage_files}  # one call, several stages
            if bench.name not in stages and bench.stat().st_size:
                target = results / f"{bench.stem}{tag}.json"
                shutil.copyfile(bench, target)
                written.append(target)
        hardening = results / "hardening.md"
        head = "" if hardening.is_file() else (
            "# GPU hardening record\n\nWritten by `tools/gpu_record.py` from what `tools/gpu_session.sh` "
            "brought back from the device; newest last.\n\n")
        with hardening.open("a") as f:
            f.write(head + _section(stage, f"{day}, run {run}" if run else day, rows, files) + "\n")
        written += [dest / stage, hardening]
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--date", help="YYYY-MM-DD of the device run (default today)")
    ap.add_argument("--run", type=int, help="a later session of the same day: its records beside the first's")
    args = ap.parse_args(argv)
    for folder in args.folders:
        for path in record(folder, args.root, args.date, args.run):
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
