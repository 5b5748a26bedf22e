"""The single output sink of the commands: warnings on stderr, then JSON or the tables."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from ..report import strict_json


def say(message: str) -> None:
    """One message on stderr, its control characters shown as escapes (a model folder or
    scenario name cannot drive the terminal)."""
    from ..core.text import printable

    typer.echo(printable(message), err=True)


def emit(warnings: tuple[str, ...], as_json: bool, record: Callable[[], dict],
         render: Callable[[], Any]) -> None:
    for warning in warnings:
        say(f"kvplan: warning: {warning}")
    if as_json:
        typer.echo(strict_json.dumps(record(), indent=2))
    else:
        render()
