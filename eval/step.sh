# Sourced by the eval/*.sh scripts (not run alone).
# step NAME COMMAND...: run COMMAND, keep its output and wall time in $LOGS/NAME.log, print the
# wall time with the load average beside it (timings on a shared machine), stop on failure.
step() {
  name="$1"; shift
  echo "== $name: $*"
  start=$(date +%s)
  "$@" > "$LOGS/$name.log" 2>&1 || { echo "$name failed; see $LOGS/$name.log" >&2; exit 1; }
  echo "   $(( $(date +%s) - start )) s wall, load average $(cut -d' ' -f1-3 /proc/loadavg)" \
    | tee -a "$LOGS/$name.log"
}

# The three independently trained phantom-v4 encoders issue 32's reports average over: the bundled
# default (training seed 1) and two further runs (seeds 3 and 4), all bundled. missing_v4_runs
# prints the weights files missing (nothing in a complete checkout).
V4_RUNS="phantom-v4 phantom-v4-s3 phantom-v4-s4"
V4_WEIGHTS_DIR="${REPO:-$(cd "$(dirname "$0")/.." && pwd)}/chexretrieve/encoders/weights"
missing_v4_runs() {
  for run in $V4_RUNS; do
    [ -f "$V4_WEIGHTS_DIR/$run.pt" ] || echo "$V4_WEIGHTS_DIR/$run.pt"
  done
}
# bundled_v4_flags FLAG: "FLAG phantom-v4 FLAG ..." for the v4 runs that are bundled
bundled_v4_flags() {
  for run in $V4_RUNS; do
    if [ -f "$V4_WEIGHTS_DIR/$run.pt" ]; then
      printf ' %s %s' "$1" "$run"
    fi
  done
}
# require_v4_runs: stop, saying what to train, while a v4 run is missing
require_v4_runs() {
  missing="$(missing_v4_runs)"
  if [ -n "$missing" ]; then
    echo "this report averages over three phantom-v4 encoders; missing:" >&2
    echo "$missing" | sed 's/^/  /' >&2
    echo "restore them from the checkout, or retrain them (30-61 CPU-minutes each) as eval/README.md" >&2
    echo "says:" >&2
    echo "  nice -n 10 chexretrieve phantom train --seed 3 --out chexretrieve/encoders/weights/phantom-v4-s3.pt" >&2
    echo "  nice -n 10 chexretrieve phantom train --seed 4 --out chexretrieve/encoders/weights/phantom-v4-s4.pt" >&2
    exit 3
  fi
}
