#!/bin/sh
# Re-measures every published figure that depends on the bundled phantom encoder's weights, in the
# order they depend on each other (SIMULATION: phantoms, not patients). Run it after the default
# weights change (`chexretrieve phantom train` + chexretrieve/encoders/weights/), then copy the
# printed figures into docs/performance.md ("Phantom encoder", "Storage precision", "The demo and relevance
# feedback") and read the new report claim by claim; this script measures, it writes no prose.
#
#   1. the gates page          eval/phantom_zero_shot.md   (also caches the world's embeddings)
#   2. the report              eval/reports/phantom-DATE/  (eval/make_phantom_report.sh; the
#                              committed one is eval/reports/phantom-v4, made by
#                              eval/regenerate_reports.sh, which also checks it against the checkout)
#   3. its budget supplement   eval/make_phantom_budget_supplement.sh
#   4. float16 vs float32      benchmarks/storage_precision.py
#   5. a fresh demo store      chexretrieve demo --no-serve, in a scratch folder
#   6. relevance feedback      benchmarks/relevance_feedback.py on that store
#   7. the screenshots         tests/ui/make_screenshots.py (needs /usr/bin/chromium)
#
# Usage, from the checkout:  eval/remeasure_phantom_figures.sh [REPORT] [LOGS]
#   REPORT  report folder to write (default eval/reports/phantom-<today>; it must not exist yet)
#   LOGS    folder for each step's output and timing (default: a new folder under /tmp)
# PYTHON=... picks the interpreter (default .venv/bin/python).
set -eu
PY="${PYTHON:-.venv/bin/python}"
REPORT="${1:-eval/reports/phantom-$(date +%F)}"
LOGS="${2:-$(mktemp -d /tmp/phantom-figures.XXXXXX)}"
if [ -e "$REPORT" ]; then
  echo "$REPORT exists already: give a new report folder, or move the old one away" >&2
  exit 2
fi
mkdir -p "$LOGS"
DEMO="$LOGS/demo"

. "$(dirname "$0")/step.sh"  # step NAME COMMAND...

# shellcheck disable=SC2046  # the encoder options are meant to split into words
step gates "$PY" -m chexretrieve phantom gates $(bundled_v4_flags --weights) --seed 0 --n 3000 \
  --out eval/phantom_zero_shot.md
step report env PYTHON="$PY" eval/make_phantom_report.sh "$REPORT"
step supplement env PYTHON="$PY" eval/make_phantom_budget_supplement.sh "$REPORT"
step storage_precision "$PY" benchmarks/storage_precision.py
step demo "$PY" -m chexretrieve demo --no-serve --data-dir "$DEMO"
step relevance_feedback "$PY" benchmarks/relevance_feedback.py \
  --db "sqlite:///$DEMO/chexretrieve.sqlite" --queries 15
step screenshots "$PY" tests/ui/make_screenshots.py

echo "== figures to carry into docs/performance.md"
grep -E "^\| (\`phantom:|\*\*mean)" eval/phantom_zero_shot.md
grep -E "^[a-z_]+ +[0-9.]+ +[0-9.]+ " "$LOGS/storage_precision.log" || true
grep -E "ready in|files/s" "$LOGS/demo.log" || true
grep -E "^mean gain" "$LOGS/relevance_feedback.log" || true
echo "logs: $LOGS; report: $REPORT; screenshots: ui/screenshots/ (see git status)"
