#!/bin/sh
# The experiment behind claim 5 of the phantom-world report (SIMULATION: phantoms, not patients):
# the anchor-budget curves (Fig. 4) of cosine, softmax, Gaussian and MovMF again at two other
# inverse temperatures, 2 (inv_t x cosine spread ~0.2, the regime where softmax is close to its
# Gaussian expansion) and the paper's 100 (~11); the report itself uses the encoder's own (27.7 for
# phantom-v3, 21.0 for v2). Same world, encoder, anchor draws and bootstrap seed as the report.
# Usage, from the checkout:  eval/make_phantom_budget_supplement.sh [REPORT]   (PYTHON=... to pick)
set -eu
REPORT="${1:-eval/reports/phantom-2026-12-04}"
for INV_T in 2 100; do
  "${PYTHON:-.venv/bin/python}" -m chexretrieve eval retrieval \
      --out "$REPORT/supplement-budget-inv-t-$INV_T" \
      --phantom-n 3000 --phantom-seed 0 \
      --bootstrap 1000 --seed 0 \
      --geometries cosine,softmax,gaussian,movmf \
      --curve-geometries cosine,softmax,gaussian,movmf \
      --experiments budget \
      --inv-temperature "$INV_T" \
      --quiet
done
