"""Tables that never cut an identifier or a number. Each column has a role:

- ``key``: an identifier a user types (a GPU key, a model name): always shown, never cut;
- ``num``: a number or a short value: never cut; shown unless the table is too wide, where the
  ``optional`` ones (lowest ``rank`` first) are dropped for the compact default;
- ``prose``: words that may wrap onto more lines (never cut either).

``--wide`` keeps every column; a table whose kept columns are still wider than the terminal is
printed wider than it (the terminal wraps the line) rather than cut. The width is the
terminal's, else ``COLUMNS``, else 120 for a pipe or file (``kvplan.cli.render.console``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box as boxes
from rich.console import Console
from rich.table import Table

#: the narrowest a prose column is laid out
PROSE_MIN = 16


@dataclass(frozen=True)
class Col:
    header: str
    role: str = "num"  # key | num | prose
    justify: str = "right"
    optional: bool = False  # dropped (lowest rank first) when the table is too wide
    rank: int = 0


def _word_width(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def _natural(col: Col, cells: list[str]) -> int:
    """The width a column needs: its longest cell (prose: up to PROSE_MIN when it wraps)."""
    longest = max((len(c) for c in cells), default=0)
    head = _word_width(col.header)  # a header wraps at its spaces
    if col.role == "prose":
        return max(min(longest, PROSE_MIN), max((_word_width(c) for c in cells), default=0), head)
    return max(longest, head)


def _table_width(widths: list[int], edge: int, pad: int) -> int:
    return sum(widths) + pad * len(widths) + max(len(widths) - 1, 0) + edge


def chosen(cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int, wide: bool,
           edge: int = 2, pad: int = 2) -> list[int]:
    """Indexes of the columns to show: all with ``wide``; else drop optional columns (lowest
    rank first, then rightmost) until the table fits ``width``."""
    keep = list(range(len(cols)))
    if wide:
        return keep
    widths = {i: _natural(cols[i], [r[i] for r in rows]) for i in keep}
    order = sorted((i for i in keep if cols[i].optional), key=lambda i: (cols[i].rank, -i))
    for i in order:
        if _table_width([widths[j] for j in keep], edge, pad) <= width:
            break
        keep.remove(i)
    return keep


def print_table(out: Console, cols: Sequence[Col], rows: Sequence[Sequence[str]], *,
                title: str | None = None, wide: bool = False, row_styles: Sequence[str | None] = (),
                box=boxes.HEAVY_HEAD) -> list[int]:
    """Print the table with the columns ``chosen`` for the console's width; returns them."""
    simple = box is boxes.SIMPLE_HEAD
    edge, pad = (0, 1) if simple else (2, 2)
    keep = chosen(cols, rows, out.width, wide, edge, pad)
    t = Table(title=title, title_justify="left", box=box, pad_edge=not simple,
              collapse_padding=simple)
    widths = [_natural(cols[i], [r[i] for r in rows]) for i in keep]
    prose = [k for k, i in enumerate(keep) if cols[i].role == "prose"]
    spare = out.width - _table_width(widths, edge, pad)
    for k in prose:  # prose takes the spare width, up to its longest cell
        i = keep[k]
        longest = max((len(r[i]) for r in rows), default=0)
        grow = max(min(longest - widths[k], spare // len(prose)), 0)
        widths[k] += grow
    for k, i in enumerate(keep):
        c = cols[i]
        # fixed at the longest cell: a value never wraps; only headers and prose do
        t.add_column(c.header, justify=c.justify, width=widths[k],  # type: ignore[arg-type]
                     overflow="fold")
    for n, r in enumerate(rows):
        t.add_row(*(r[i] for i in keep), style=row_styles[n] if n < len(row_styles) else None)
    need = _table_width(widths, edge, pad)
    # never narrower than the kept columns need: the terminal wraps a long line, nothing is cut
    width = out.width
    out.width = max(width, need)
    try:
        out.print(t, crop=False)
    finally:
        out.width = width
    return keep
