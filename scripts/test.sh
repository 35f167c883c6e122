#!/usr/bin/env bash
# Run every test: the Python suite (pytest), the editor client's (npm) and the .vsix in a real editor, as CI does.
#   scripts/test.sh [pytest args...]
# GPU tests are marked `gpu` and skip without CUDA. KernelBench-backed tests read ../shared/kernelbench
# (or $KERNELBENCH_DIR) and skip where it is absent.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
case "$VENV" in /*) VENV_PY="$VENV/bin/python" ;; *) VENV_PY="$PWD/$VENV/bin/python" ;; esac

"$VENV/bin/python" -m ruff check . || exit 1
"$VENV/bin/python" -m pytest "$@"
rc=$?
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests: that is a failure" >&2
  exit 1
fi
[ "$rc" = 0 ] || exit "$rc"

if [ -f editor-client/package.json ] && [ "${SKIP_EDITOR_CLIENT:-0}" != 1 ]; then
  if [ -x editor-client/scripts/ci.sh ]; then
    KERNEL_LSP_PYTHON="$VENV_PY" editor-client/scripts/ci.sh || exit $?
  fi
  # The packaged .vsix in a real editor (code-server + headless Chromium); skips, saying why, where Node 20 or
  # Chromium cannot be installed. SKIP_EDITOR_E2E=1 leaves it out.
  if [ -x editor-client/scripts/e2e.sh ] && [ "${SKIP_EDITOR_E2E:-0}" != 1 ]; then
    KERNEL_LSP_PYTHON="$VENV_PY" editor-client/scripts/e2e.sh || exit $?
  fi
fi
