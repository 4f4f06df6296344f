#!/usr/bin/env python3
"""Instructions an element on one path of cuda/quant_types.cu's 16-byte chunk loops (sm_90 SASS).

    python tools/path_counts.py [--plain] [--out bench/results/qt-paths.md] [NAME ...]

tools/static_report.py counts a loop's static code, every branch included. The chunk loops of
qt_quantize / qt_dequantize hold several paths (a group sharing one parameter, a chunk sharing
one, element by element; division or reciprocal; three precisions), and the speed of the
common case is the path a group sharing one parameter takes at float32 precision (per tensor,
blocks along the last axis). This tool compiles the source with that path forced, in memory
(the cuda/ file is not touched; SUBSTITUTIONS below, each of which must match), and prints
each kernel's chunk loop (found by a marker, a ``pmevent`` whose PMTRIG is not counted): its
instructions, divided by the elements of a chunk (4 float32 / int32, 8 float16 / bfloat16), and the
quarter-rate instructions in it (MUFU, FCHK, FRND, F2I, I2F, F2F). ``--plain`` compiles the
source as it is (every branch in the loop, the marker added).
Static code again, but of a path without branches left to skip, so it is what a warp issues
per chunk.
"""
from __future__ import annotations

import argparse
import collections
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import static_report as sr  # noqa: E402

SOURCE = "quant_types.cu"
# The chunk loops' marker: one PMTRIG in the SASS (not counted), in --plain too.
MARK = 'asm volatile("pmevent 7;");\n'
MARKS = 2  # the first MARKS substitutions place it
# (text in the source, what the forced path puts there)
SUBSTITUTIONS = (
    ("    if constexpr (G != C) push_word<C * bits>(lo, hi, word);\n",
     "    if constexpr (G != C) push_word<C * bits>(lo, hi, word);\n" + MARK),
    ("          const uint4 v = make_uint4(chunk[0], chunk[1], chunk[2], chunk[3]);\n",
     MARK + "          const uint4 v = make_uint4(chunk[0], chunk[1], chunk[2], chunk[3]);\n"),
    ("const bool whole = w.uniform((c1 - c0) * C);", "const bool whole = true;"),
    ("const bool whole = w.uniform(PART * C);", "const bool whole = true;"),
    ("if (whole || w.uniform(C)) {", "if (true) {"),
    ("if (PREC == 0 && q.mode == CODE_FLOAT_RECIP) float_codes(by_reciprocal);",
     "if (true) float_codes(by_reciprocal);"),
    ("if (PREC == 0 && q.mode == CODE_RECIP) codes(by_reciprocal);", "if (true) codes(by_reciprocal);"),
    ("if (precision == 1) quantize_group<X, T, 1>", "if (false) quantize_group<X, T, 1>"),
    ("else if (precision == 2) quantize_group<X, T, 2>", "else if (false) quantize_group<X, T, 2>"),
)
QUARTER_RATE = ("MUFU", "FCHK", "FRND", "F2I", "I2F", "F2F")
CHUNK = {"float": 4, "int": 4, "float16": 8, "bfloat16": 8}
DENSE = {"float": "float32", "int": "int32"}
CODES = ("int8", "uint8", "int16", "uint16", "int4", "uint4", "int2", "uint2", "float8_e4m3fn",
         "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn", "int32", "uint32")


def forced_text(text: str, plain=False) -> str:
    for old, new in SUBSTITUTIONS[:MARKS] if plain else SUBSTITUTIONS:
        if old not in text:
            raise SystemExit(f"path_counts: {old!r} is no longer in cuda/{SOURCE}; update SUBSTITUTIONS")
        text = text.replace(old, new)
    return text


def _describe(name: str) -> tuple[str, int]:
    """('float32 -> int8', elements a chunk) for a kernel's demangled name."""
    args = [a.strip() for a in name[name.index("<") + 1:name.rindex(">")].split(",")]
    if name.startswith("qt_quantize"):
        dense, code = args[0], CODES[int(args[1])]
        return f"quantize {DENSE.get(dense, dense)} -> {code}", CHUNK.get(dense, 0)
    code, dense = CODES[int(args[0])], args[1]
    return f"dequantize {code} -> {DENSE.get(dense, dense)}", CHUNK.get(dense, 0)


def counts(names=None, plain=False):
    """[(kernel, description, elements a chunk, [(chunk loop instructions, its quarter-rate
    instructions), ...])]: one loop on the forced path, none where a group is one chunk (16-bit
    codes of float16), and in --plain each copy the compiler made (it unswitches some loops)."""
    from dmlq.gpu.loader import registry, source_text

    names = [n for n in registry()[SOURCE] if not n.startswith("qt_scale") and (not names or n in names)]
    text = source_text(SOURCE)
    tc = sr.Toolchain()
    cubin, _, _, _ = tc.nvrtc.compile(forced_text(text, plain), SOURCE, names, sr.compile_options(), ptx=True)
    rows = []
    for mangled, fn in sr.parse_sass(tc.disassemble(cubin)).items():
        name = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip()
        name = name.split("(")[0].removeprefix("void ")
        marked = []  # (instructions, quarter-rate) of each loop holding the marker
        for loop in sr.find_loops(fn):
            ops = collections.Counter(i.opcode.split(".")[0] for i in fn.instrs
                                      if loop.start <= i.addr <= loop.end and i.opcode != "NOP")
            if loop.nested_loops == 0 and ops["PMTRIG"]:
                marked.append((sum(ops.values()) - ops["PMTRIG"], sum(ops[o] for o in QUARTER_RATE)))
        if len(marked) > 1 and not plain:
            raise SystemExit(f"path_counts: {name} has {len(marked)} marked loops on the forced path")
        rows.append((name, *_describe(name), marked))
    return sorted(rows, key=lambda r: (not r[0].startswith("qt_quantize"), r[1]))


def render(rows, plain=False) -> str:
    path = ("as compiled: every branch of the loop counted" if plain
            else "forced: a group sharing one parameter, float32 precision")
    out = [f"# cuda/{SOURCE} chunk loops ({path})", "",
           "Generated by `python tools/path_counts.py" + (" --plain" if plain else "") + " --out ...`: the sm_90 "
           "SASS (NVRTC, nvdisasm) of each kernel's loop over a group's 16-byte chunks, no GPU. A kernel whose "
           "group is one chunk has no such loop (-).", "",
           "| kernel | conversion | instructions a chunk | elements a chunk | instructions an element | quarter-rate |",
           "| --- | --- | ---: | ---: | ---: | ---: |"]
    for name, what, c, marked in rows:
        cell = lambda f: ", ".join(f(n, q) for n, q in marked) or "-"  # noqa: E731
        out.append(f"| `{name}` | {what} | {cell(lambda n, q: str(n))} | {c} | {cell(lambda n, q: f'{n / c:.1f}')} | "
                   f"{cell(lambda n, q: str(q))} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="name expressions (default: every qt_quantize / qt_dequantize)")
    ap.add_argument("--plain", action="store_true", help="compile the source as it is")
    ap.add_argument("--out", help="write the markdown table here (default: print it)")
    args = ap.parse_args(argv)
    text = render(counts(args.names, args.plain), args.plain)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
