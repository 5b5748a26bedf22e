"""``kvplan formats``: the KV storage formats and their exact cost."""

# No `from __future__ import annotations` here: typer would eval every annotation string at
# start-up (about 5 ms); real annotations cost nothing.

from typing import Annotated

import typer


def formats(
    head_dim: Annotated[int, typer.Option("--head-dim", help="Vector length to cost.")] = 128,
) -> None:
    """List KV storage formats with exact bytes per head_dim vector, scales included."""
    from fractions import Fraction

    from rich.table import Table

    from ..core.errors import FormatError, InputError
    from ..core.formats import ALL_NAMES, parse_format
    from .render import console

    if head_dim < 1:
        raise InputError(f"must be a positive integer, got {head_dim}", field="--head-dim")
    table = Table(title=f"KV formats: bytes per {head_dim}-element vector (K or V of one head)",
                  title_justify="left")
    for col in ("format", "K bytes", "V bytes", "bits / element", "runs natively on", "what"):
        table.add_column(col)
    for name in ALL_NAMES:
        pair = parse_format(name)
        kb: Fraction | None
        vb: Fraction | None
        try:
            kb, vb = pair.k.vector_bytes(head_dim), pair.v.vector_bytes(head_dim)
        except FormatError:  # block formats need head_dim % 32 == 0
            kb = vb = None
        bits = 8 * kb / head_dim if kb is not None else None
        table.add_row(name, str(kb) if kb is not None else "n/a", str(vb) if vb is not None
                      else "n/a", f"{float(bits):.4g}" if bits is not None else "",
                      ", ".join(pair.k.native_archs), pair.k.description)
    console().print(table)
