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

# The editor test's install (Chromium, code-server and its native modules: minutes of downloads and builds) runs
# in the background at the lowest priority while pytest runs, in the cores pytest leaves idle; the editor test
# after pytest finds it done. Whatever it could not do there, the editor test's own run does (or skips, saying why).
prep_pid=""
if [ -f editor-client/package.json ] && [ "${SKIP_EDITOR_CLIENT:-0}" != 1 ] && [ "${SKIP_EDITOR_E2E:-0}" != 1 ] \
   && [ -x editor-client/scripts/e2e.sh ]; then
  prep_log="$(mktemp -t kernel-lsp-e2e-install.XXXXXX)"
  setsid nice -n 19 editor-client/scripts/e2e.sh --install-only >"$prep_log" 2>&1 </dev/null &
  prep_pid=$!
fi
"$VENV/bin/python" -m pytest "$@"
rc=$?
if [ -n "$prep_pid" ]; then
  if [ "$rc" = 0 ]; then
    wait "$prep_pid"
    sed 's/^/(installed while pytest ran) /' "$prep_log"
  else
    kill -TERM -- -"$prep_pid" 2>/dev/null || kill "$prep_pid" 2>/dev/null
  fi
  rm -f "$prep_log"
fi
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
