"""What is sized: the model, its input and how it is trained, as one ``SizingJob``.

Imports ``sizing.step`` (the pieces ``job.prepare_model`` applies). In reading order:

- ``models``: built-in models, written here so that no torchvision is needed.
- ``hf_fields``: a ``config.json`` read and its size fields checked, without torch.
- ``hf_config``: a model from a Hugging Face ``config.json`` on disk, no weights.
- ``model_source``: what the user named (a built-in, ``package.module:factory``, a
  ``config.json``) turned into a model and its default input; its example batch and loss.
- ``inputs``: the input a model is sized with, from ``--input`` and ``--seq``.
- ``job``: the ``SizingJob`` and ``prepare_model``, shared by the trace and the real step.
"""
