#!/usr/bin/env bash
# All GPU checks of a session in ONE device call (device time is scarce: a machine start costs a minute or more).
# Two tracks run side by side and write their logs to $OUT as they go, so a call cut short still brings back
# every finished verdict:
#
#   bench   `kernel-lsp bench --candidates` over every hand-written level-1/level-2 fixture kernel against its
#           KernelBench reference: live eager baselines, fast_p tables (Markdown/CSV/JSON), the speedup figure.
#           Compiles run on the CPU workers in parallel; the GPU verifies/times one candidate at a time.
#   tests   pytest -m gpu: the language server end to end on the GPU (verify + hover), the evaluator's GPU tests
#           (fast form, KernelBench form, illegal address -> crashed and the pool recovers, other-stream work),
#           and the GPU cases of the bad-candidate corpus.
#
#   benchmarks/gpu_session.sh [DEADLINE_S]      (default 135: both tracks get SIGINT then, and write what they have)
#
# Needs: .whl/ (pygls, lsprotocol, watchdog, pytest-lsp, ... wheels for Python 3.12: the device has no registry)
# and .kb/ (a copy of ../shared/kernelbench: level{1,2}.jsonl, baseline_timing/), both git-ignored and carried.
# The bench's torch.compile baselines are off here (inductor's cold compiles cost ~20 s per task of device time);
# `kernel-lsp bench` measures them by default.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-out}"
DEADLINE="${1:-135}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
wheels=$(ls .whl/*.whl 2>/dev/null)
[ -n "$wheels" ] && { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site $wheels >"$OUT/pip.log" 2>&1 || { echo "wheel install failed"; tail "$OUT/pip.log"; }; }
export PYTHONPATH="/tmp/site:$PWD"
[ -e kernel_lsp/prompts ] || ln -s ../prompts kernel_lsp/prompts   # what an install maps prompts/ to
export KERNELBENCH_DIR="$PWD/.kb"
export XDG_CACHE_HOME="$HOME/.cache"                      # one build cache for the bench, the tests, the server
export KLSP_TEST_CACHE="$XDG_CACHE_HOME/kernel-lsp/builds" KERNEL_LSP_TEST_CACHE="$XDG_CACHE_HOME"
mkdir -p "$KLSP_TEST_CACHE"
nvidia-smi -L
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))"
echo "setup done in $(( $(date +%s) - T0 ))s"

# The fixture tasks as a task folder (level1/<name>.py, level2/<name>.py), written from the KernelBench rows at run
# time outside the repository, so fast_p counts exactly the tasks that have a fixture.
python3 - <<'PY'
import json, pathlib
fix = pathlib.Path("tests/fixtures/kernels")
for level in (1, 2):
    names = {p.stem for p in (fix / f"level{level}").glob("*.py")}
    dest = pathlib.Path(f"/tmp/fxtasks/level{level}")
    dest.mkdir(parents=True, exist_ok=True)
    for line in open(f".kb/level{level}.jsonl"):
        row = json.loads(line)
        if row["name"] in names:
            (dest / f"{row['name']}.py").write_text(row["code"])
    print(f"level {level}: {len(list(dest.glob('*.py')))} fixture tasks")
PY
ln -sfn "$PWD/.kb/baseline_timing" /tmp/fxtasks/baseline_timing   # the H100 columns beside the live baselines

left=$(( DEADLINE - ($(date +%s) - T0) ))
timeout -s INT -k 15 "$left" python3 -m kernel_lsp bench --kernelbench /tmp/fxtasks --level 1 --level 2 \
    --candidates tests/fixtures/kernels --out "$OUT/bench" --device cuda \
    --set time_compiled=false --set compile_workers=12 \
    >"$OUT/bench.md" 2>"$OUT/bench.log" &
bench=$!
timeout -s INT -k 15 "$left" python3 -m pytest -v -m gpu -p no:cacheprovider -rs --durations=0 \
    tests/evaluator/test_gpu.py::test_illegal_address_crashes_and_pool_recovers tests/server/test_gpu_e2e.py \
    tests/evaluator/test_bad_corpus.py tests/evaluator/test_gpu.py::test_other_stream_work_is_timed \
    tests/evaluator/test_gpu.py::test_fast_form_example_correct_and_timed tests/evaluator/test_gpu.py::test_device_info \
    tests/evaluator/test_gpu.py::test_kernelbench_form_correct \
    >"$OUT/gpu_tests.log" 2>&1 &
tests=$!
wait $bench; echo "=== bench: rc=$? at $(( $(date +%s) - T0 ))s"
cat "$OUT/bench.md"; grep -v '━' "$OUT/bench.log" | tail -n 40
wait $tests; echo "=== gpu tests: rc=$? at $(( $(date +%s) - T0 ))s"
grep -E 'PASSED|FAILED|SKIPPED|ERROR|passed|failed|diagnostic:|^[0-9.]+s (call|setup)' "$OUT/gpu_tests.log" | tail -n 40
cp "$OUT"/bench/speedups.png "$OUT/speedups.png" 2>/dev/null
ps aux | grep -c "[e]valuator.worker" | sed 's/^/evaluator workers left: /'
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
