#!/usr/bin/env bash
# Bench the hand-written fixture kernels (tests/fixtures/kernels/level{1,2}/<task name>.py) through
# `kernel-lsp bench --candidates` on this machine's GPU: live eager / torch.compile baselines, fast_p tables,
# the speedup figure.
#
#   benchmarks/gpu_bench_fixtures.sh KERNELBENCH_DIR [OUT_DIR] [extra bench flags...]
#
# KERNELBENCH_DIR holds level1.jsonl and level2.jsonl (on the GPU machine: a copy in the ignored folder .kb/;
# copy baseline_timing/ next to them as well to get the H100 comparison columns). OUT_DIR defaults to $OUT.
# Each level is swept over the problem ids that have a fixture (fast_p counts every selected task, so selecting
# the whole level would count the ~80 tasks without a fixture as failures). Results go to OUT_DIR/level{1,2}/
# (bench.md, summary.csv, tasks.csv, bench.json, speedups.png, and the History in .kernel-lsp/, so a rerun
# into the same OUT_DIR resumes); OUT_DIR/bench.md joins both tables. Progress goes to OUT_DIR/level{N}.log.
set -uo pipefail
cd "$(dirname "$0")/.."

KB="${1:?usage: $0 KERNELBENCH_DIR [OUT_DIR] [extra bench flags...]}"
shift
DEST="${1:-${OUT:-}}"
[ $# -gt 0 ] && shift
[ -n "$DEST" ] || { echo "$0: no OUT_DIR given and \$OUT is not set" >&2; exit 2; }
[ -f "$KB/level1.jsonl" ] || { echo "$0: $KB/level1.jsonl not found" >&2; exit 2; }
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
FIX=tests/fixtures/kernels
mkdir -p "$DEST"
"$PY" - <<'EOF' >&2 || true
import torch
print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
EOF

status=0
: > "$DEST/bench.md"
for level in 1 2; do
  ids=$(find "$FIX/level$level" -maxdepth 1 -name '[0-9]*_*.py' -printf '%f\n' | sed -E 's/^([0-9]+)_.*/\1/' \
        | sort -n | paste -sd, -)
  if [ -z "$ids" ]; then
    echo "$0: no fixtures in $FIX/level$level" >&2
    continue
  fi
  echo "level $level: tasks $ids" >&2
  "$PY" -m kernel_lsp bench --kernelbench "$KB" --level "$level" --tasks "$ids" --candidates "$FIX" \
      --out "$DEST/level$level" --device cuda "$@" \
      > "$DEST/level$level.md" 2> >(tee "$DEST/level$level.log" >&2)
  rc=$?
  [ "$rc" = 0 ] || { echo "$0: level $level: bench exited with $rc" >&2; status=$rc; }
  { echo "<!-- level $level -->"; cat "$DEST/level$level.md"; echo; } >> "$DEST/bench.md"
done
cat "$DEST/bench.md"
exit "$status"
