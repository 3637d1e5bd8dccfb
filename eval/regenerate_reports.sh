#!/bin/sh
# Regenerates every committed report from this checkout (SIMULATION: phantoms, not patients), then
# compares the new tables with the committed ones; with --replace it puts the new reports in place.
#
#   eval/regenerate_reports.sh [--replace] [SCRATCH]
#
#   SCRATCH    a new folder for the regenerated reports (default: a fresh folder under /tmp); the
#              reports are written there first, since a report folder is never overwritten
#   --replace  then replace the committed reports with the regenerated ones (each report folder's
#              hand-written README.md is kept); review with `git diff --stat` and commit
#   PYTHON=... picks the interpreter (default .venv/bin/python)
#
# The committed reports, in the order they are made (each step's log and wall time go to
# SCRATCH/logs/):
#   1. eval/phantom_zero_shot.md (+ .manifest.json)  the gates of the bundled phantom-v4 encoders
#                                                   on evaluation world 0 (also caches that world's
#                                                   embeddings for step 2)
#   2. eval/reports/phantom-v4/                     the retrieval report (eval/make_phantom_report.sh)
#                                                   and its budget supplement
#                                                   (eval/make_phantom_budget_supplement.sh)
#   3. eval/reports/density-phantom/                the density report (density_report below)
# No natural-image report is committed (its models cannot be bundled), so none is regenerated.
#
# The retrieval report and the density report average over the three independently trained
# phantom-v4 encoders bundled in chexretrieve/encoders/weights/ (phantom-v4, -v4-s3, -v4-s4; training
# worlds 1, 3 and 4). Should one be missing (a partial checkout), step 1 measures the bundled runs,
# step 2 is skipped with a line saying what it waits for, and the density step stops.
#
# Afterwards eval/compare_reports.py lists every table that differs from the committed one by more
# than its tolerance (1e-6), and `pytest tests/evaluation/test_committed_reports.py` checks that the
# committed manifests match the checkout (code, RENDER_VERSION, generator, encoder weights, anchor
# sets, prior, options).
set -eu
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"
REPLACE=0
if [ "${1:-}" = "--replace" ]; then REPLACE=1; shift; fi
SCRATCH="${1:-$(mktemp -d /tmp/chexretrieve-reports.XXXXXX)}"
if [ -e "$SCRATCH" ] && [ -n "$(ls -A "$SCRATCH")" ]; then
  echo "$SCRATCH exists and is not empty: give a new folder" >&2
  exit 2
fi
mkdir -p "$SCRATCH/logs" "$SCRATCH/eval/reports"
SCRATCH="$(cd "$SCRATCH" && pwd)"
LOGS="$SCRATCH/logs"
# every command runs in SCRATCH with the checkout's relative paths (eval/reports/...), so the
# commands the reports record are the ones a reader runs from the checkout
cd "$SCRATCH"
. "$REPO/eval/step.sh"  # step NAME COMMAND...; the phantom-v4 runs bundled and missing
GATES_ENCODERS="$(bundled_v4_flags --weights)"
MISSING_V4="$(missing_v4_runs)"
REPORTS="eval/reports/density-phantom"

density_report() {  # the density report's command: the one place to adjust its options
  # the three v4 runs on worlds 2, 5, 6 (the command's default; none an encoder was trained on)
  "$PY" -m chexretrieve eval density --out "$1" --quiet --encoder phantom:phantom-v4 \
    --encoder phantom:phantom-v4-s3 --encoder phantom:phantom-v4-s4
}

# shellcheck disable=SC2086  # the encoder options are meant to split into words
step gates "$PY" -m chexretrieve phantom gates $GATES_ENCODERS --seed 0 --n 3000 \
  --out eval/phantom_zero_shot.md
if [ -z "$MISSING_V4" ]; then
  step retrieval env PYTHON="$PY" "$REPO/eval/make_phantom_report.sh" eval/reports/phantom-v4
  step supplement env PYTHON="$PY" "$REPO/eval/make_phantom_budget_supplement.sh" \
    eval/reports/phantom-v4
  REPORTS="eval/reports/phantom-v4 $REPORTS"
else
  echo "== retrieval: SKIPPED. eval/reports/phantom-v4 waits for the three phantom-v4 runs"
  echo "   (eval/README.md gives the training commands). Missing:"
  echo "$MISSING_V4" | sed 's/^/   /'
fi
step density density_report eval/reports/density-phantom

echo "== comparing with the committed reports"
"$PY" "$REPO/eval/compare_reports.py" "$REPO" "$SCRATCH" || true

if [ "$REPLACE" = 1 ]; then
  for report in $REPORTS; do
    if [ -f "$REPO/$report/README.md" ]; then cp "$REPO/$report/README.md" "$report/"; fi
    rm -rf "${REPO:?}/$report"
    mv "$report" "$REPO/$report"
  done
  cp eval/phantom_zero_shot.md eval/phantom_zero_shot.manifest.json "$REPO/eval/"
  echo "replaced the committed reports; review with: git -C $REPO status eval/"
fi
echo "logs and regenerated reports: $SCRATCH"
