#!/usr/bin/env bash
# The packaged .vsix in a real editor: installs code-server 4.100.3 and playwright-core (pinned in
# e2e/package-lock.json) into e2e/node_modules, Debian's Chromium when it is missing, then runs
# e2e/editor.e2e.test.mjs with node's test runner. Called by scripts/test.sh after scripts/ci.sh (which builds the
# .vsix; built here when it is missing).
#
#   KERNEL_LSP_PYTHON=/path/to/python   the interpreter the extension runs the server with (kernel_lsp installed);
#                                       default: <repo>/.venv/bin/python
#   E2E_ARTIFACTS=DIR                   screenshots and logs (default: editor-client/e2e/artifacts)
#   E2E_REQUIRED=1                      fail instead of skipping when Node 20, Chromium or code-server cannot be
#                                       installed
#   --install-only                      install Chromium and code-server, then stop (to install ahead of a run)
#
# Skips (exit 0, with the reason on one line) where Node 20 or Chromium cannot be had, or the npm registry cannot be
# reached. A failing test fails.
set -uo pipefail
INSTALL_ONLY=0
[ "${1:-}" = --install-only ] && INSTALL_ONLY=1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CLIENT="$PWD"
E2E="$CLIENT/e2e"
REPO="$(cd .. && pwd)"
start=$(date +%s)
say() { printf 'e2e: %s\n' "$*" >&2; }
skip() {
  if [ "${E2E_REQUIRED:-0}" = 1 ]; then
    say "FAILED (E2E_REQUIRED=1): $*"
    exit 1
  fi
  echo "editor e2e test SKIPPED: $*"
  exit 0
}
elapsed() { echo "$(( $(date +%s) - start )) s"; }

# --- Node 20 (code-server 4.100.3 is the last release whose engines.node accepts 20) ---------------------------
command -v node >/dev/null 2>&1 || skip "no node on PATH (code-server 4.100.3 needs Node 20)"
command -v npm >/dev/null 2>&1 || skip "no npm on PATH"
NODE_MAJOR="$(node -p 'process.versions.node.split(".")[0]')"
[ "$NODE_MAJOR" = 20 ] || skip "node $(node --version): code-server 4.100.3 needs Node 20"
for tool in make g++ python3; do
  command -v "$tool" >/dev/null 2>&1 || skip "no $tool: code-server's native modules are built from source"
done
[ -f /usr/include/node/node.h ] || skip "no Node headers in /usr/include/node (code-server's native modules need them)"

# --- Chromium (Debian's) ---------------------------------------------------------------------------------------
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's chromium"
    t0=$(date +%s)
    if ! apt-cache policy chromium 2>/dev/null | grep -q 'Candidate: [0-9]'; then
      apt-get update -q >/dev/null 2>&1 || skip "apt-get update failed: Chromium cannot be installed"
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 \
      || skip "apt-get install chromium failed"
    say "chromium installed in $(( $(date +%s) - t0 )) s"
  else
    skip "no $CHROMIUM, and apt-get is not available to root here to install it"
  fi
fi
[ -x "$CHROMIUM" ] || skip "no $CHROMIUM after installing"

# --- code-server + playwright-core: npm ci without install scripts, then code-server's post-install by hand ------
# (its postinstall.sh refuses root without --unsafe-perm and wants to download ripgrep; the parts it needs are
# done here: VS Code's own dependencies, their native modules built against the system's Node headers, argon2,
# and the links postinstall.sh makes).
GYP="$(dirname "$(readlink -f "$(command -v npm)")")/../node_modules/node-gyp/bin/node-gyp.js"
[ -f "$GYP" ] || GYP="$(npm root -g)/npm/node_modules/node-gyp/bin/node-gyp.js"
[ -f "$GYP" ] || skip "node-gyp (bundled with npm) not found"
STAMP="$E2E/node_modules/.kernel-lsp-e2e-ready"
LOCK_HASH="$(sha256sum "$E2E/package-lock.json" | cut -c1-16)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$LOCK_HASH" ]; then
  say "installing code-server 4.100.3 and playwright-core (e2e/package-lock.json)"
  t0=$(date +%s)
  rm -rf "$E2E/node_modules"
  (cd "$E2E" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) \
    || skip "npm ci of code-server failed (is the npm registry reachable?)"
  VSC="$E2E/node_modules/code-server/lib/vscode"
  (cd "$VSC" && npm install --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error) \
    || skip "npm install of code-server's lib/vscode failed"
  build() {  # build a native module in place against /usr/include/node
    (cd "$1" && shift && node "$GYP" rebuild --nodedir=/usr -j "$(nproc)" "$@" >"$E2E/node-gyp.log" 2>&1) || {
      tail -20 "$E2E/node-gyp.log" >&2
      say "building $(basename "$1") failed"
      exit 1
    }
  }
  for m in @vscode/spdlog native-watchdog node-pty @vscode/deviceid; do
    build "$VSC/node_modules/$m"
  done
  ARGON="$E2E/node_modules/argon2"
  build "$ARGON" --module_name=argon2 --module_path=../lib/binding/napi-v3 --napi_build_version=3
  ln -sfn node_modules "$VSC/node_modules.asar"
  ln -sfn code-linux.sh "$VSC/bin/remote-cli/code-server"
  ln -sfn browser-linux.sh "$VSC/bin/helpers/browser.sh"
  (cd "$E2E" && node -e "require('argon2'); require('./node_modules/code-server/lib/vscode/node_modules/node-pty')") \
    || { say "code-server's native modules do not load"; exit 1; }
  echo "$LOCK_HASH" >"$STAMP"
  say "code-server installed in $(( $(date +%s) - t0 )) s"
else
  say "code-server already installed (e2e/node_modules matches e2e/package-lock.json)"
fi

[ "$INSTALL_ONLY" = 1 ] && { say "installed in $(elapsed)"; exit 0; }

# --- the .vsix, the interpreter, then the test --------------------------------------------------------------------
VSIX="$(ls -t "$CLIENT"/kernel-lsp-*.vsix 2>/dev/null | head -1)"
if [ -z "$VSIX" ]; then
  say "no .vsix: packaging it"
  (cd "$CLIENT" && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm run package >/dev/null) || exit 1
  VSIX="$(ls -t "$CLIENT"/kernel-lsp-*.vsix | head -1)"
fi
PY="${KERNEL_LSP_PYTHON:-$REPO/.venv/bin/python}"
"$PY" -c "import kernel_lsp, torch, pytest_lsp" 2>/dev/null \
  || { say "$PY cannot import kernel_lsp, torch and pytest_lsp (run scripts/setup.sh --test)"; exit 1; }
say "ready in $(elapsed); running the editor test"
export E2E_VSIX="$VSIX" E2E_PYTHON="$PY" E2E_CHROMIUM="$CHROMIUM" E2E_REPO="$REPO"
export E2E_ARTIFACTS="${E2E_ARTIFACTS:-$E2E/artifacts}"
cd "$E2E" && node --test --test-reporter=spec --test-timeout=900000 editor.e2e.test.mjs
rc=$?
say "done in $(elapsed) (install + test), rc=$rc; screenshots in $E2E_ARTIFACTS"
exit $rc
