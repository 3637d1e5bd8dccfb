#!/usr/bin/env bash
# The GPU check of issue 35 in one call of the device tool (see /work/.library/device/README.md).
#
#   bash benchmarks/gpu_check.sh prepare   # here, once: wheels the CUDA image lacks, and RG1, into .whl/
#   bash benchmarks/gpu_check.sh run       # there, the device tool's one command (below)
#   bash benchmarks/gpu_check.sh dry-run   # here, on the CPU: the same script at small sizes
#
# The device call (a machine starts bare; 15 minutes of device time in all, so one call):
#   run(command="bash benchmarks/gpu_check.sh run", carry=[".whl"], timeout_s=540)
# It installs the carried wheels into /tmp/site, generates the phantom demo archive and RG1 copies
# there, ingests them with the CheXzero-architecture ViT-B/32 (random weights) on CUDA in float32,
# float16 and bfloat16, compares every embedding of a subset with the CPU's float32 one, measures
# the encoder alone, the GPU's utilisation during each ingest, and JPEG decoding per worker on the
# CPU and with nvJPEG; figures go to $OUT/gpu_check.json and the log to $OUT/gpu_check.log.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-dry-run}"
# the CUDA image has torch, torchvision, numpy, pandas, Pillow, scipy, typer, rich; not these
WHEELS=(pydicom==3.0.2 pylibjpeg==2.1.0 pylibjpeg-rle==2.2.0 pylibjpeg-openjpeg==2.6.0
        python-gdcm==3.2.6 ftfy==6.3.1 wcwidth==0.9.4 sqlalchemy==2.1.9 greenlet==3.5.6
        alembic==1.20.1 mako==1.4.3)

case "$MODE" in
prepare)
    exclude="$(git rev-parse --git-path info/exclude)"
    grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
    mkdir -p .whl
    PY="${PYTHON:-.venv/bin/python}"
    for wheel in "${WHEELS[@]}"; do
        "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
            --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
            --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            --platform manylinux1_x86_64 --platform any -d .whl "$wheel"
    done
    "$PY" -c "from chexretrieve.dicom import pydicom_test_file as f; import shutil; \
shutil.copy(f('RG1_UNCI.dcm'), '.whl/RG1_UNCI.dcm')"
    du -sh .whl
    ls .whl
    ;;
run)
    OUT="${OUT:-/tmp/gpu-check-out}"
    mkdir -p "$OUT"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 CHEXRETRIEVE_RG1="$PWD/.whl/RG1_UNCI.dcm"
    export CHEXRETRIEVE_CACHE=/tmp/chexretrieve-cache XDG_CONFIG_HOME=/tmp/chexretrieve-config
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu_check.log"
    python3 benchmarks/gpu_check.py --out "$OUT" 2>&1 | tee -a "$OUT/gpu_check.log"
    ;;
dry-run)
    OUT="${OUT:-$PWD/.cache/gpu-check-dry-run}"
    PY="${PYTHON:-.venv/bin/python}"
    "$PY" benchmarks/gpu_check.py --dry-run --out "$OUT" --phantom "${PHANTOM:-24}" \
        --rg1 "${RG1:-4}" --reference "${REFERENCE:-16}"
    ;;
*)
    echo "usage: bash benchmarks/gpu_check.sh prepare|run|dry-run" >&2
    exit 2
    ;;
esac
