"""Which weights a quantised checkpoint leaves unquantised: the module names of a tensor and
the matching rule of each quantisation method as vLLM applies it. Pure.

Rules (``vllm/model_executor/layers/quantization/``; research notes in docs/architectures.md):
- ``exact`` (fp8, fbgemm_fp8: ``utils/quant_utils.is_layer_skipped`` with
  ``skip_with_substr=False``): a linear is skipped when its full module name equals an entry; a
  fused-MoE module (``model.layers.N.mlp.experts``) when some entry that contains "experts"
  contains that name. Never component-wise, never substring: ``model.layers.0.mlp.gate`` (the
  router) does not skip ``model.layers.0.mlp.experts.0.gate_proj``.
- ``substring`` (AWQ, GPTQ, bitsandbytes): an entry anywhere in the name.
- ``compressed_tensors`` (``compressed_tensors/utils.should_ignore_layer``): ``re:PATTERN``
  entries by ``re.match`` (anchored at the start only), others by equality; experts are tested
  as ``<prefix>.0.gate_proj`` / ``up_proj`` / ``down_proj``.
- ``modelopt`` (``ModelOptQuantConfigBase.is_layer_excluded``): equality, then an entry as a
  substring of the name (also with ``language_model.`` dropped), then a shell glob; an entry
  ``X*`` (not ``X.*``) also stands for ``X`` and ``X.*``.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from functools import lru_cache

RULES = ("exact", "substring", "compressed_tensors", "modelopt")


@dataclass(frozen=True)
class SkipList:
    """Entries a checkpoint names (as written) and the rule its quantisation method applies."""

    entries: tuple[str, ...] = ()
    rule: str = "exact"

    def skips(self, names: tuple[str, ...], fused_expert: str | None = None) -> bool:
        """Whether any of a tensor's module ``names`` (its spellings) is left unquantised;
        ``fused_expert`` is the fused-MoE module name of an expert tensor (the exact rule tests
        that one)."""
        if not self.entries:
            return False
        if self.rule == "exact":
            if fused_expert is not None:
                return any("experts" in e and fused_expert in e for e in self.entries)
            return any(n in self.entries for n in names)
        if self.rule == "substring":
            return any(e and e in n for e in self.entries for n in names)
        if self.rule == "compressed_tensors":
            return any(_ct_match(e, n) for e in self.entries for n in names)
        return any(_modelopt_match(e, n) for e in _modelopt_entries(self.entries) for n in names)


def _ct_match(entry: str, name: str) -> bool:
    if entry.startswith("re:"):
        return _regex(entry[3:]).match(name) is not None
    return entry == name


@lru_cache(maxsize=4096)
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error:
        return re.compile(r"(?!)")  # the loader reports a bad pattern; here it matches nothing


def _modelopt_entries(entries: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for e in entries:
        out.append(e)
        if e.endswith("*") and not e.endswith(".*"):
            out += [e[:-1], e[:-1] + ".*"]
    return tuple(out)


def _modelopt_match(entry: str, name: str) -> bool:
    bare = name.replace("language_model.", "", 1)
    plain = entry.rstrip("*") if entry.endswith("*") else entry
    if entry == name or (plain and "*" not in plain and (plain in name or plain in bare)):
        return True
    return fnmatch.fnmatchcase(name, entry) or fnmatch.fnmatchcase(bare, entry)


def module_names(tensor_name: str, layer: int | None, place: str,
                 expert: bool) -> tuple[tuple[str, ...], str | None]:
    """(the spellings of a tensor's module name in HF checkpoints, its fused-MoE module name or
    None). ``self_attn.q_proj.weight`` of layer 3 -> ``model.layers.3.self_attn.q_proj`` (and
    ``model.language_model.layers.3.self_attn.q_proj`` for multimodal wrappers); experts are
    named by expert 0 (``model.layers.3.mlp.experts.0.gate_proj``), their fused module
    ``model.layers.3.mlp.experts``; MTP tensors sit at layer ``num_hidden_layers + j``."""
    base = tensor_name.removesuffix(".weight").removesuffix(".bias").removeprefix("mtp.")
    if place == "head":
        return ("lm_head",), None
    if place == "embed" or layer is None:
        return (f"model.{base}", base), None
    fused = None
    if expert:
        head, _, proj = base.rpartition(".")
        fused_base = head
        base = f"{head}.0.{proj}"
        fused = f"model.layers.{layer}.{fused_base}"
    roots = (f"model.layers.{layer}.", f"model.language_model.layers.{layer}.",
             f"language_model.model.layers.{layer}.")
    return tuple(r + base for r in roots), fused
