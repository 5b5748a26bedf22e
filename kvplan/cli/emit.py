"""The single output sink of the commands: warnings on stderr, then JSON or the tables."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from ..report import strict_json


def emit(warnings: tuple[str, ...], as_json: bool, record: Callable[[], dict],
         render: Callable[[], Any]) -> None:
    for warning in warnings:
        typer.echo(f"kvplan: warning: {warning}", err=True)
    if as_json:
        typer.echo(strict_json.dumps(record(), indent=2))
    else:
        render()
