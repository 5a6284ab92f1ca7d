"""Note [the stop rule] held under repeated and doubled signals.

Promises:
- ``analyze`` follows the stop rule as the other long commands do: SIGTERM or SIGHUP ends it
  with a line naming the signal and exit 128 + N (it ended -15 / -1, silent).
- ``pack`` stopped by two SIGINTs in a row always ends, removes its ``DST.tmp-PID``
  folder and its lock: a signal never lands inside the decode pool's own locking (it hung
  for good in 1 of 36 tries).
- A second signal after the first one's stop, while the process winds down, is noted: the
  exit stays 128 + the first (``monitor`` ended -2 / -15).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.faults.helpers import WAIT_S, env_for, kill_quietly, output, start


def catches(pid: int, signum: int) -> bool:
    """True once the process has a handler of its own for ``signum`` (``SigCgt``)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(int(x.split()[1], 16) for x in status.splitlines() if x.startswith("SigCgt:"))
    return bool(mask >> (signum - 1) & 1)


def _big_log(path: Path, rows: int) -> Path:
    t0 = datetime(2026, 2, 3, 12, 0, 0)
    lines = ["timestamp, index, utilization.gpu [%], power.draw [W]"]
    for i in range(rows):
        t = (t0 + timedelta(milliseconds=100 * i)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        lines.append(f"{t}, {i % 2}, {i % 100} %, 200 W")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_analyze_follows_the_stop_rule(tmp_path: Path, signum: signal.Signals) -> None:
    _big_log(tmp_path / "gpu.csv", 150_000)
    proc = start(["analyze", "gpu.csv"], tmp_path)
    try:
        deadline = time.monotonic() + WAIT_S
        while not catches(proc.pid, signum) and proc.poll() is None:
            assert time.monotonic() < deadline, "analyze never installed the stop rule"
            time.sleep(0.002)
        assert proc.poll() is None, "analyze ended without ever catching the signal"
        proc.send_signal(signum)
        code = proc.wait(timeout=WAIT_S)
    finally:
        kill_quietly(proc.pid)
    _out, err = output(tmp_path)
    if code == 0:  # it read the whole log between the check and the signal
        pytest.skip("analyze finished before the signal arrived")
    assert code == 128 + signum, err[-2000:]
    assert f"gpuwise analyze: interrupted by {signum.name}" in err
    assert "Traceback" not in err


DOUBLE_SIGINT = textwrap.dedent(
    """
    import os, random, shutil, signal, sys, threading, time
    from pathlib import Path

    import numpy as np

    from gpuwise import interrupts
    from gpuwise.data.pack import PackConfig, pack

    root, tries, budget_s = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    images = np.random.default_rng(0).integers(0, 255, (600, 32, 32, 3), dtype=np.uint8)
    rng = random.Random(0)
    signal.signal(signal.SIGINT, lambda *_: None)  # a signal that lands after a try: ignored
    t0 = time.monotonic()
    done = stopped = 0
    for n in range(tries):
        if done and time.monotonic() - t0 > budget_s:
            break
        first, gap = rng.uniform(0.0, 0.06), rng.uniform(0.0, 0.005)

        go = threading.Event()

        def kill():
            go.wait()
            time.sleep(first)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(gap)
            os.kill(os.getpid(), signal.SIGINT)

        killer = threading.Thread(target=kill)
        killer.start()
        with interrupts.stop_on_signals():
            try:
                go.set()
                pack(images, root / f"s{n}", PackConfig(mode="jpeg", workers=4, chunk=2))
            except interrupts.Interrupted as err:
                assert err.signum == signal.SIGINT
                stopped += 1
            while killer.is_alive():  # a signal after the pack ended lands here
                try:
                    killer.join()
                except interrupts.Interrupted:
                    pass
        left = sorted(p.name for p in root.iterdir() if p.name != f"s{n}")
        assert left == [], f"try {n}: left {left}"
        shutil.rmtree(root / f"s{n}", ignore_errors=True)
        done += 1
        print(done, stopped, flush=True)
    """
)


def test_pack_stopped_by_two_sigints_always_ends_and_leaves_nothing(tmp_path: Path) -> None:
    # many tries in one process (python start-up once); each try must end by itself
    script = tmp_path / "double_sigint.py"
    script.write_text(DOUBLE_SIGINT)
    (tmp_path / "out").mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "out"), "150", "40"],
        cwd=Path(__file__).parents[2],
        env=env_for(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=WAIT_S + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        last = out.split()[-2:] if out.split() else ["0", "0"]
        left = sorted(p.name for p in (tmp_path / "out").iterdir())
        pytest.fail(f"a pack hung after {last[0]} tries ({last[1]} stopped); left {left}")
    assert proc.returncode == 0, err[-3000:]
    done, stopped = (int(x) for x in out.split()[-2:])
    print(f"{done} tries, {stopped} stopped by the signals")
    assert done >= 10
    assert stopped >= done // 4  # many tries were stopped mid-pack, not after it


SECOND_SIGNAL = textwrap.dedent(
    """
    import os, signal, sys, threading, time

    from gpuwise.cli.main import main

    first, second = int(sys.argv[1]), int(sys.argv[2])


    def stop_once_sampling():  # a loaded machine imports slowly: wait for the sampler
        while not any(t.name == "gpuwise-sampler" for t in threading.enumerate()):
            time.sleep(0.01)
        time.sleep(0.3)
        os.kill(os.getpid(), first)


    threading.Thread(target=stop_once_sampling, daemon=True).start()
    sys.argv = ["gpuwise", "monitor", "--fake", "1", "--interval", "0.05", "--json"]
    code = main()  # as the gpuwise command runs it
    os.kill(os.getpid(), second)  # the second signal, while the process winds down
    time.sleep(0.5)
    sys.exit(code)
    """
)


@pytest.mark.parametrize(("first", "second"), [(signal.SIGTERM, signal.SIGINT),
                                               (signal.SIGINT, signal.SIGTERM),
                                               (signal.SIGHUP, signal.SIGTERM)])  # fmt: skip
def test_a_second_signal_while_monitor_winds_down_keeps_the_first_exit(
    tmp_path: Path, first: signal.Signals, second: signal.Signals
) -> None:
    # it ended -2 / -15 when the second came after the command's body, as threads were
    # joined and output flushed: the signal met Python's default handlers again
    script = tmp_path / "second.py"
    script.write_text(SECOND_SIGNAL)
    done = subprocess.run(
        [sys.executable, str(script), str(int(first)), str(int(second))],
        cwd=tmp_path, env=env_for(tmp_path), capture_output=True, text=True,
        timeout=WAIT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 128 + first, done.stderr[-2000:]
    assert json.loads(done.stdout)["schema"] == "gpuwise.samples/1"
    assert "Traceback" not in done.stderr
