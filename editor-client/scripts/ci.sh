#!/usr/bin/env bash
# Builds, checks, tests and packages the VS Code extension from a clean checkout.
# Called by the repository's .ci/run; run it from anywhere.
#   KERNEL_LSP_PYTHON=/path/to/python  the interpreter (with kernel_lsp installed) the harness runs the server with;
#                                      default: <repo>/.venv/bin/python.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

npm ci
npm run lint
npm run typecheck
npm run build
npm test
npm run package
ls -l ./*.vsix
