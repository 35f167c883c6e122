#!/usr/bin/env bash
# All GPU checks of a session, for the device machine (no registry there: missing wheels travel in .whl/).
#
#   benchmarks/gpu_session.sh 1     oracle: GPU tests of the evaluator (fixtures, bad corpus, holes),
#                                   `bench --candidates` over the fixtures (tables + figure), evaluator benchmark
#   benchmarks/gpu_session.sh 2     product: LSP end to end on a KernelBench file, `optimize` with the embedded
#                                   small model (its GGUF travels in two parts: .m1/ in call 1, .m2/ in call 2)
#
# Every step has its own time limit; logs and results go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
wheels=$(ls .whl/*.whl .whl2/*.whl 2>/dev/null)
[ -n "$wheels" ] && { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site $wheels >"$OUT/pip.log" 2>&1 || { echo "wheel install failed"; tail "$OUT/pip.log"; }; }
export PYTHONPATH="/tmp/site:$PWD"
[ -e kernel_lsp/prompts ] || ln -s ../prompts kernel_lsp/prompts   # what an install maps prompts/ to
export KERNELBENCH_DIR="$PWD/.kb"
export KLSP_TEST_CACHE="$HOME/.cache/kernel-lsp/builds"   # the tests and the CLI share one build cache
mkdir -p "$KLSP_TEST_CACHE"
nvidia-smi -L
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))"

step() {  # step NAME SECONDS CMD...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  echo "=== $name (limit ${limit}s)"
  timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc in $(( $(date +%s) - t0 ))s"
  tail -n 25 "$OUT/$name.log"
}

if [ "${1:-1}" = 1 ]; then
  mkdir -p .mcache && cp .m1/part1 .mcache/part1 2>/dev/null
  step fixtures_parallel "${FIXTURES_LIMIT:-380}" python3 benchmarks/fixtures_parallel.py --threads 25
  step gpu_tests_oracle 150 python3 -m pytest -q -p no:cacheprovider tests/evaluator/test_gpu.py -rs
  [ "${WITH_BENCH:-1}" = 1 ] && step bench_fixtures 130 benchmarks/gpu_bench_fixtures.sh .kb "$OUT/bench"
  cp "$OUT"/bench/level1/speedups.png "$OUT/speedups_level1.png" 2>/dev/null
  cp "$OUT"/bench/level2/speedups.png "$OUT/speedups_level2.png" 2>/dev/null
  ps aux | grep -c "[e]valuator.worker" | sed 's/^/leftover evaluator workers: /'
else
  if [ -f .mcache/part1 ]; then
    cat .mcache/part1 .m2/part2 > /tmp/smollm2.gguf
    echo "model sha256 $(sha256sum /tmp/smollm2.gguf | cut -c1-16) expected $(cut -c1-16 .m2/sha256)"
  fi
  step gpu_tests_server 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/server -rs
  if [ -f /tmp/smollm2.gguf ]; then
    for task in 19_ReLU 23_Softmax; do
      python3 - "$task" <<'PY'
import json, sys
name = sys.argv[1]
for line in open(".kb/level1.jsonl"):
    row = json.loads(line)
    if row["name"] == name:
        open(f"/tmp/{name}.py", "w").write(row["code"])
PY
      step "optimize_$task" 150 python3 -m kernel_lsp optimize "/tmp/$task.py" --model /tmp/smollm2.gguf \
        --samples 2 --rounds 2 --device cuda --max-tokens 1024
    done
  else
    echo "no model part 1 on this machine (it was released between the calls): optimize skipped"
  fi
  step bench_evaluator 200 python3 benchmarks/bench_evaluator.py --device cuda --n 8
fi
ps aux | grep -c "[e]valuator.worker" | sed 's/^/evaluator workers left: /'
nvidia-smi --query-gpu=memory.used --format=csv
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
ps -eo pid,ppid,etime,cmd | grep "[e]valuator.worker" | head
