#!/bin/sh
# Reproduces the published phantom-world evaluation report (SIMULATION: phantoms, not patients).
# Needs the committed phantom encoder weights (chexretrieve/encoders/weights/phantom-v3.pt, trained on
# world seed 1 from report text alone) and the anchor sets under anchors/. The evaluation world is
# seed 0, which the encoder never saw (the command refuses an encoder trained on it).
# Usage, from the checkout:  eval/make_phantom_report.sh [OUT]   (PYTHON=... to pick the interpreter)
#
# The posterior latent models use their default k (the 95%-variance rule on the posterior); the
# paper's k = 128 equals the phantom embedding's d = 128, where they rank exactly as cosine (and are
# refused). Fig. 5 also shows the posterior latent spherical model with k = 32 (the paper's ratio
# k = d/4), and the report tabulates the rule's k and its overlap with the target PCA.
# Protocol defaults in force: frontal views (every phantom is AP or PA), min_queries 10, intervals
# resampling patients (a phantom patient has 1-4 studies).
# Table 4 (runtime) is left out: it times random embeddings, does not depend on the phantom world or
# the encoder, and is measured by benchmarks/eval_runtime.py (figures in the README).
set -eu
OUT="${1:-eval/reports/phantom-$(date +%F)}"
exec "${PYTHON:-.venv/bin/python}" -m chexretrieve eval retrieval \
    --out "$OUT" \
    --phantom-n 3000 --phantom-seed 0 \
    --bootstrap 1000 --seed 0 \
    --geometries "cosine,iti,softmax,gaussian,latent_gaussian,latent_spherical,gmm,movmf,posterior_gaussian,posterior_latent_gaussian,posterior_latent_spherical,posterior_gmm" \
    --experiments mixing,budget,posterior,temperature \
    --mixing-findings "pleural effusion,cardiomegaly,support devices" \
    --posterior-geometries "posterior_gaussian,posterior_latent_spherical,posterior_latent_spherical:k=32,posterior_gmm" \
    --quiet
