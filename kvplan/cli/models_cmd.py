"""``kvplan models``: the built-in models."""

# No `from __future__ import annotations` here: typer would eval every annotation string at
# start-up (about 5 ms); real annotations cost nothing.

from typing import Annotated

import typer


def models(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column, however wide.")] = False,
) -> None:
    """List the built-in models (use a name or alias as MODEL)."""
    from ..core.units import ceil_bytes
    from ..engines import get_engine
    from ..loaders import builtins
    from ..loaders.hf_config import parse_config
    from ..planning.footprint import kv_footprint
    from ..report import strict_json

    rows = []
    for spec in builtins.all_specs():
        m = parse_config(spec["config"], name=spec["name"], source=spec["name"])
        last = get_engine("vllm").removed_model_types.get(m.model_type)
        engine = f"vllm@{last}" if last else "vllm"  # the last vLLM release that serves it
        fp = kv_footprint(m, (4096,), engine=engine)
        kinds = ", ".join(f"{r.kind} x{r.count}" for r in fp.layers)
        rows.append({"name": spec["name"], "hub_id": spec.get("hub_id"),
                     "family": spec.get("family", m.model_type), "layers": kinds,
                     "engine": engine,
                     "bytes_per_token": ceil_bytes(sum(r.bytes_per_token * r.count for r in fp.layers)),
                     "aliases": spec.get("aliases", [])})
    if as_json:
        typer.echo(strict_json.dumps(rows, indent=2))
        return
    from .render import console
    from .tables import Col, print_table

    cols = [Col("name", "key", "left"), Col("hub id", "num", "left", True, 2),
            Col("family", "num", "left", True, 1), Col("cache layers", "prose", "left"),
            Col("KV B/token"), Col("engine", "num", "left", True, 0)]
    out = console()
    shown = print_table(out, cols, [[r["name"], r["hub_id"] or "", r["family"], r["layers"],
                                     f"{r['bytes_per_token']:,}", r["engine"]] for r in rows],
                        wide=wide, title=f"{len(rows)} built-in models (KV bytes per token over "
                        "every attention layer, model dtype, vLLM main or the last vLLM release "
                        "that serves the model; windowed layers stop growing at their window)")
    if len(shown) < len(cols):
        out.print("more columns: --wide (or a wider terminal); every field: --json", style="dim")
