"""What the devices can do: datasheets, published measurements, this machine's CPU.

Imports nothing else of ``gpuwise.sizing``; the CSV files beside the modules ship in the
wheel (``pyproject.toml``'s package data).

- ``catalog``: the GPU catalog (``gpus.csv``): vendor datasheet rates, memory, prices.
- ``calibration``: published measurements (``measured_calibration.csv``,
  ``measured_transformers.csv``, ``published_finetune.csv``) and the factors fitted to
  them: kernel factors, CUDA context and cuBLAS workspace bytes per GPU generation.
- ``cpu_rates``: short microbenchmarks of this machine's CPU as a training device.
"""
