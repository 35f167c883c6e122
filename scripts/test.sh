#!/usr/bin/env bash
# Run every test: the Python suite (pytest), the editor client's (npm) and the .vsix in a real editor, as CI does.
#   scripts/test.sh [pytest args...]
# GPU tests are marked `gpu` and skip without CUDA. KernelBench-backed tests read ../shared/kernelbench
# (or $KERNELBENCH_DIR) and skip where it is absent. SKIP_EDITOR_CLIENT=1 leaves the editor client out,
# SKIP_EDITOR_E2E=1 the editor test.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
case "$VENV" in /*) VENV_PY="$VENV/bin/python" ;; *) VENV_PY="$PWD/$VENV/bin/python" ;; esac

"$VENV/bin/python" -m ruff check . || exit 1

client=0
e2e=0
if [ -f editor-client/package.json ] && [ "${SKIP_EDITOR_CLIENT:-0}" != 1 ]; then
  [ -x editor-client/scripts/ci.sh ] && client=1
  # The packaged .vsix in a real editor (code-server + headless Chromium); skips, saying why, where Node 20 or
  # Chromium cannot be installed.
  [ -x editor-client/scripts/e2e.sh ] && [ "${SKIP_EDITOR_E2E:-0}" != 1 ] && e2e=1
fi

# The editor client's build and tests, then the editor test (with its install: Chromium, code-server and its
# native modules), run in the background at the lowest priority while pytest runs: pytest keeps most of the cores
# idle (it mostly waits on its workers), and this work takes minutes. Their output and their result come after
# pytest's.
bg_pid=""
bg_log=""
bg_rc=""
if [ "$client" = 1 ] || [ "$e2e" = 1 ]; then
  bg_log="$(mktemp -t kernel-lsp-editor.XXXXXX)"
  bg_rc="$bg_log.rc"
  # shellcheck disable=SC2016
  setsid nice -n 19 bash -c '
    if [ "$1" = 1 ]; then KERNEL_LSP_PYTHON="$3" editor-client/scripts/ci.sh || { echo $? >"$4"; exit 0; }; fi
    if [ "$2" = 1 ]; then KERNEL_LSP_PYTHON="$3" editor-client/scripts/e2e.sh || { echo $? >"$4"; exit 0; }; fi
    echo 0 >"$4"' _ "$client" "$e2e" "$VENV_PY" "$bg_rc" >"$bg_log" 2>&1 </dev/null &
  bg_pid=$!
fi

"$VENV/bin/python" -m pytest "$@"
rc=$?

if [ -n "$bg_pid" ]; then
  if [ "$rc" = 0 ]; then
    wait "$bg_pid"
    echo "--- the editor client (run beside pytest) ---"
    cat "$bg_log"
    brc="$(cat "$bg_rc" 2>/dev/null || echo 1)"
  else
    kill -TERM -- -"$bg_pid" 2>/dev/null || kill "$bg_pid" 2>/dev/null
    brc=0
  fi
  rm -f "$bg_log" "$bg_rc"
fi
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests: that is a failure" >&2
  exit 1
fi
[ "$rc" = 0 ] || exit "$rc"
if [ -n "$bg_pid" ] && [ "$brc" != 0 ]; then
  echo "test.sh: the editor client's build or tests, or the editor test, failed (exit $brc)" >&2
  exit "$brc"
fi
