#!/bin/sh
# The experiment behind claim 5 of the phantom-world report (SIMULATION: phantoms, not patients):
# the anchor-budget curves (Fig. 4) of cosine, softmax, Gaussian and MovMF again at two other
# inverse temperatures, 2 (inv_t x cosine spread ~0.2, the regime where softmax is close to its
# Gaussian expansion) and the paper's 100 (~11); the report itself uses each encoder's own. Same
# world, encoders, anchor draws and bootstrap seed as the report (eval/make_phantom_report.sh).
# Usage, from the checkout:  eval/make_phantom_budget_supplement.sh REPORT   (PYTHON=... to pick)
set -eu
REPORT="${1:?give the report folder the supplement goes into}"
. "$(dirname "$0")/step.sh"
require_v4_runs  # stops, saying how to get them, if a v4 run is missing
for INV_T in 2 100; do
  "${PYTHON:-.venv/bin/python}" -m chexretrieve eval retrieval \
      --out "$REPORT/supplement-budget-inv-t-$INV_T" \
      --encoder phantom:phantom-v4 --encoder phantom:phantom-v4-s3 --encoder phantom:phantom-v4-s4 \
      --phantom-n 3000 --phantom-seed 0 \
      --bootstrap 1000 --seed 0 \
      --geometries cosine,softmax,gaussian,movmf \
      --curve-geometries cosine,softmax,gaussian,movmf \
      --experiments budget \
      --inv-temperature "$INV_T" \
      --quiet
done
