"""kvplan: exact KV-cache capacity planning for LLM serving.

Public API::

    import kvplan
    model = kvplan.load_model("llama-3-70b")          # built-in name, or a config.json path
    fp = kvplan.kv_footprint(model, [32768], kv_dtype="fp8", tp=4)
    fp.bytes_per_token, fp.sequences[0].per_gpu_bytes

Each name is imported from its layer when first used (``kvplan.core``, ``engines``,
``loaders``, ``planning``, ``report``), so ``import kvplan`` costs nothing and importing one
layer never loads the layers above it. ``kvplan.sweep`` needs pandas; nothing here imports
torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core.errors import (
        ConfigError,
        FormatError,
        GpuSpecError,
        HubError,
        InputError,
        KvplanError,
        ParallelismError,
        ScenarioError,
        UnknownGpuError,
        UnknownModelError,
    )
    from .core.formats import KvFormat, KvFormatPair, parse_format
    from .core.gpu import GpuSpec
    from .core.layers import (
        ChunkedLocal,
        FullAttention,
        LinearAttention,
        Mamba,
        MultiHeadLatent,
        SlidingWindow,
    )
    from .core.model import Model
    from .engines import EngineLayout, get_engine
    from .engines.costs import LayerCost
    from .loaders.hardware import load_gpu
    from .loaders.hf_config import parse_config
    from .loaders.hf_params import weight_inventory
    from .loaders.quant_config import weight_format
    from .loaders.resolve import load_model
    from .loaders.scenario_yaml import load_scenario
    from .planning.fit import plan_fit
    from .planning.fit_pools import concurrency_at
    from .planning.fit_types import Draft, FitRequest, FitResult
    from .planning.footprint import Footprint, SequenceBytes, kv_footprint
    from .planning.launch import launch_commands
    from .planning.scenario import run_scenario
    from .planning.sweep import Grid
    from .report.fit_record import fit_record
    from .report.plan_record import plan_record
    from .report.size_record import size_record
    from .report.sweep_table import sweep

__version__ = "0.1.0"

#: public name -> the module (below ``kvplan``) that defines it
_API = {
    "ConfigError": "core.errors",
    "FormatError": "core.errors",
    "GpuSpecError": "core.errors",
    "HubError": "core.errors",
    "InputError": "core.errors",
    "KvplanError": "core.errors",
    "ParallelismError": "core.errors",
    "ScenarioError": "core.errors",
    "UnknownGpuError": "core.errors",
    "UnknownModelError": "core.errors",
    "KvFormat": "core.formats",
    "KvFormatPair": "core.formats",
    "parse_format": "core.formats",
    "GpuSpec": "core.gpu",
    "ChunkedLocal": "core.layers",
    "FullAttention": "core.layers",
    "LinearAttention": "core.layers",
    "Mamba": "core.layers",
    "MultiHeadLatent": "core.layers",
    "SlidingWindow": "core.layers",
    "Model": "core.model",
    "EngineLayout": "engines",
    "get_engine": "engines",
    "LayerCost": "engines.costs",
    "load_gpu": "loaders.hardware",
    "parse_config": "loaders.hf_config",
    "weight_inventory": "loaders.hf_params",
    "weight_format": "loaders.quant_config",
    "load_model": "loaders.resolve",
    "load_scenario": "loaders.scenario_yaml",
    "plan_fit": "planning.fit",
    "concurrency_at": "planning.fit_pools",
    "Draft": "planning.fit_types",
    "FitRequest": "planning.fit_types",
    "FitResult": "planning.fit_types",
    "Footprint": "planning.footprint",
    "SequenceBytes": "planning.footprint",
    "kv_footprint": "planning.footprint",
    "launch_commands": "planning.launch",
    "run_scenario": "planning.scenario",
    "Grid": "planning.sweep",
    "fit_record": "report.fit_record",
    "plan_record": "report.plan_record",
    "size_record": "report.size_record",
    "sweep": "report.sweep_table",
}

__all__ = [
    "ChunkedLocal", "ConfigError", "Draft", "EngineLayout", "FitRequest", "FitResult", "Footprint",
    "FormatError", "FullAttention", "GpuSpec", "GpuSpecError", "Grid", "HubError", "InputError",
    "KvFormat", "KvFormatPair", "KvplanError", "LayerCost", "LinearAttention", "Mamba", "Model",
    "MultiHeadLatent", "ParallelismError", "ScenarioError", "SequenceBytes", "SlidingWindow",
    "UnknownGpuError", "UnknownModelError", "concurrency_at", "fit_record", "get_engine",
    "kv_footprint", "launch_commands", "load_gpu", "load_model", "load_scenario", "parse_config",
    "parse_format", "plan_fit", "plan_record", "run_scenario", "size_record", "sweep",
    "weight_format", "weight_inventory",
]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'kvplan' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
