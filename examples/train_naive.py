"""The naive training script: a small CNN on generated images, input-bound on purpose.

The code lives in the package, ``gpuwise/profiling/example.py``, because ``gpuwise profile``
runs it when given no command and it must ship with every install; this file runs it
unchanged, so the two cannot drift apart. Read that module for the training loop.

Usage:
    python examples/train_naive.py --steps 40 --batch-size 64 --device auto
    gpuwise profile -- python examples/train_naive.py
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("gpuwise.profiling.example", run_name="__main__", alter_sys=True)
