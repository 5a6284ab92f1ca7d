"""Readers for recorded logs and traces (nvidia-smi, dmon, Kineto)."""
