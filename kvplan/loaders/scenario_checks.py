"""Rules a scenario must keep beyond its schema: fields that exclude or need each other
(checked on the raw document, so they join pydantic's errors), and names - engines, KV
formats, weight dtype, GPUs, prices and models - resolved at load, so a typo is one
``file:line: field: message`` line at its key like any other problem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .scenario_schema import ScenarioIn
from .yaml_file import problem_line


def cross_checks(raw: dict, locate, path: Path) -> list[str]:
    """Rules between fields, checked on the raw document so they join pydantic's errors."""
    out = []

    def add(loc: tuple, msg: str) -> None:
        out.append(problem_line(path, locate, loc, msg))

    w = raw.get("workload")
    if isinstance(w, dict):
        w = {k: v for k, v in w.items() if v is not None}  # an explicit null is no value
        rate, conc = "request_rate" in w, "concurrent_requests" in w
        if rate == conc:
            add(("workload",), "give exactly one of request_rate (requests/s) or concurrent_requests")
        if "trace" in w:
            for k in ("prompt_tokens", "output_tokens"):
                if k in w:
                    add(("workload", k), "a trace gives the lengths; drop this or the trace")
            if w.get("turns", 1) != 1:
                add(("workload", "turns"), "a trace holds whole requests: turns must be 1")
        else:
            for k in ("prompt_tokens", "output_tokens"):
                if k not in w:
                    add(("workload", k), "missing required field (or give a trace: file.jsonl)")
        if w.get("shared_prefix_tokens") and w.get("prefix_cache_hit_rate"):
            add(("workload", "prefix_cache_hit_rate"), "give shared_prefix_tokens or "
                "prefix_cache_hit_rate, not both (the hit rate is the alternative)")
        if "tokens_per_turn" in w and w.get("turns", 1) == 1:
            add(("workload", "tokens_per_turn"), "needs turns > 1")
        if w.get("turns", 1) != 1 and "tokens_per_turn" not in w:
            add(("workload", "tokens_per_turn"), "turns > 1 need the user tokens each later turn adds")
        if w.get("images_per_request") and not w.get("tokens_per_image"):
            add(("workload", "tokens_per_image"), "images_per_request needs tokens_per_image")
    h: dict = raw["hardware"] if isinstance(raw.get("hardware"), dict) else {}
    gpus = h.get("gpu")
    if isinstance(h.get("price_usd_per_gpu_hour"), (int, float)) and isinstance(gpus, list) and len(gpus) > 1:
        add(("hardware", "price_usd_per_gpu_hour"), "one price for several GPUs: give one per GPU, "
            "e.g. {h100: 2.5, l4: 0.8}")
    s = raw.get("slo")
    if isinstance(s, dict) and "ttft_ms" not in s and "tpot_ms" not in s:
        add(("slo",), "give ttft_ms and/or tpot_ms (or leave slo out)")
    return out


def local_path(name: str, base: Path) -> str:
    """A path written relative to the scenario file, made absolute; names stay names."""
    p = base / Path(name).expanduser()
    return str(p.resolve()) if p.exists() else name


def check_names(doc: ScenarioIn, path: Path, locate, names: dict[str, Any]) -> list[str]:
    """Engines, KV formats, weight dtype, GPUs and models resolve now, so a typo is one line
    at its key like any other problem (Hub models are fetched when planned)."""
    from ..core.errors import KvplanError
    from .hardware import load_gpu
    from .resolve import HUB_ID, load_model
    from .serving_names import name_problems

    out: list[str] = []
    base = path.parent

    def add(loc: tuple, msg: str) -> None:
        out.append(problem_line(path, locate, loc, msg))

    wd = doc.serving.weight_dtype
    for key, msg in name_problems(doc.serving.engine, doc.serving.kv_dtype, wd):
        add(("serving", key), msg)
    gpus = []
    for g in doc.hardware.gpu:
        g2 = local_path(g, base) if g.endswith((".yaml", ".yml")) else g
        try:
            spec = load_gpu(g2)
            # a spec file is kept as its path (absolute or relative to the scenario); a name as
            # its key
            gpus.append(g2 if g2.endswith((".yaml", ".yml")) and Path(g2).is_file() else spec.key)
        except KvplanError as err:
            add(("hardware", "gpu"), err.detail)
    names["gpus"] = tuple(gpus)
    price = doc.hardware.price_usd_per_gpu_hour
    if isinstance(price, dict):
        resolved = set()
        for g in gpus:
            try:
                resolved.add(load_gpu(g).key)
            except KvplanError:
                pass
        keys = {}
        for k in price:
            if k in resolved:  # the key of a GPU in the list (also one from a spec file)
                keys[k] = price[k]
                continue
            try:
                keys[load_gpu(local_path(k, base) if k.endswith((".yaml", ".yml")) else k).key] = price[k]
            except KvplanError as err:
                add(("hardware", "price_usd_per_gpu_hour", k), err.detail)
        for missing in sorted(resolved - set(keys)):
            add(("hardware", "price_usd_per_gpu_hour"), f"no price for {missing}")
        names["prices"] = keys
    draft = doc.draft_model.model if doc.draft_model else None
    for key, value in (("model", doc.model), ("draft_model", draft)):
        if value is None:
            continue
        v = local_path(value, base)
        names[key] = v
        if v == value and HUB_ID.match(value) and not Path(value).exists():
            from .builtins import find

            if find(value) is None:
                continue  # a Hub id: fetched (or found in the cache) when planned
        where = (key,) if key == "model" else (key, "model")
        try:
            m = load_model(v, assume_standard_attention=doc.assume_standard_attention)
        except KvplanError as err:
            add(where, err.detail)
            continue
        try:  # the parameter inventory and weight format are needed to plan it
            from .hf_params import weight_inventory
            from .quant_config import weight_format

            weight_inventory(m)
            weight_format(m, wd)
        except KvplanError as err:
            add(where if "weight dtype" not in err.detail else ("serving", "weight_dtype"),
                err.detail.replace("pass --weight-memory", "kvplan plan needs a parameter count "
                                   "(use `kvplan fit --weight-memory` for this model)"))
    return out
