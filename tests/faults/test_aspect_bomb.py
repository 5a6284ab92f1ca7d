"""Aspect-ratio bombs: a thin JPEG whose resize, not its decode, would cost gigabytes.

Promise: every decoding path (the built-in serving ``pre``, ``pack --size``) is bounded
by the decode cost guard (width x height x channels after the decoder's own downscale)
and by the output: a 65500 x 1 JPEG of ~150 KB is served and packed within a few MB;
a JPEG whose header claims more than ``MAX_DECODE_BYTES`` after downscaling is refused
before any pixel is decoded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import simplejpeg

from gpuwise.data.codec import MAX_DECODE_BYTES, ImageTooLarge
from tests.faults.helpers import env_for

PEAK_GROWTH_MB = 300
"""Ceiling of the peak RSS growth: the cover row of the old resize was ~3.2 GB per
request; bounded work takes a few MB (decoded row 0.2 MB, output 49 KB)."""


def _thin_jpeg(path: Path) -> Path:
    rng = np.random.default_rng(0)
    row = rng.integers(0, 256, (1, 65500, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(simplejpeg.encode_jpeg(row, quality=90)))
    return path


def _python(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -c ARGS`` in ``tmp_path``; it must succeed."""
    done = subprocess.run(
        [sys.executable, "-c", *args],
        cwd=tmp_path,
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


SERVE = """
import json, resource, sys
from gpuwise.pipeline import Pipeline
from gpuwise.pipeline.bench.example import image_classifier
app = image_classifier(size=128, images=2)
data = open(sys.argv[1], "rb").read()
with Pipeline(app.pre, app.model, app.post, transform=app.transform, pre_workers=2) as pipe:
    pipe.submit(app.make_input(0)).result(timeout=120)   # warm: model and buffers
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results = [f.result(timeout=120) for f in [pipe.submit(data) for _ in range(4)]]
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"growth_mb": (after - before) / 1024, "top5": json.loads(results[0])["top5"]}))
"""


def test_serving_a_thin_jpeg_stays_small(tmp_path: Path) -> None:
    bomb = _thin_jpeg(tmp_path / "thin.jpg")
    done = _python([SERVE, str(bomb)], tmp_path)
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    print(doc["growth_mb"])
    assert doc["growth_mb"] < PEAK_GROWTH_MB
    assert len(doc["top5"]) == 5


def test_pack_size_of_a_thin_jpeg_stays_small(tmp_path: Path) -> None:
    _thin_jpeg(tmp_path / "src" / "a" / "thin.jpg")
    script = (
        "import resource, sys; from gpuwise.cli.main import main; "
        "code = main(['pack', 'src', 's', '--size', '128', '--mode', 'raw', '--json']); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr); "
        "sys.exit(code)"
    )
    done = _python([script], tmp_path)
    assert json.loads(done.stdout)["records"] == 1
    peak_mb = float(done.stderr.strip().splitlines()[-1])
    assert peak_mb < 1000  # the whole process, torch imported: far under one 3.2 GB row


def test_a_header_claiming_too_much_is_refused_before_decoding(tmp_path: Path) -> None:
    import struct

    from gpuwise.data.jpeg import decode

    data = bytearray(simplejpeg.encode_jpeg(np.full((16, 16, 3), 9, np.uint8), quality=90))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", 65000, 65000)
    # a full decode: 12.7 GB, refused; at 1/8 scale (decode_resize to a small size) the
    # same header costs 198 MB, under the limit, so it is decoded (and found corrupt)
    with pytest.raises(ImageTooLarge, match=f"{MAX_DECODE_BYTES / 1e6:.0f} MB decode limit"):
        decode(bytes(data))  # refused before decoding: CorruptImageError would mean decoded
