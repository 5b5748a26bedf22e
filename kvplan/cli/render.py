"""Terminal rendering (rich) of library results. The only place tables are laid out."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from ..core.units import ceil_bytes, format_bytes, format_int, format_tokens
from ..planning.footprint import Footprint


def terminal_width() -> int | None:
    """``COLUMNS`` when set to a sane width (20 to 10,000), else None (the terminal's own)."""
    import os

    raw = os.environ.get("COLUMNS", "").strip()
    if raw.isdigit() and 20 <= int(raw) <= 10_000:
        return int(raw)
    return None


class SafeConsole(Console):
    """A console that shows control characters in what it prints as visible escapes
    (``kvplan.core.text.printable``): strings, and a table's title, headers and cells."""

    def print(self, *objects, **kwargs) -> None:  # type: ignore[override]
        super().print(*(_safe(o) for o in objects), **kwargs)


def _safe(o):
    from ..core.text import printable

    if isinstance(o, str):
        return printable(o)
    if isinstance(o, Table):
        if isinstance(o.title, str):
            o.title = printable(o.title)
        for c in o.columns:
            if isinstance(c.header, str):
                c.header = printable(c.header)
            c._cells = [printable(x) if isinstance(x, str) else x for x in c._cells]
    return o


def console() -> Console:
    """A console as wide as ``COLUMNS`` when it is set, else the terminal, else 120 columns
    for a file or pipe (rich's default there, 80, would fold the tables)."""
    width = terminal_width() or (None if sys.stdout.isatty() else 120)
    # No markup or emoji parsing: model names and paths are printed as they are (a config path
    # with "[...]" in it must not be read as a style), and rich's emoji table is not loaded.
    return SafeConsole(highlight=False, soft_wrap=False, width=width, markup=False, emoji=False)


def console_stderr() -> Console:
    """The progress bars' console: stderr, control characters escaped."""
    return SafeConsole(stderr=True, highlight=False, markup=False, emoji=False)


def render_size(fp: Footprint) -> None:
    from ..planning.model_limits import over_limit, past_limit_note

    out = console()
    m = fp.model
    out.print(f"{m.name}  {m.model_type}, {m.num_layers} layers, model dtype {m.dtype}"
              f"  source: {m.source}")
    out.print(f"engine {fp.engine.label}   KV format {fp.kv_dtype}   tp {fp.tp}   pp {fp.pp}"
              f"   block {fp.block_size_tokens} tokens")

    layers = Table(title="Cache per layer kind (whole model, unsharded)", title_justify="left")
    for col in ("kind", "layers", "KV heads", "head dim", "window", "bytes/token", "state bytes"):
        layers.add_column(col, justify="left" if col == "kind" else "right")
    for row in fp.layers:
        attention = row.kv_heads is not None
        head_dim = ""
        if row.head_dim_k is not None:
            head_dim = str(row.head_dim_k)
            if row.head_dim_v and row.head_dim_v != row.head_dim_k:
                head_dim += f"/{row.head_dim_v}"
        layers.add_row(
            row.kind, str(row.count),
            str(row.kv_heads) if attention else "",
            head_dim,
            format_tokens(row.window_tokens) if row.window_tokens else "",
            format_int(ceil_bytes(row.bytes_per_token * row.count)) if attention else "",
            format_int(row.state_bytes * row.count) if row.state_bytes else "",
        )
    out.print(layers)
    for row in fp.layers:
        how = "" if row.kind == "compressed_attention" else fp.engine.describe_policy(
            row.policy, row.window_tokens, fp.block_size_tokens)
        out.print(f"  {row.kind} x{row.count}: {row.detail}" + (f"; {how}" if how else ""),
                  style="dim")
    out.print(f"growing KV: {format_int(ceil_bytes(fp.bytes_per_token))} B per token"
              f" ({format_bytes(fp.bytes_per_token)}); constant state:"
              f" {format_int(fp.state_bytes_per_sequence)} B per sequence"
              f" ({format_bytes(fp.state_bytes_per_sequence)})")

    gpus = fp.tp * fp.pp
    seqs = Table(title="One sequence", title_justify="left")
    seqs.add_column("context", justify="right")
    seqs.add_column("tokens", justify="right")
    if gpus > 1:
        seqs.add_column(f"total, {gpus} GPUs", justify="right")
    seqs.add_column("busiest GPU" if gpus > 1 else "bytes", justify="right")
    seqs.add_column("", justify="right")
    past = past_limit_note(m, [s.context_tokens for s in fp.sequences])
    if past:
        seqs.add_column("model limit")
    for s in fp.sequences:
        cells = [format_tokens(s.context_tokens), f"{s.context_tokens:,}"]
        if gpus > 1:
            cells.append(f"{format_int(s.total_bytes)} B")
        cells += [f"{format_int(s.per_gpu_bytes)} B", format_bytes(s.per_gpu_bytes)]
        if past:
            cells.append("past it" if over_limit(m, s.context_tokens) else "")
        seqs.add_row(*cells)
    out.print(seqs)
    notes = [past] if past else []
    notes += list(fp.notes)
    if fp.pp > 1:
        notes.append(f"pipeline stages hold {', '.join(map(str, fp.stage_layers))} layers")
    if fp.formats.k.residual_tokens:
        notes.append(f"{fp.formats.k.residual_tokens} most recent tokens kept in fp16 (KIVI)")
    notes += list(m.assumptions)
    for n in notes:
        out.print(f"note: {n}", style="dim")
    out.print("GiB = 2^30 bytes; fractional bytes from sub-byte formats are rounded up once "
              "per GPU.", style="dim")
