"""How the step runs: the pieces a sizing job applies to a model, for the trace and for real.

Imports nothing else of ``gpuwise.sizing``. ``choices`` (the accepted precision routes,
optimizers and checkpointing modes) sits below the rest; ``attention`` and ``quantize``
build on ``cuda_ops`` and ``peft``.

- ``choices``: the names a job accepts, and the check that names the valid ones.
- ``routes``: precision routes (fp32, tf32, autocast, fp16-o2, bf16-o2, bf16-pure), master
  weights.
- ``loss_scaling``: fp16 autocast's ``GradScaler`` (scale, unscale, update) in the step.
- ``autocast_policy``: CUDA's autocast casts, applied while tracing on the CPU.
- ``optimizers``: the optimizers a job may name, each with exactly the state it keeps.
- ``in_backward``: the optimizer stepped inside the backward.
- ``checkpointing``: gradient checkpointing as the user's job runs it.
- ``peft``: frozen parameters and LoRA adapters.
- ``quantize``: quantized frozen base weights (QLoRA's NF4, int8).
- ``losses``: a language model's cross-entropy, full, fused or chunked.
- ``cuda_ops``: operators CUDA runs as one fused kernel (dropout).
- ``attention``: eager (unfused) attention, for models that do not use the fused kernel.
"""
