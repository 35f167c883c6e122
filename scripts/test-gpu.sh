#!/usr/bin/env bash
# The GPU suite (the tests marked `gpu`) in one go: three groups side by side, each its own pytest process with its
# own evaluators, sharing the device as a user's editor, sweep and notebook do (timing takes turns through the
# host-wide lease, device memory through admission and the host-wide board of memory wanted; what one group's work
# does to another's figures is contention, never a verdict).
#   adversarial  the CUDA cases of the adversarial corpus (the attacks, then the valid kernels)
#   fixtures     every kernel fixture on the GPU, evaluated side by side
#   rest         the evaluator's GPU tests, the device monitor, the bad-candidate corpus's CUDA cases, the language
#                server end to end
# More groups are not faster: on a 16-core H200 machine four or five side by side spend the cores on compiles and
# the device's timing turns on each other (docs/gpu-results.md).
# Then, alone, the tests that put a neighbour on the device on purpose (a process that never leaves it idle):
#   shared       beside them, every other group's verdicts would be contended too, each timed request waiting for
#                the device as long as that neighbour lives (a suite of 224 s took over 420 s so), which is what
#                those tests check on one verdict, not what the others are for (AFTER_LIMIT s, default 200)
#
#   scripts/test-gpu.sh [--limit SECONDS] [--logs DIR] [pytest args...]
# Every group runs under the limit (default 330 s; killed with its workers past it), every test under its own
# limit where pytest-timeout is installed. Each group's log is written as it runs (--logs, default a new temporary
# folder); the summary lists each group's counts and failures. Exit status: 0 when every group passed.
# PYTHON (default .venv/bin/python, else python3) runs pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
LIMIT=330
LOGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --limit) LIMIT="$2"; shift 2 ;;
    --logs) LOGS="$2"; shift 2 ;;
    *) break ;;
  esac
done
PY="${PYTHON:-}"
[ -n "$PY" ] || { [ -x .venv/bin/python ] && PY=.venv/bin/python || PY=python3; }
[ -n "$LOGS" ] || LOGS="$(mktemp -d -t kernel-lsp-gpu-tests.XXXXXX)"
mkdir -p "$LOGS"

per_test=()
"$PY" -c "import pytest_timeout" 2>/dev/null && \
  per_test=(--timeout "$(( LIMIT - 20 ))" -o faulthandler_timeout="$(( LIMIT - 40 ))")  # a stuck test says where

declare -A FILES=(
  [adversarial]="tests/evaluator/test_adversarial.py"
  [fixtures]="tests/evaluator/test_fixtures.py"
  [rest]="tests/evaluator/test_gpu.py tests/evaluator/test_devmon.py tests/evaluator/test_bad_corpus.py tests/server/test_gpu_e2e.py"
  [shared]="tests/evaluator/test_gpu_shared.py"
)
GROUPS_ORDER=(adversarial fixtures rest)
AFTER=(shared)
AFTER_LIMIT="${AFTER_LIMIT:-200}"

group() {  # NAME LIMIT [pytest args...]: one group's pytest, its exit status and its end written beside its log
  local g=$1 lim=$2
  shift 2
  rm -f "$LOGS/$g.rc" "$LOGS/$g.end"
  # shellcheck disable=SC2086
  timeout -k 15 "$lim" "$PY" -m pytest -v -m gpu -p no:cacheprovider -rfs --durations=8 \
      "${per_test[@]}" "$@" ${FILES[$g]} >"$LOGS/$g.log" 2>&1 </dev/null
  echo $? >"$LOGS/$g.rc"; echo $(( $(date +%s) - T0 )) >"$LOGS/$g.end"
}

T0=$(date +%s)
for g in "${GROUPS_ORDER[@]}"; do
  group "$g" "$LIMIT" "$@" &
done
wait
for g in "${AFTER[@]}"; do
  group "$g" "$AFTER_LIMIT" "$@"
done

rc=0
for g in "${GROUPS_ORDER[@]}" "${AFTER[@]}"; do
  grc=$(cat "$LOGS/$g.rc" 2>/dev/null || echo 1)
  case "$grc" in
    0) what="passed" ;;
    5) what="collected no tests"; grc=1 ;;
    124|137) what="killed at its limit" ;;
    *) what="failed (exit $grc)" ;;
  esac
  summary=$(grep -E "^=+ .* in [0-9.]+s" "$LOGS/$g.log" | tail -n 1 | tr -d '=')
  echo "$g: $what in $(cat "$LOGS/$g.end" 2>/dev/null || echo '?') s:${summary:- no summary}"
  grep -E "^(FAILED|ERROR) " "$LOGS/$g.log" | head -n 20 | sed 's/^/  /'
  [ "$grc" = 0 ] || [ "$rc" != 0 ] || rc=$grc
done
echo "GPU suite: $(( $(date +%s) - T0 )) s, logs in $LOGS"
exit "$rc"
