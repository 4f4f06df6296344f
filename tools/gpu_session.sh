#!/usr/bin/env bash
# The device runbook: one stage per device call, from the repo root, on the bare
# device image (CUDA 13, cupy-cuda13x, torch, pytest, pytest-benchmark and
# compute-sanitizer; no network, so nothing is installed; tools/device_image.txt
# lists its Python packages). The device tool brings back at most 8 files from $OUT
# (default /tmp/dmlq-gpu-out), so a stage leaves there: summary.txt (the lines it printed),
# <stage>.json (one row per step: rc, seconds, cap, the pytest tally), the benchmark JSON
# of bench / quick, and <stage>-logs.tar.gz (every step's log, JUnit XML, fuzz counts,
# sanitizer reports, nvidia-smi and dmlq info; refreshed after each step, so a stage cut
# off still returns what it ran). Each stage stops itself before the device tool's
# 10-minute limit (DMLQ_STAGE_SECONDS, default 340 for quick, 530 otherwise).
#
#   tools/gpu_session.sh quick      ~5.5 min: warm compile, info, every kernel variant on a
#                                   small case (tensor-core known answers first), check,
#                                   torch CUDA items, graph captures and threads, a timed
#                                   fuzz slice, key benchmarks
#   tools/gpu_session.sh correct    info, check, every gpu-marked test, the 10,000-case fuzz
#   tools/gpu_session.sh sanitize   compute-sanitizer memcheck/racecheck/initcheck/synccheck
#                                   (nvidia-h100-x1 kind: the tool does not work on the H200 here)
#   tools/gpu_session.sh bench      the pytest-benchmark suite -> JSON
#   tools/gpu_session.sh large      tensors past 2**31 elements, K > 33025
#   tools/gpu_session.sh fuzz       the 10,000-case fuzz alone (DMLQ_FUZZ_K: a pytest -k
#                                   expression, e.g. "intmm or matmul" for the matmul operators)
#   tools/gpu_session.sh profile    ncu on the kernels measured far from their limits
#                                   (tools/gpu_profile.py: pooling, the int8-b stream kernel)
#   tools/gpu_session.sh collect    no device needed: every step of every stage written to
#                                   $OUT/steps.txt, each pytest step's selection collected
#                                   (--collect-only) into $OUT/collect_<step>.txt
#
# Only the GPU twins run (tools/pytest_device.py deselects the cupy stand-in twins, which
# CI runs); one pytest process per step (-p no:xdist), CuPy's kernel cache filled first by
# tools/gpu_warm.py (all sources compiled at once). A step past its time gets SIGINT, so
# pytest still writes its JUnit XML and benchmark JSON for what ran; the fuzz runs in
# seeded chunks with a time slice per operator (DMLQ_FUZZ_SECONDS) and reports its counts
# per variant (fuzz*.jsonl in the logs archive).
#
# Without a GPU every stage says so in one line and exits 0, so the script can
# be tested to the end on any machine (DMLQ_SESSION_DRY=1 instead prints each step it
# would run with its time cap; DMLQ_SESSION_FORCE=1 runs the steps anyway, the GPU tests
# skipping: the plumbing -- caps, SIGINT, the JSON, the archive -- tested without a device). tests/test_gpu_session.py reads the collect stage and fails
# if a step selects nothing, a command needs a package the image lacks, or a kernel
# variant is missing from the quick, correct or sanitize lists.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD:$PWD/tools${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY="${DMLQ_PYTHON:-python3}"   # on the device image python3 is the one holding torch and CuPy
OUT="${OUT:-/tmp/dmlq-gpu-out}"
mkdir -p "$OUT"
STAGE="${1:-}"
LOGS="${DMLQ_SESSION_LOGS:-${TMPDIR:-/tmp}/dmlq-session-logs}/$STAGE"   # archived into $OUT after each step
[[ $STAGE == collect ]] || rm -rf "$LOGS"   # this run's files only
mkdir -p "$LOGS"
pack() { tar -czf "$OUT/$STAGE-logs.tar.gz" -C "$LOGS" . 2>/dev/null || true; }
case "$STAGE" in quick) DEFAULT_BUDGET=340 ;; *) DEFAULT_BUDGET=530 ;; esac
BUDGET="${DMLQ_STAGE_SECONDS:-$DEFAULT_BUDGET}"   # whole stage, under the tool's 600 s
START=$(date +%s)
DRY="${DMLQ_SESSION_DRY:-}"
DRY_SPENT=0   # a dry run spends each step's whole cap (the worst case of the plan)
left() { echo $(( BUDGET - ($(date +%s) - START) - DRY_SPENT )); }
# every pytest step: the device's twins only, one process, no cache folder
PYTEST=("$PY" -m pytest -p pytest_device -p no:xdist -p no:cacheprovider)

say() { echo "[$STAGE] $*" | tee -a "$OUT/summary.txt"; }
record() {  # one JSON row per step in $OUT/<stage>.json (a JSON list, valid after every step)
  local file="$OUT/$STAGE.json"
  [[ -s $file ]] || echo "[]" > "$file"
  "$PY" - "$file" "$@" <<'PYEOF'
import json, sys
path, name, rc, seconds, cap, tally = sys.argv[1:7]
rows = json.load(open(path))
rows.append({"step": name, "rc": int(rc), "seconds": int(seconds), "cap": int(cap), "tally": tally})
json.dump(rows, open(path, "w"), indent=1)
PYEOF
}

# run NAME SECONDS CMD...: a step with its own time cap and log, its result in one line.
# In the collect stage: the step is written to steps.txt and, for pytest, its
# selection collected instead of run.
run() {
  local name=$1 cap=$2
  shift 2
  if [[ $COLLECT ]]; then
    echo "$name: $*" >> "$OUT/steps.txt"
    local i
    for (( i = 1; i < $#; i++ )); do
      if [[ ${!i} == "$PY" && ${*:i+1:2} == "-m pytest" ]]; then
        local args=() a
        for a in "${@:i+3}"; do   # where results go does not change the selection
          [[ $a == --junitxml=* || $a == --benchmark-json=* ]] || args+=("$a")
        done
        local sel="${args[*]}"
        if [[ -z ${COLLECTED[$sel]:-} ]]; then   # steps with one selection share one collection
          "$PY" -m pytest --collect-only "${args[@]}" > "$OUT/collect_$name.txt" 2>&1
          COLLECTED[$sel]="rc=$? $name"
        elif [[ ${COLLECTED[$sel]#* } != "$name" ]]; then
          cp "$OUT/collect_${COLLECTED[$sel]#* }.txt" "$OUT/collect_$name.txt"
        fi
        echo "collect_$name: ${COLLECTED[$sel]% *}" >> "$OUT/steps.txt"
      fi
    done
    return 0
  fi
  local budget
  budget=$(left)
  (( cap > budget )) && cap=$budget
  if (( cap < 10 )); then
    say "$name: skipped (stage time spent)"
    [[ $DRY ]] || record "$name" -1 0 0 "skipped: stage time spent"
    return 0
  fi
  if [[ $DRY ]]; then
    say "$name: would run for at most ${cap} s: $*"
    DRY_SPENT=$(( DRY_SPENT + cap ))
    return 0
  fi
  local t0 rc tail_line
  t0=$(date +%s)
  # SIGINT first: pytest stops as after Ctrl-C and still writes its XML / benchmark JSON
  timeout --signal=INT --kill-after=20 "$cap" "$@" > "$LOGS/$name.log" 2>&1
  rc=$?
  (( rc == 124 || rc == 130 )) && echo "STOPPED at its ${cap} s cap (partial results)" >> "$LOGS/$name.log"
  tail_line=$(grep -E "[0-9]+ (passed|failed|error|skipped|deselected)|no tests ran|STOPPED|sources compiled|ERROR|Error" \
    "$LOGS/$name.log" | grep -v "^seed=" | tail -n 2 | tr '\n' ' ')
  say "$name: rc=$rc in $(( $(date +%s) - t0 )) s: ${tail_line:-(see $name.log)}"
  record "$name" "$rc" "$(( $(date +%s) - t0 ))" "$cap" "$tail_line"
  pack
  return 0
}

# slim RAW OUT: the benchmark JSON without each row's list of round times (stats.data: one
# number per round, megabytes for calls of a few microseconds; the first H100 session's full
# suite JSON passed the device tool's 16 MiB a file and did not come back). The statistics stay.
slim() {
  [[ -s $1 && ! $COLLECT && ! $DRY ]] || return 0
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
for b in d.get("benchmarks", []):
    b.get("stats", {}).pop("data", None)
json.dump(d, open(sys.argv[2], "w"), indent=1)
PYEOF
}
RAW="${TMPDIR:-/tmp}/dmlq-bench-raw.json"

have_gpu() {
  "$PY" - <<'EOF' 2>/dev/null
import sys
try:
    import cupy
    sys.exit(0 if cupy.cuda.runtime.getDeviceCount() > 0 else 1)
except Exception:
    sys.exit(1)
EOF
}

COLLECT=
declare -A COLLECTED
STAGES=("$STAGE")
case "$STAGE" in
  quick|correct|sanitize|bench|large|profile|fuzz) ;;
  collect)
    COLLECT=1
    STAGES=(quick correct sanitize bench large profile fuzz)
    : > "$OUT/steps.txt" ;;
  *)
    echo "usage: tools/gpu_session.sh quick|correct|sanitize|bench|large|profile|fuzz|collect   (logs under \$OUT)" >&2
    exit 2 ;;
esac

if [[ $COLLECT || $DRY ]]; then
  :
elif ! have_gpu && [[ -z ${DMLQ_SESSION_FORCE:-} ]]; then
  say "no CUDA GPU here (CuPy sees none): stage skipped"
  exit 0
else
  nvidia-smi > "$LOGS/nvidia-smi.txt" 2>&1 || true
  "$PY" -m dmlq info > "$LOGS/info.txt" 2>&1 || true
  pack
  gpu_line=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
  say "${gpu_line:-GPU unknown (nvidia-smi failed)}; budget ${BUDGET} s"
fi

# The small cases of every kernel variant (tests/gpu_variants.py), the tensor-core known answers first.
# (and the 64-bit index element-wise kernels, forced on small inputs)
VARIANTS=(tests/test_gpu_variants.py "tests/test_gpu_elementwise.py::test_wide_index_kernels" -m gpu)
# The sanitizers' list: those cases plus the contract's edge cases on the element-wise,
# pooling and tiled matmul kernels (the GPU twins of the host-harness tests).
SANITIZE=(-m gpu tests/test_gpu_variants.py "tests/test_gpu_elementwise.py::test_wide_index_kernels"
          tests/test_select_avgpool.py tests/test_select_avgpool_cl.py
          "tests/test_select_matmul.py::test_emulated_mma_stages_tails_and_alignment"
          "tests/test_select_matmul.py::test_emulated_mma_split_k"
          "tests/test_select_matmul.py::test_emulated_tile_edges_and_alignment")
# The key benchmarks: 64M-element element-wise, 8192^3 matmul (tensor cores, dp4a, torch._int_mm),
# the decode step at N = K = 8192 (the integer family at M = 1, 4, 16 on selection's kernels, quantized_matmul's
# packed stream kernel), 3x3 and 2x2 pooling, the torch call overhead, and the narrow types' 64M-element
# blocked quantize and dequantize (16-, 8-, 4- and 2-bit integers: 2 to 16 chunks of float32 a group, staged
# through shared memory since the H200's third run; the e4m3 float8 types, torch's float8 casts beside them;
# int4 with a scale per column, the neighbour path along the last axis since session 25),
# and the 256M-element dequantize and add (the widening dequantize kernels changed since the first run);
# quantized_matmul's int8 b at N = 14336, K = 4096, M = 1 and 4, auto against the tensor cores forced;
# quantize float16 -> int8 at 128M elements (0.61 on the H200 before quantize_contig's reciprocal division);
# global pooling of channels_last 64x256x56x56 and 64x2048x7x7 (channels_last_global_*, session 32);
# dynamic_quantize_linear on 256 MiB of float32 and float16 (session 32).
BENCH_KEY=(bench/test_bench_elementwise.py bench/test_bench_matmul.py bench/test_bench_intmm.py
           bench/test_bench_avgpool.py bench/test_bench_torch.py bench/test_bench_qtypes.py bench/test_bench_dynquant.py
           -m "not cpu"
           -k "(16384x4096 and not axis1) or (8192 and not 14336 and not dp4a-32x32 and not f32) or k3s1p1 or 256x256x56x56 or global or dynquant or torch_call_overhead or (intmm and 14336) or (64M-blocked32 and (int4 or int2 or int8 or int16 or e4m3)) or 64M-axis1 or (65536x4096 and not axis1 and (dequantize or add)) or (32768x4096 and float16)")
# The fuzz is bound by the host (hypothesis' draws, the NumPy reference: about 5 ms an example
# on the H100's host, so 3,000 quantize examples in 16 s) and the device has 16 cores: where
# the image's pytest-xdist imports, the FUZZ_TESTS fuzz tests run side by side (-n FUZZ_TESTS),
# each with the whole time slice instead of a share of it; without it they run one after another.
# FUZZ_TESTS is the number of GPU fuzz tests (tests/test_gpu_session.py checks it against the
# collection: a tenth test on nine workers would wait for a slot and run past the step's cap).
FUZZ_TESTS=9
FUZZ_PROCS=1
if [[ ! $COLLECT && ! $DRY ]] && "$PY" -c "import xdist" 2>/dev/null; then
  FUZZ_PROCS=$FUZZ_TESTS
fi
FUZZ_PYTEST=("$PY" -m pytest -p pytest_device -p no:cacheprovider)
if (( FUZZ_PROCS > 1 )); then FUZZ_PYTEST+=(-n "$FUZZ_PROCS"); else FUZZ_PYTEST+=(-p no:xdist); fi
fuzz_seconds() {  # fuzz_seconds CAP: each fuzz test's DMLQ_FUZZ_SECONDS inside a step of CAP seconds
  local each=$(( FUZZ_PROCS > 1 ? $1 - 30 : ($1 - 20) / FUZZ_TESTS ))
  echo $(( each > 1 ? each : 1 ))
}
GPU_NAME=collect
if [[ ! $COLLECT && ! $DRY ]]; then
  GPU_NAME=$("$PY" -c "import cupy; print(cupy.cuda.runtime.getDeviceProperties(0)['name'].decode().replace(' ', '-'))" 2>/dev/null || echo gpu)
fi

for STAGE in "${STAGES[@]}"; do
case "$STAGE" in
  quick)
    run warm 120 "$PY" tools/gpu_warm.py
    run variants 60 "${PYTEST[@]}" -q "${VARIANTS[@]}" --junitxml="$LOGS/variants.xml"
    run check 40 "$PY" -m dmlq check
    run torch_cuda 60 "${PYTEST[@]}" -q -m gpu tests/test_torch.py tests/test_torch_gpu_forms.py tests/test_torch_transforms.py --junitxml="$LOGS/torch_cuda.xml"
    # CUDA-graph captures replayed after later allocations, and calls from several threads (session 29)
    run capture_threads 40 "${PYTEST[@]}" -q -m gpu tests/test_graph_capture.py tests/test_gpu_threads.py --junitxml="$LOGS/capture_threads.xml"
    cap=$(( $(left) - 90 < 75 ? $(left) - 90 : 75 ))   # 90 s kept for the benchmarks
    run fuzz_slice "$cap" env DMLQ_FUZZ_EXAMPLES=10000 DMLQ_FUZZ_CHUNK=25 DMLQ_FUZZ_SECONDS="$(fuzz_seconds "$cap")" \
      DMLQ_FUZZ_REPORT="$LOGS/fuzz_quick.jsonl" \
      "${FUZZ_PYTEST[@]}" -q -m gpu tests/test_fuzz_kernels.py
    rm -f "$RAW"
    run bench_key "$(left)" "${PYTEST[@]}" -q "${BENCH_KEY[@]}" --benchmark-json="$RAW"
    slim "$RAW" "$OUT/${GPU_NAME}-key-$(date +%Y-%m-%d).json"
    ;;
  correct)
    run warm 150 "$PY" tools/gpu_warm.py
    run check 120 "$PY" -m dmlq check
    # Known answers and every variant first: the tensor-core fragments have only met the host emulation.
    run variants 90 "${PYTEST[@]}" -q "${VARIANTS[@]}"
    # Every gpu test; a sticky CUDA error (tools/pytest_device.py writes the test's node id to
    # $sticky) ends the process's context, so the tests after it go on in a new process, 3 times at most.
    sticky="$LOGS/sticky.txt" after= step=gpu_tests
    for k in 1 2 3 4; do
      rm -f "$sticky"
      run "$step" 300 env DMLQ_DEVICE_STICKY_FILE="$sticky" DMLQ_DEVICE_AFTER="$after" \
        "${PYTEST[@]}" -q -m gpu tests --junitxml="$LOGS/$step.xml"
      [[ -s $sticky && $k -lt 4 ]] || break
      after=$(cat "$sticky") step="gpu_tests_$k"
      say "gpu_tests: a sticky CUDA error in $after; the tests after it run in a new process"
    done
    run fuzz "$(left)" env DMLQ_FUZZ_EXAMPLES="${DMLQ_FUZZ_EXAMPLES:-10000}" DMLQ_FUZZ_CHUNK=200 \
      DMLQ_FUZZ_SECONDS="$(fuzz_seconds "$(left)")" DMLQ_FUZZ_REPORT="$LOGS/fuzz.jsonl" \
      "${FUZZ_PYTEST[@]}" -q -m gpu tests/test_fuzz_kernels.py
    ;;
  sanitize)
    # A reduced case list: the sanitizers run every access 10-100x slower.
    if [[ $GPU_NAME == *H200* ]]; then
      say "compute-sanitizer does not work on the H200 kind here: call again with kind nvidia-h100-x1"
      continue
    fi
    SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
    SANITIZER=${SANITIZER:-compute-sanitizer}
    run warm 150 "$PY" tools/gpu_warm.py
    n=4   # the time left, shared by the tools still to run
    for tool in memcheck racecheck initcheck synccheck; do
      run "sanitize_$tool" "$(( ($(left) - 5) / n ))" env DMLQ_CUPY_NO_POOL=1 \
        "$SANITIZER" --tool "$tool" --error-exitcode 99 --log-file "$LOGS/sanitize_$tool.report" \
        "${PYTEST[@]}" -q "${SANITIZE[@]}"
      n=$(( n - 1 ))
      [[ $COLLECT || $DRY ]] || say "sanitize_$tool: $(grep -c '========= ' "$LOGS/sanitize_$tool.report" 2>/dev/null || echo 0) report lines"
    done
    ;;
  bench)
    run warm 150 "$PY" tools/gpu_warm.py
    rm -f "$RAW"
    run bench "$(( $(left) - 10 ))" "${PYTEST[@]}" bench -q --benchmark-json="$RAW"
    slim "$RAW" "$OUT/${GPU_NAME}-$(date +%Y-%m-%d).json"
    ;;
  profile)
    # Nsight Compute on the kernels the first H100 session measured far from their limits
    # (tools/gpu_profile.py): speed of light, memory, occupancy, warp states, one launch each.
    NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
    run warm 150 "$PY" tools/gpu_warm.py
    run host_time 90 "$PY" tools/gpu_profile.py --host-time
    # the report kept for its pages: the source page (every SASS instruction with its executions,
    # summed up by tools/ncu_sass.py) is what found avgpool_tile's rolled mask loops
    run profile "$(( $(left) - 45 ))" "${NCU:-ncu}" --clock-control none --target-processes all \
      -k "regex:avgpool_|matmul_stream|matmul_mma|quantize_contig|qt_quantize|qt_dequantize" --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats \
      --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis \
      --section SourceCounters -f -o "$LOGS/profile" "$PY" tools/gpu_profile.py
    run profile_pages 40 bash -c "'${NCU:-ncu}' --import '$LOGS/profile.ncu-rep' --page details > '$LOGS/profile_details.txt' \
      && '${NCU:-ncu}' --import '$LOGS/profile.ncu-rep' --page source --print-source sass --csv | gzip > '$LOGS/profile_sass.csv.gz' \
      && '$PY' tools/ncu_sass.py '$LOGS/profile_sass.csv.gz' > '$LOGS/profile_sass.txt'; rm -f '$LOGS/profile.ncu-rep'"
    ;;
  fuzz)
    # the fuzz of the correct stage without its gpu tests: a session whose other stages ran
    # brings operators short of 10,000 cases up to it
    run warm 150 "$PY" tools/gpu_warm.py
    run fuzz_only "$(left)" env DMLQ_FUZZ_EXAMPLES="${DMLQ_FUZZ_EXAMPLES:-10000}" DMLQ_FUZZ_CHUNK=200 \
      DMLQ_FUZZ_SECONDS="$(fuzz_seconds "$(left)")" DMLQ_FUZZ_REPORT="$LOGS/fuzz.jsonl" \
      "${FUZZ_PYTEST[@]}" -q -m gpu tests/test_fuzz_kernels.py -k "${DMLQ_FUZZ_K:-fuzz}"
    ;;
  large)
    run warm 150 "$PY" tools/gpu_warm.py
    run large "$(left)" "${PYTEST[@]}" -q -m gpu \
      tests/test_gpu_elementwise.py tests/test_gpu_avgpool.py tests/test_gpu_matmul.py -k "2_31 or beyond or wide or large or worst"
    ;;
esac
done
[[ $COLLECT ]] && exit 0
FAILED_STEPS=$([[ -s "$OUT/$STAGE.json" ]] && "$PY" -c "import json, sys; print(' '.join(r['step'] for r in json.load(open(sys.argv[1])) if r['rc'] not in (0, -1)) or 'none')" "$OUT/$STAGE.json")
say "done in $(( $(date +%s) - START )) s of ${BUDGET}; steps with rc != 0: ${FAILED_STEPS:-none}; in \$OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
[[ $DRY ]] || pack
