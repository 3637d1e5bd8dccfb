#!/bin/sh
# Reproduces the published phantom-world evaluation report (SIMULATION: phantoms, not patients).
# Needs the committed phantom encoder weights (chexretrieve/encoders/weights/phantom-v3.pt, trained on
# world seed 1 from report text alone) and the anchor sets under anchors/. The evaluation world is
# seed 0, which the encoder never saw (the command refuses an encoder trained on it).
# Usage, from the checkout:  eval/make_phantom_report.sh [OUT]   (PYTHON=... to pick the interpreter)
#
# Deviation from the defaults: the posterior latent models use k = 32. The phantom embedding has
# d = 128, and the paper's k = 128 (a quarter of CheXzero's d = 512) would span the whole space,
# which makes those geometries rank exactly like cosine; k = 32 keeps the paper's ratio k = d/4.
# Fig. 5 also shows the posterior latent spherical model with k chosen by the 95%-variance rule on
# the posterior (k=variance), and the report tabulates that k and its overlap with the target PCA.
# Table 4 (runtime) is left out: it times random embeddings, does not depend on the phantom world or
# the encoder, and is measured by benchmarks/eval_runtime.py (figures in the README).
set -eu
OUT="${1:-eval/reports/phantom-$(date +%F)}"
exec "${PYTHON:-.venv/bin/python}" -m chexretrieve eval retrieval \
    --out "$OUT" \
    --phantom-n 3000 --phantom-seed 0 \
    --bootstrap 1000 --seed 0 \
    --geometries "cosine,iti,softmax,gaussian,latent_gaussian,latent_spherical,gmm,movmf,posterior_gaussian,posterior_latent_gaussian:k=32,posterior_latent_spherical:k=32,posterior_gmm" \
    --experiments mixing,budget,posterior,temperature \
    --mixing-findings "pleural effusion,cardiomegaly,support devices" \
    --posterior-geometries "posterior_gaussian,posterior_latent_spherical:k=32,posterior_latent_spherical:k=variance,posterior_gmm" \
    --quiet
