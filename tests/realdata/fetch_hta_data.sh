#!/usr/bin/env sh
# Fetch Holistic Trace Analysis' test traces (MIT licence) for the held-out suite
# tests/realdata/test_hta_heldout.py. They are third-party files: never commit them.
#
#   sh tests/realdata/fetch_hta_data.sh [DEST]      # DEST defaults to ./.hta-data
#   GPUWISE_HTA_DATA=DEST/tests/data .venv/bin/pytest -q tests/realdata/test_hta_heldout.py
#
# Repository https://github.com/facebookresearch/HolisticTraceAnalysis, commit pinned
# below, path tests/data (a sparse, blob-filtered clone: about 15 MB of traces).
set -eu
REPO=https://github.com/facebookresearch/HolisticTraceAnalysis
COMMIT=f4d0062c382f42bd8a74838bcdad1916c7d5d2da
DEST=${1:-.hta-data}

if [ ! -d "$DEST/.git" ]; then
    git clone --filter=blob:none --no-checkout "$REPO" "$DEST"
fi
git -C "$DEST" sparse-checkout set tests/data
git -C "$DEST" checkout --quiet "$COMMIT"
echo "GPUWISE_HTA_DATA=$(cd "$DEST/tests/data" && pwd)"
