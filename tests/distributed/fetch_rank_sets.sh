#!/usr/bin/env sh
# Fetch public multi-rank profiler trace sets, recorded by others, for
# tests/distributed/test_public_rank_sets.py. They are third-party files: never commit them.
#
#   sh tests/distributed/fetch_rank_sets.sh [DEST]   # DEST defaults to ./.public-traces
#   GPUWISE_PUBLIC_TRACES=DEST .venv/bin/pytest -q tests/distributed/test_public_rank_sets.py
#
# facebookresearch/param (MIT), et_replay/tests/inputs/dlrm_kineto.tar.gz: a DLRM training
# step on 8 ranks (NCCL all-to-all and all-reduce, no Seq), one Kineto trace per rank.
# Read at a pinned commit from a blob-filtered clone and checked against its SHA-256.
# GIT_BASE overrides the GitHub base URL (a local mirror: GIT_BASE=file:///path/to/mirrors).
set -eu
DEST=${1:-.public-traces}
BASE=${GIT_BASE:-https://github.com}
PARAM=1e115ffc62c6d048405d9b963191736c13811b1d
SUM=cdeb818c32d6f11d7d6f3eed89f2561811ad4860fefd799322eed4522db2fcd0
repo=$DEST/.repos/facebookresearch+param
mkdir -p "$DEST/.repos" "$DEST/param"
if [ ! -d "$repo" ]; then
    git clone --quiet --filter=blob:none --no-checkout --bare "$BASE/facebookresearch/param" "$repo"
fi
git --git-dir="$repo" show "$PARAM:et_replay/tests/inputs/dlrm_kineto.tar.gz" > "$DEST/param/dlrm.part"
echo "$SUM  $DEST/param/dlrm.part" | sha256sum -c --quiet -
tar -xzf "$DEST/param/dlrm.part" -C "$DEST/param"
rm "$DEST/param/dlrm.part"
echo "GPUWISE_PUBLIC_TRACES=$(cd "$DEST" && pwd)"
