#!/usr/bin/env bash
# The device runbook: one stage per device call, from the repo root, on the bare
# device image (CUDA 13, cupy-cuda13x, torch, pytest, pytest-benchmark and
# compute-sanitizer; no network, so nothing is installed). Everything goes
# under $OUT (default /tmp/dmlq-gpu-out); each stage prints a few summary
# lines and stops itself before the device tool's 10-minute limit.
#
#   tools/gpu_session.sh correct    info, check, every gpu-marked test, kernel fuzz
#   tools/gpu_session.sh sanitize   compute-sanitizer memcheck/racecheck/initcheck/synccheck
#   tools/gpu_session.sh bench      the pytest-benchmark suite -> JSON
#   tools/gpu_session.sh large      tensors past 2**31 elements, K > 33025
#   tools/gpu_session.sh collect    no device needed: every step of every stage written to
#                                   $OUT/steps.txt, each pytest step's selection collected
#                                   (--collect-only) into $OUT/collect_<step>.txt
#
# Without a GPU every stage says so in one line and exits 0, so the script can
# be tested to the end on any machine. The correct stage runs `python -m dmlq check`
# (dmlq.check.gpu_cases on the GPU) and every gpu test, tests/test_gpu_cases.py
# (the same cases) among them; tests/test_gpu_session.py reads the collect stage
# and fails if the two lists drift apart or a step selects nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/dmlq-gpu-out}"
mkdir -p "$OUT"
STAGE="${1:-}"
BUDGET="${DMLQ_STAGE_SECONDS:-530}"   # whole stage, under the tool's 600 s
START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }

say() { echo "[$STAGE] $*" | tee -a "$OUT/summary.txt"; }

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
      if [[ ${!i} == python && ${*:i+1:2} == "-m pytest" ]]; then
        local sel="${*:i+3}"
        if [[ -z ${COLLECTED[$sel]:-} ]]; then   # the sanitizers share one selection
          python -m pytest --collect-only "${@:i+3}" > "$OUT/collect_$name.txt" 2>&1
          COLLECTED[$sel]="rc=$? $name"
        else
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
    return 0
  fi
  timeout --signal=TERM "$cap" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local tail_line
  tail_line=$(grep -E "passed|failed|error|ERROR|Error|mismatch|==.*==|ok|FAIL" "$OUT/$name.log" | tail -n 1)
  say "$name: rc=$rc ${tail_line:-(see $name.log)}"
  return 0
}

have_gpu() {
  python - <<'EOF' 2>/dev/null
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
  correct|sanitize|bench|large) ;;
  collect)
    COLLECT=1
    STAGES=(correct sanitize bench large)
    : > "$OUT/steps.txt" ;;
  *)
    echo "usage: tools/gpu_session.sh correct|sanitize|bench|large|collect   (logs under \$OUT)" >&2
    exit 2 ;;
esac

if [[ $COLLECT ]]; then
  :
elif ! have_gpu; then
  say "no CUDA GPU here (CuPy sees none): stage skipped"
  exit 0
else
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
  python -m dmlq info > "$OUT/info.txt" 2>&1 || true
fi

for STAGE in "${STAGES[@]}"; do
case "$STAGE" in
  correct)
    run check 120 python -m dmlq check
    # Known-answer mma cases first: the tensor-core fragments have only met the host emulation.
    run mma_first 120 python -m pytest -q -x -p no:cacheprovider -m gpu tests/test_select_matmul.py -k mma
    run gpu_tests 360 python -m pytest -q -p no:cacheprovider -m gpu --junitxml="$OUT/gpu_tests.xml"
    run fuzz "$(left)" env DMLQ_FUZZ_EXAMPLES="${DMLQ_FUZZ_EXAMPLES:-10000}" \
      python -m pytest -q -p no:cacheprovider -m gpu tests/test_fuzz_kernels.py
    ;;
  sanitize)
    # A reduced case list: the sanitizers run every access 10-100x slower.
    CASES=(tests/test_host_elementwise.py tests/test_select_avgpool.py
           "tests/test_select_matmul.py::test_emulated_mma_stages_tails_and_alignment"
           "tests/test_select_matmul.py::test_emulated_mma_split_k"
           "tests/test_select_matmul.py::test_emulated_tile_edges_and_alignment")
    for tool in memcheck racecheck initcheck synccheck; do
      run "sanitize_$tool" 120 compute-sanitizer --tool "$tool" --error-exitcode 99 \
        --log-file "$OUT/sanitize_$tool.report" \
        python -m pytest -q -x -p no:cacheprovider -m gpu "${CASES[@]}"
      [[ $COLLECT ]] || say "sanitize_$tool: $(grep -c '========= ' "$OUT/sanitize_$tool.report" 2>/dev/null || echo 0) report lines"
    done
    ;;
  bench)
    name=collect
    [[ $COLLECT ]] || name=$(python -c "import cupy; print(cupy.cuda.runtime.getDeviceProperties(0)['name'].decode().replace(' ', '-'))")
    run bench "$(left)" python -m pytest bench -q -p no:cacheprovider \
      --benchmark-json="$OUT/${name}-$(date +%Y-%m-%d).json"
    ;;
  large)
    run large "$(left)" python -m pytest -q -p no:cacheprovider -m gpu \
      tests/test_gpu_elementwise.py tests/test_gpu_avgpool.py tests/test_gpu_matmul.py -k "2_31 or beyond or wide or large or worst"
    ;;
esac
done
[[ $COLLECT ]] && exit 0
say "done in $(( $(date +%s) - START )) s; logs in $OUT"
