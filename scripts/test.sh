#!/usr/bin/env bash
# Run every test: the Python suite (pytest) and the editor client's (npm), as CI does.
#   scripts/test.sh [pytest args...]
# GPU tests are marked `gpu` and skip without CUDA. KernelBench-backed tests read ../shared/kernelbench
# (or $KERNELBENCH_DIR) and skip where it is absent.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"

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
    KERNEL_LSP_PYTHON="$PWD/$VENV/bin/python" editor-client/scripts/ci.sh || exit $?
  fi
fi
