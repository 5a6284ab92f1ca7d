#!/usr/bin/env bash
# Measure `make demo` on a fresh clone: packages installed and seconds to the report.
#
# Clones the committed HEAD into a temporary folder, runs `make demo` there and prints the
# number of packages in the new venv (pip itself excluded) and the wall time. pip's cache
# is used as it is on the machine (say so when quoting the figure); PIP_NO_CACHE_DIR=1
# measures a cold download instead.
#   bash tools/measure_demo.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpuwise-demo-measure.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
git clone -q "$ROOT" "$WORK/clone"
cd "$WORK/clone"
start=$(date +%s.%N)
make demo >"$WORK/demo.log" 2>&1 || { tail -30 "$WORK/demo.log"; exit 1; }
end=$(date +%s.%N)
again_start=$(date +%s.%N)
make demo >"$WORK/demo-again.log" 2>&1 || { tail -30 "$WORK/demo-again.log"; exit 1; }
again_end=$(date +%s.%N)
packages=$(.venv/bin/python -m pip list --format=freeze 2>/dev/null | grep -vic '^pip==')
grep -q '^findings' "$WORK/demo.log" || { echo "no report in the output" >&2; exit 1; }
test -s gpuwise-demo.html || { echo "no HTML report" >&2; exit 1; }
printf 'make demo on a fresh clone: %d packages installed (gpuwise included), %.0f s to the report; the demo alone (second make demo) %.0f s (%s cores, load average %s, pip cache %s)\n' \
    "$packages" "$(echo "$end - $start" | bc)" "$(echo "$again_end - $again_start" | bc)" "$(nproc)" \
    "$(cut -d' ' -f1 /proc/loadavg)" "$([ "${PIP_NO_CACHE_DIR:-}" = 1 ] && echo off || echo warm)"
.venv/bin/python -m pip list --format=freeze 2>/dev/null | grep -vi '^pip==' | tr '\n' ' '; echo
