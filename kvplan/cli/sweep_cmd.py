"""``kvplan sweep MODEL [MODEL...]``: a grid over GPUs, TP, PP, DP, EP, KV formats, contexts,
batches."""

# No `from __future__ import annotations` (typer evaluates annotation strings at start-up).

from typing import Annotated

import typer

from ..core.errors import InputError
from .emit import say
from .options import AllowLong, AssumeStandard, comma_list

EXAMPLES = """\b
Examples:
  kvplan sweep llama-3-70b --gpu h100,h200 --tp 1,2,4,8 --kv-dtype bf16,fp8 -c 8k,32k,128k --batch 1,8,64
  kvplan sweep llama-3-70b qwen3-30b-a3b --gpu h100,b200 --tp 1,2,4 -c 1k:128k:x2 --batch 1:256:+8 \\
      --where 'tpot_ms <= 50' --objective cost_per_mtok --top 10 --format md
  kvplan sweep deepseek-v3 --gpu h200 --tp 1,8 --dp 1,8 --ep 1,8 -c 32k --batch 1,8,32"""


def _split(values: list[str] | None, default: list[str], flag: str) -> list[str]:
    return comma_list(values, flag) or default


def _ints(values: list[str] | None, default: str, flag: str) -> list[int]:
    from .axis import parse_axis

    return parse_axis(",".join(values) if values else default, flag, tokens=False)


def sweep(
    models: Annotated[list[str], typer.Argument(help="One or more models.")],
    gpu: Annotated[list[str], typer.Option("--gpu", help="GPU(s), comma list.")],
    tp: Annotated[list[str] | None, typer.Option("--tp", help="TP degrees, e.g. 1,2,4,8.")] = None,
    pp: Annotated[list[str] | None, typer.Option("--pp", help="PP degrees.")] = None,
    dp: Annotated[list[str] | None, typer.Option(
        "--dp", help="Attention data-parallel ranks, e.g. 1,8 (batch and max_concurrency are "
        "then per DP rank).")] = None,
    ep: Annotated[list[str] | None, typer.Option(
        "--ep", help="Expert-parallel degrees, e.g. 1,8 (vLLM: 1 or tp x dp).")] = None,
    kv_dtype: Annotated[list[str] | None, typer.Option("--kv-dtype", help="KV formats.")] = None,
    context: Annotated[list[str] | None, typer.Option(
        "--context", "-c", help="Contexts: 8k,32k or a range 1k:128k:x2.")] = None,
    batch: Annotated[list[str] | None, typer.Option(
        "--batch", help="Batch sizes: 1,8,64 or a range 1:256:+8.")] = None,
    engine: Annotated[str, typer.Option("--engine")] = "vllm",
    weight_dtype: Annotated[str | None, typer.Option("--weight-dtype")] = None,
    price: Annotated[float | None, typer.Option("--price", help="USD per GPU-hour.")] = None,
    request: Annotated[str | None, typer.Option(
        "--request", help="PROMPT:OUTPUT tokens (e.g. 1500:200) for cost_per_request_usd.")] = None,
    where: Annotated[list[str] | None, typer.Option(
        "--where", help="Filter: COLUMN OP NUMBER, e.g. 'tpot_ms <= 50'; repeatable (and).")] = None,
    objective: Annotated[str | None, typer.Option(
        "--objective", help="Rank fitting rows: cost_per_mtok, throughput, throughput_per_gpu, "
        "gpus, tpot, ttft.")] = None,
    top: Annotated[int | None, typer.Option("--top", help="Keep the first N rows.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="csv | parquet | json | md")] = "csv",
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write to FILE.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --output.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Allow grids over 10 million rows.")] = False,
    assume_standard_attention: AssumeStandard = False,
    allow_long_max_model_len: AllowLong = False,
) -> None:
    """Evaluate every combination; print or write the table. With --dp, batch and
    max_concurrency are per DP rank; sequences, gpus, tokens/s and costs the deployment's."""
    from ..planning.sweep import Grid, check
    from ..report.frames import FORMATS, write
    from ..report.sweep_table import apply_where, parse_where, rank
    from .axis import parse_axis

    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; use {', '.join(FORMATS)}", field="--format")
    if top is not None and top < 1:
        raise InputError(f"must be positive, got {top}", field="--top")
    for expr in where or []:
        parse_where(expr)  # refuse a bad filter before any work
    if output:  # refuse an existing file (or a device) before any work
        from pathlib import Path

        from ..report.frames import require_pyarrow
        from ..report.outfile import refuse_existing

        refuse_existing(Path(output), force)
        if fmt == "parquet":
            require_pyarrow()
    grid = Grid(models=models, gpus=_split(gpu, [], "--gpu"), tps=_ints(tp, "1", "--tp"),
                pps=_ints(pp, "1", "--pp"), dps=_ints(dp, "1", "--dp"),
                eps=_ints(ep, "1", "--ep"), kv_dtypes=_split(kv_dtype, ["auto"], "--kv-dtype"),
                contexts=parse_axis(",".join(context) if context else "8k", "--context"),
                batches=_ints(batch, "1", "--batch"), engine=engine, weight_dtype=weight_dtype,
                price=price, assume_standard_attention=assume_standard_attention,
                allow_long_max_model_len=allow_long_max_model_len)
    if request is not None:
        from dataclasses import replace

        prompt, sep, out = request.partition(":")
        if not sep:
            raise InputError(f"expected PROMPT:OUTPUT tokens, got {request!r}", field="--request")
        pair = (parse_axis(prompt, "--request")[0], parse_axis(out, "--request")[0])
        grid = replace(grid, request=pair)
    check(grid, yes)
    if assume_standard_attention:  # the assumption is stated for each model it applies to
        from ..loaders.hf_config import ASSUME_FLAG
        from ..loaders.resolve import load_model

        for name in grid.models:
            for a in load_model(name, assume_standard_attention=True).assumptions:
                if a.startswith(ASSUME_FLAG):
                    say(f"kvplan: note: {name}: {a}")
    from ..report.sweep_table import sweep as run_sweep

    if grid.rows >= 100_000:
        from rich.progress import Progress

        from .render import console_stderr

        with Progress(console=console_stderr(), transient=True) as bar:
            task = bar.add_task(f"{grid.rows:,} rows", total=grid.rows)
            df = run_sweep(grid, progress=lambda n: bar.advance(task, n))
    else:
        df = run_sweep(grid)
    df = rank(apply_where(df, where or []), objective, top)
    text = write(df, fmt, output, force)
    if text is not None:
        typer.echo(text, nl=False)
    else:
        say(f"kvplan: wrote {len(df):,} rows to {output}")

