"""``kvplan models``: the built-in models."""

# No `from __future__ import annotations` here: typer would eval every annotation string at
# start-up (about 5 ms); real annotations cost nothing.

from typing import Annotated

import typer


def models(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
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
    from rich.table import Table

    from .render import console

    table = Table(title=f"{len(rows)} built-in models (KV bytes per token over every attention layer, "
                  "model dtype, vLLM main or the last vLLM release that serves the model; "
                  "windowed layers stop growing at their window)", title_justify="left")
    for col in ("name", "hub id", "family", "cache layers", "KV B/token", "engine"):
        table.add_column(col, justify="right" if col == "KV B/token" else "left")
    for r in rows:
        table.add_row(r["name"], r["hub_id"] or "", r["family"], r["layers"],
                      f"{r['bytes_per_token']:,}", r["engine"])
    console().print(table)
