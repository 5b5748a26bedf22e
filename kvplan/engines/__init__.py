"""Engine cache layouts: how each serving engine stores the cache a layer needs.

Every engine is one ``EngineLayout`` value, built in its own module (``vllm.py``, ``hf.py``)
with the behaviour it models and the engine version cited there: ``vllm.py``, ``sglang.py``,
``hf.py`` (transformers), ``llama_cpp.py`` and ``trtllm.py``; the memory budget each engine
keeps is in ``<engine>_memory.py``. ``get_engine("vllm")`` or ``get_engine("hf@4.57")``
picks one; the part after ``@`` is the engine version.
"""

from __future__ import annotations

from importlib import import_module

from ..core.errors import InputError
from ..core.suggest import did_you_mean
from .base import EngineLayout

#: Engine name -> (module, factory); a module is imported only when its engine is used.
ENGINES = {"vllm": ("vllm", "vllm_layout"), "sglang": ("sglang", "sglang_layout"),
           "hf": ("hf", "hf_layout"), "llama.cpp": ("llama_cpp", "llama_cpp_layout"),
           "trtllm": ("trtllm", "trtllm_layout")}
ENGINE_ALIASES = {"transformers": "hf", "huggingface": "hf", "llamacpp": "llama.cpp",
                  "llama-cpp": "llama.cpp", "llama_cpp": "llama.cpp",
                  "tensorrt-llm": "trtllm", "trt-llm": "trtllm", "tensorrt_llm": "trtllm"}
DEFAULT_ENGINE = "vllm"


def get_engine(spec: str = DEFAULT_ENGINE) -> EngineLayout:
    """Resolve ``name`` or ``name@version`` to an engine layout."""
    name, at, version = spec.strip().lower().partition("@")
    name = ENGINE_ALIASES.get(name, name)
    if name not in ENGINES:
        hint = did_you_mean(name, ENGINES, n=2, cutoff=0.4)
        raise InputError(
            f"unknown engine {spec!r}{hint}; known: {', '.join(ENGINES)}", field="--engine"
        )
    module, factory = ENGINES[name]
    return getattr(import_module(f"{__name__}.{module}"), factory)(version if at else None)


__all__ = ["EngineLayout", "get_engine", "ENGINES", "DEFAULT_ENGINE"]
