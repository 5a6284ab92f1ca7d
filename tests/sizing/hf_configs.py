"""A tiny Llama ``config.json`` for the tests that size models from Hugging Face configs.

Two layers of width 64: transformers builds it in milliseconds, and every count it sizes
can be written down from these numbers.
"""

from __future__ import annotations

from typing import Any


def tiny_llama_config(**fields: Any) -> dict[str, Any]:
    """A fresh tiny Llama config, with ``fields`` set over the defaults."""
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 512,
        "max_position_embeddings": 256,
        **fields,
    }
