"""kvplan: exact KV-cache capacity planning for LLM serving.

Public API::

    import kvplan
    model = kvplan.load_model("llama-3-70b")          # built-in name, or a config.json path
    fp = kvplan.kv_footprint(model, [32768], kv_dtype="fp8", tp=4)
    fp.bytes_per_token, fp.sequences[0].per_gpu_bytes

Everything here is pure computation over explicit inputs; nothing imports torch, pandas or
huggingface_hub.
"""

from __future__ import annotations

from .core.errors import (
    ConfigError,
    FormatError,
    InputError,
    KvplanError,
    ParallelismError,
    UnknownModelError,
)
from .core.formats import KvFormat, KvFormatPair, parse_format
from .core.layers import ChunkedLocal, FullAttention, LinearAttention, Mamba, MultiHeadLatent, SlidingWindow
from .core.model import Model
from .engines import EngineLayout, get_engine
from .loaders.hf_config import parse_config
from .loaders.resolve import load_model
from .planning.footprint import Footprint, LayerCost, SequenceBytes, kv_footprint
from .report.size_record import size_record

__version__ = "0.1.0"

__all__ = [
    "ChunkedLocal", "ConfigError", "EngineLayout", "Footprint", "FormatError", "FullAttention",
    "InputError", "KvFormat", "KvFormatPair", "KvplanError", "LayerCost", "LinearAttention",
    "Mamba", "Model", "MultiHeadLatent", "ParallelismError", "SequenceBytes", "SlidingWindow",
    "UnknownModelError", "get_engine", "kv_footprint", "load_model", "parse_config",
    "parse_format", "size_record",
]
