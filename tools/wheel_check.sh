#!/usr/bin/env bash
# Check the built package as a user gets it, outside the source tree (`make wheel-check`).
#
# Builds the sdist and the wheel, makes a brand-new venv in a temporary folder, installs the
# pinned CPU torch there first (a user's own torch), then the wheel, and checks that:
#   - installing the wheel adds only gpuwise's own small dependencies (torch untouched);
#   - `gpuwise --version` and `python -m gpuwise --version` work;
#   - `gpuwise doctor --json` prints a gpuwise.doctor/1 object;
#   - `gpuwise demo` prints the report and writes the HTML;
#   - `gpuwise profile` measures a script run by ANOTHER interpreter (one with torch but
#     without gpuwise: the hooks load the profiler's own copy);
#   - `gpuwise analyze` reads the example trace shipped in the package.
# A missing data file or entry point fails here, not on a user's machine.
#
# Environment: PYTHON (the interpreter that builds and makes the venv; default: the
# project's .venv if present, else python3), TORCH_SPEC (default torch==2.13.0),
# MAX_ADDED (most packages the wheel may add; default 12), KEEP=1 keeps the folder.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
case "$PYTHON" in /*) ;; */*) PYTHON="$PWD/$PYTHON" ;; *) PYTHON="$(command -v "$PYTHON")" ;; esac
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
MAX_ADDED="${MAX_ADDED:-12}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpuwise-wheel-check.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then echo "wheel-check: keeping $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi
step() { printf '\n== wheel-check: %s\n' "$*"; }
fail() { echo "wheel-check: FAILED: $*" >&2; exit 1; }
started=$SECONDS

step "build sdist and wheel"
"$PYTHON" -m build --outdir "$WORK/dist" "$ROOT" >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; fail "build"; }
WHEEL="$(ls "$WORK"/dist/gpuwise-*.whl)"
ls -l "$WORK"/dist
"$PYTHON" - "$WHEEL" <<'EOF' || fail "package data missing from the wheel"
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = ["gpuwise/py.typed", "gpuwise/sizing/hardware/gpus.csv", "gpuwise/sizing/hardware/measured_calibration.csv",
        "gpuwise/sizing/hardware/measured_transformers.csv", "gpuwise/profiling/_site/sitecustomize.py",
        "gpuwise/report/report.css", "gpuwise/profiling/example_data/naive_cpu.pt.trace.json.gz"]
missing = [n for n in need if n not in names]
print("package data:", "all present" if not missing else f"missing {missing}")
sys.exit(1 if missing else 0)
EOF

step "a new venv with the user's torch ($TORCH_SPEC)"
"$PYTHON" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install -q --disable-pip-version-check "$TORCH_SPEC" 2>&1 | grep -v '^WARNING: Location' || true
"$VPY" -m pip freeze --all | sort >"$WORK/before.txt"

step "pip install the wheel"
"$VPY" -m pip install -q --disable-pip-version-check "$WHEEL" 2>&1 | grep -v '^WARNING: Location' || true
"$VPY" -m pip freeze --all | sort >"$WORK/after.txt"
ADDED="$(comm -13 "$WORK/before.txt" "$WORK/after.txt")"
REMOVED="$(comm -23 "$WORK/before.txt" "$WORK/after.txt")"
echo "added by the wheel ($(echo "$ADDED" | grep -c .) packages):"; echo "$ADDED" | sed 's/^/  /'
[ -z "$REMOVED" ] || fail "installing the wheel changed packages that were there: $REMOVED"
[ "$(echo "$ADDED" | grep -c .)" -le "$MAX_ADDED" ] || fail "the wheel added more than $MAX_ADDED packages"
grep -qi '^torch==' "$WORK/after.txt" || fail "torch is gone"

cd "$WORK"  # from here on nothing of the source tree is on the path
GW="$WORK/venv/bin/gpuwise"

step "gpuwise --version, python -m gpuwise --version"
"$GW" --version | tee "$WORK/version.txt"
"$VPY" -m gpuwise --version | cmp -s - "$WORK/version.txt" || fail "python -m gpuwise --version differs"
"$VPY" -c 'import gpuwise, sys; sys.exit(0 if "site-packages" in gpuwise.__file__ else 1)' \
    || fail "gpuwise was not imported from the venv"

step "gpuwise doctor --json"
"$GW" doctor --json >doctor.json || [ $? -le 1 ] || fail "doctor"
"$VPY" -c 'import json; d = json.load(open("doctor.json")); assert d["schema"] == "gpuwise.doctor/1", d["schema"]; print("doctor: schema", d["schema"])'

step "gpuwise demo"
"$GW" demo --steps 12 --html demo.html >demo.txt || fail "demo"
head -20 demo.txt
# the finding itself is checked by tests/cli/test_demo.py; a loaded CI machine may blur it
grep -q "^findings" demo.txt || fail "the demo's report has no findings"
grep -qi "<!doctype html" demo.html || fail "the demo's HTML report is missing"

step "gpuwise profile -- <another interpreter> tiny_script.py"
# Another interpreter with torch but without gpuwise: a second venv that sees the first
# one's packages, all but gpuwise, through a .pth file.
"$PYTHON" -m venv --without-pip "$WORK/other"  # the same Python version as the packages
SITE="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
OTHER_SITE="$("$WORK/other/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mkdir -p "$WORK/torch-only"
for entry in "$SITE"/*; do
    case "$(basename "$entry")" in gpuwise|gpuwise-*) ;; *) ln -s "$entry" "$WORK/torch-only/" ;; esac
done
echo "$WORK/torch-only" >"$OTHER_SITE/torch-only.pth"
if "$WORK/other/bin/python" -c 'import gpuwise' 2>/dev/null; then fail "the other interpreter sees gpuwise"; fi
cat >tiny_script.py <<'EOF'
import torch
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.randn(64, 8), batch_size=8)
for x in loader:
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
print("tiny: 8 steps")
EOF
"$GW" profile --json -- "$WORK/other/bin/python" tiny_script.py >profile.json || fail "profile"
"$VPY" -c 'import json; d = json.load(open("profile.json")); n = d["steps"]["count"]; print("profile: steps", n); assert n == 8, n'

step "gpuwise analyze on the shipped example trace"
TRACE="$("$GW" demo --example-trace)"
case "$TRACE" in "$ROOT"/*) fail "the example trace came from the source tree: $TRACE" ;; esac
"$GW" analyze --json "$TRACE" >analyze.json || fail "analyze"
"$VPY" -c 'import json; d = json.load(open("analyze.json")); k = d["findings"][0]["kind"]; print("analyze:", d["steps"]["count"], "steps, first finding", k); assert k == "input_bound", k'

step "passed in $((SECONDS - started)) s (wheel $(du -k "$WHEEL" | cut -f1) KiB)"
