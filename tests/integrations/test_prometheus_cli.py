"""``gpuwise monitor --prometheus``: a command run under monitor scrapes the endpoint."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from tests.cli.children import free_port

pytest.importorskip("prometheus_client", reason="gpuwise[prometheus] is not installed")

SCRAPER = """
import sys, time, urllib.request
url, out = sys.argv[1], sys.argv[2]
for _ in range(100):
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    if "DCGM_FI_DEV_GPU_UTIL" in text:
        break
    time.sleep(0.05)
open(out, "w").write(text)
"""


def test_monitor_serves_what_a_scraper_reads(tmp_path: Path, capsys) -> None:
    port = free_port()
    out = tmp_path / "scrape.txt"
    script = tmp_path / "scrape.py"
    script.write_text(SCRAPER, encoding="utf-8")
    url = f"http://127.0.0.1:{port}/metrics"
    argv = ["monitor", "--fake", "1", "--interval", "0.1", "--prometheus", f"127.0.0.1:{port}"]
    code = main([*argv, "--json", "--", sys.executable, str(script), url, str(out)])
    assert code == 0
    text = out.read_text(encoding="utf-8")
    assert 'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-fake-0000",device="nvidia0",gpu="0"' in text
    assert f"serving Prometheus metrics at {url}" in capsys.readouterr().err


def test_bad_address_is_a_one_line_error(capsys) -> None:
    assert main(["monitor", "--fake", "1", "--once", "--prometheus", "host:port"]) == 1
    err = capsys.readouterr().err
    assert "HOST:PORT" in err
