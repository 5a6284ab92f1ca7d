import gzip
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.errors import LogFormatError
from gpuwise.telemetry.readers import _json_stream
from gpuwise.telemetry.readers.kineto import read_trace
from tests.conftest import realdata

W0 = "kineto_resnet50_v100_workers0.pt.trace.json.gz"
W4 = "kineto_resnet50_v100_workers4.pt.trace.json.gz"
ALEX = "hta_alexnet_a100_pageable_h2d.trace.json.gz"

DEVICE = {
    "id": 0,
    "name": "Test GPU",
    "totalGlobalMem": 16 * 2**30,
    "computeMajor": 8,
    "computeMinor": 6,
    "numSms": 40,
}


def x(cat, name, ts, dur, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 1, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def new_schema_events():
    """Two 1000 us steps; 300 us data wait in step 0; one pageable + one pinned copy."""
    return [
        x("user_annotation", "ProfilerStep#1", 1000, 1000),
        x("gpu_user_annotation", "ProfilerStep#1", 1100, 900),
        x("user_annotation", "ProfilerStep#2", 2000, 1000),
        x("cpu_op", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1000, 300),
        x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 1300, 100, bytes=4000, device=0),
        x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 2000, 50, bytes=1000, device=0),
        x("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 2900, 10, bytes=8, device=0),
        x("kernel", "gemm", 1400, 500, device=0),
        x("kernel", "gemm", 1800, 200, device=0),  # overlaps the previous one by 100 us
        x("kernel", "gemm", 2050, 800, device=0),
        x("gpu_memset", "Memset (Device)", 2950, 20, device=0),
        x("cuda_sync", "Stream Sync", 2800, 5),
        x("cuda_runtime", "cudaStreamSynchronize", 2800, 40),
        x("Trace", "PyTorch Profiler (0)", 0, 99999),
        {"ph": "i", "name": "instant", "ts": 5, "pid": 0, "tid": 0, "s": "g"},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}},
    ]


def write_trace(path, events, *, gz=False, **members):
    doc = {"schemaVersion": 1, "deviceProperties": [DEVICE], **members, "traceEvents": events}
    text = json.dumps(doc, indent=1)
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def test_workers0_trace_reproduces_readme_facts():
    tr = read_trace(realdata(W0))
    assert tr.category_names == "old"
    assert tr.events == 75718
    assert len(tr.steps) == 6
    assert sum(tr.step_durations_s) / 6 == pytest.approx(0.1748, abs=5e-5)
    assert tr.dataloader_fraction == pytest.approx(0.396, abs=5e-4)
    assert tr.gpu_busy_fraction == pytest.approx(0.560, abs=5e-4)
    assert tr.memcpy_fraction == pytest.approx(0.011, abs=5e-4)
    assert tr.devices[0]["name"] == "Tesla V100-DGXS-32GB"
    assert tr.devices[0]["compute_capability"] == "7.0"
    assert tr.copies["h2d"]["pageable"]["count"] == 12
    assert tr.skipped == []


def test_workers4_trace_reproduces_readme_facts():
    tr = read_trace(realdata(W4))
    assert sum(tr.step_durations_s) / len(tr.steps) == pytest.approx(0.1397, abs=5e-5)
    assert tr.dataloader_fraction == pytest.approx(0.010, abs=5e-4)
    assert tr.gpu_busy_fraction == pytest.approx(0.724, abs=5e-4)
    assert tr.memcpy_fraction == pytest.approx(0.023, abs=5e-4)


def test_alexnet_trace_new_names_pageable_copies_and_syncs():
    tr = read_trace(realdata(ALEX))
    assert tr.category_names == "new"
    # No ProfilerStep: the window is the device work's span (12.9 s), not the 43.4 s of
    # host events around it (30.4 s of start-up before the first kernel).
    assert tr.window_source == "device_span"
    assert tr.window_s == pytest.approx(12.92, abs=0.01)
    assert tr.facts is not None
    assert tr.facts.excerpt["prologue_s"] == pytest.approx(30.43, abs=0.01)
    assert tr.steps == []
    pageable = tr.copies["h2d"]["pageable"]
    assert pageable["count"] == 16
    assert pageable["time_s"] == pytest.approx(0.0555, abs=5e-5)
    assert tr.kernel_s == pytest.approx(0.0107, abs=5e-5)
    assert pageable["max_bandwidth_gb_s"] == pytest.approx(11.1, abs=0.1)
    assert tr.sync["events"] == 41
    assert tr.sync["by_name"] == {"Stream Wait Event": 20, "Stream Sync": 16, "Context Sync": 5}
    assert tr.gpu_active_span_s == pytest.approx(12.9, abs=0.05)
    assert tr.rank == 0


def test_synthetic_trace_window_steps_and_union(tmp_path):
    tr = read_trace(write_trace(tmp_path / "t.json", new_schema_events()))
    assert tr.category_names == "new"
    assert tr.window_s == pytest.approx(2000e-6)
    assert tr.step_durations_s == pytest.approx([1000e-6, 1000e-6])
    assert tr.dataloader_s == pytest.approx(300e-6)
    # kernels 1400-2000 (union), 2050-2850; copies 1300-1400, 2000-2050, 2900-2910; memset
    assert tr.gpu_busy_s == pytest.approx((100 + 600 + 50 + 800 + 10 + 20) * 1e-6)
    assert tr.kernel_s == pytest.approx(1500e-6)
    assert tr.memcpy_s == pytest.approx(160e-6)
    assert tr.copies["h2d"]["pinned"]["bytes"] == 1000
    assert tr.copies["d2h"]["pageable"]["count"] == 1
    assert tr.sync["runtime_calls"] == 1
    assert tr.sync["runtime_s"] == pytest.approx(40e-6)
    first, second = tr.steps
    assert (first.data_wait_s, first.h2d_s) == pytest.approx((300e-6, 100e-6))
    assert first.compute_s == pytest.approx(600e-6)
    assert (first.h2d_bytes, first.h2d_pageable_bytes, first.h2d_count) == (4000, 4000, 1)
    assert (second.h2d_bytes, second.h2d_pageable_bytes) == (1000, 0)
    assert second.start_s == pytest.approx(1000e-6)
    assert tr.devices[0]["id"] == "gpu0"
    assert tr.devices[0]["memory_total_bytes"] == 16 * 2**30


def test_gzip_and_bare_array_read_the_same(tmp_path):
    events = new_schema_events()
    plain = read_trace(write_trace(tmp_path / "a.json", events))
    zipped = read_trace(write_trace(tmp_path / "a.json.gz", events, gz=True))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(events))
    array = read_trace(bare)
    assert zipped.gpu_busy_s == plain.gpu_busy_s == array.gpu_busy_s
    assert zipped.steps == plain.steps == array.steps
    assert array.devices == []


def test_tiny_chunks_give_the_same_result(tmp_path, monkeypatch):
    path = write_trace(tmp_path / "t.json", new_schema_events(), distributedInfo={"rank": 3})
    whole = read_trace(path)
    monkeypatch.setattr(_json_stream, "CHUNK_CHARS", 7)
    chunked = read_trace(path)
    assert chunked.to_section() == whole.to_section()
    assert chunked.steps == whole.steps
    assert whole.rank == 3
    assert {s.rank for s in whole.steps} == {3}


def test_truncated_trace_strict_error_names_file_and_offset(tmp_path):
    text = json.dumps({"traceEvents": new_schema_events()})
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    with pytest.raises(LogFormatError, match=r"cut\.json.*character \d+") as info:
        read_trace(path)
    assert "strict=False" in str(info.value)


def test_truncated_trace_lenient_keeps_events_before_the_cut(tmp_path):
    events = new_schema_events()
    text = json.dumps({"traceEvents": events})
    cut = text.index('"Stream Sync"')
    path = tmp_path / "cut.json"
    path.write_text(text[:cut])
    tr = read_trace(path, strict=False)
    assert tr.truncated
    assert tr.events == 11  # the 12th event is the one cut
    assert tr.kernel_s == pytest.approx(1500e-6)
    assert any("document ends" in s.reason for s in tr.skipped)


def test_truncated_gzip_is_reported(tmp_path):
    data = gzip.compress(json.dumps({"traceEvents": new_schema_events() * 50}).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(LogFormatError, match="truncated"):
        read_trace(path)
    tr = read_trace(path, strict=False)
    assert tr.truncated
    assert 0 < tr.events < 16 * 50


def test_corrupt_event_is_skipped_and_counted_when_lenient(tmp_path):
    text = json.dumps({"traceEvents": new_schema_events()}, indent=1)
    broken = text.replace('"name": "gemm", "pid"', '"name": "gemm" "pid"', 1)
    broken = broken.replace('"name": "gemm",\n', '"name": "gemm"\n', 1)
    path = tmp_path / "bad.json"
    path.write_text(broken)
    with pytest.raises(LogFormatError, match=r"bad\.json.*character"):
        read_trace(path)
    tr = read_trace(path, strict=False)
    assert len(tr.skipped) == 1
    assert tr.skipped[0].record == 7
    assert tr.skipped[0].offset is not None
    assert tr.kernel_s == pytest.approx(1000e-6)  # two of three kernels survive
    assert tr.events == 15


def test_event_without_numeric_time_strict_and_lenient(tmp_path):
    events = [*new_schema_events(), {"ph": "X", "cat": "kernel", "name": "k", "ts": "soon"}]
    path = write_trace(tmp_path / "t.json", events)
    with pytest.raises(LogFormatError, match="event #16"):
        read_trace(path)
    tr = read_trace(path, strict=False)
    assert [(s.record, "numeric" in s.reason) for s in tr.skipped] == [(16, True)]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not json at all", "expected a JSON object"),
        ('{"schemaVersion": 1}', "no 'traceEvents'"),
        ("", "expected a JSON object"),
    ],
)
def test_not_a_trace(tmp_path, text, match):
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(LogFormatError, match=match):
        read_trace(path)


def test_missing_file(tmp_path):
    with pytest.raises(LogFormatError, match="cannot open trace"):
        read_trace(tmp_path / "nope.json")


@pytest.mark.slow
def test_trace_exported_by_this_torch_profiler(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule
    from torch.utils.data import DataLoader, Dataset

    class SlowData(Dataset):
        def __len__(self):
            return 24

        def __getitem__(self, i):
            end = time.perf_counter() + 0.003
            while time.perf_counter() < end:  # busy-wait: a slow per-sample transform
                pass
            return torch.ones(8), 0

    model = torch.nn.Linear(8, 2)
    path = tmp_path / "cpu.pt.trace.json"
    steps = schedule(wait=0, warmup=1, active=4, repeat=1)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=steps,
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
        acc_events=True,
    ) as prof:
        for x, _ in DataLoader(SlowData(), batch_size=4):
            model(x).sum().backward()
            prof.step()
    tr = read_trace(path)
    assert tr.category_names == "new"
    assert len(tr.steps) == len(tr.step_durations_s) == 4
    assert tr.dataloader_fraction > 0.5
    assert all(step.data_wait_s >= 0.012 for step in tr.steps)  # 4 samples x 3 ms each
    assert all(step.data_wait_s <= step.total_s for step in tr.steps)
    assert tr.gpu_busy_s == 0.0


class _Pieces:
    """A text stream that hands out pieces of the given sizes, whatever is asked."""

    def __init__(self, text, sizes):
        self.text, self.sizes, self.pos, self.i = text, sizes, 0, 0

    def read(self, n=-1):
        size = self.sizes[self.i % len(self.sizes)]
        self.i += 1
        piece = self.text[self.pos : self.pos + size]
        self.pos += len(piece)
        return piece


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.text(max_size=8),
    st.floats(allow_nan=False, allow_infinity=False),
)
_events = st.lists(st.dictionaries(st.text(max_size=5), _scalars, max_size=4), max_size=12)


@given(
    events=_events,
    sizes=st.lists(st.integers(1, 9), min_size=1, max_size=5),
    indent=st.sampled_from([None, 1]),
)
@settings(max_examples=60, deadline=None)
def test_stream_decodes_any_chunking_like_json_loads(events, sizes, indent):
    text = json.dumps({"a": [1, 2.5], "traceEvents": events, "z": "end"}, indent=indent)
    stream = _json_stream.JsonStream(_Pieces(text, sizes))
    got = {}
    for key in stream.members():
        got[key] = list(stream.elements()) if key == "traceEvents" else stream.value()
    assert got == json.loads(text)
    assert stream.peek() == ""
