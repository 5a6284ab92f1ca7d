from __future__ import annotations

import sys

import numpy as np
import pytest

from gpuwise.data import codec
from gpuwise.errors import MissingExtraError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n" + bytes(32)
JPEG_START = b"\xff\xd8\xff\xe0" + bytes(32)


@pytest.mark.parametrize(
    ("module", "data", "package"),
    [("PIL", PNG_SIGNATURE, "pillow"), ("simplejpeg", JPEG_START, "simplejpeg")],
)
def test_decoding_without_the_jpeg_extra_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, data: bytes, package: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import of it raises ImportError
    with pytest.raises(MissingExtraError, match=r"pip install 'gpuwise\[jpeg\]'") as caught:
        codec.decode_rgb(data)
    assert caught.value.module == package
    assert caught.value.extra == "jpeg"


def test_encoding_without_simplejpeg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "simplejpeg", None)
    with pytest.raises(MissingExtraError, match=r"gpuwise\[jpeg\]"):
        codec.encode_jpeg(np.zeros((4, 4, 3), np.uint8))
