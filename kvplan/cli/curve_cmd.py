"""``kvplan curve MODEL --gpu GPU --x ... --y ...``: series over context, batch or position."""

# No `from __future__ import annotations` (typer evaluates annotation strings at start-up).

from typing import Annotated

import typer

from ..core.errors import InputError
from .emit import emit
from .options import AllowLong, AssumeStandard, comma_list

EXAMPLES = """\b
Examples:
  kvplan curve llama-3-70b --gpu h200 --weight-dtype fp8 --kv-dtype bf16,fp8 --x context --y concurrency
  kvplan curve llama-3-70b --gpu h100,h200,b200 --weight-dtype fp8 --kv-dtype fp8 --x batch --y tpot -c 32k
  kvplan curve llama-3-70b --gpu h100 --tp 4 --kv-dtype fp8 --x position --y cost --plot cost.png
  kvplan curve deepseek-v3 --gpu h200 --dp 8 --ep 8 --x batch --y cost -c 32k --points 1:64:x2"""


def curve(
    model: Annotated[str, typer.Argument(help="Built-in name, path or Hub id.")],
    gpu: Annotated[list[str], typer.Option("--gpu", help="GPU(s), comma list or repeated: one "
                                           "series each.")],
    x: Annotated[str, typer.Option("--x", help="context | batch | position")] = "context",
    y: Annotated[str, typer.Option("--y", help="concurrency | throughput | tpot | cost")] = "concurrency",
    kv_dtype: Annotated[list[str] | None, typer.Option(
        "--kv-dtype", help="KV format(s), comma list or repeated: one series each.")] = None,
    weight_dtype: Annotated[str | None, typer.Option("--weight-dtype")] = None,
    engine: Annotated[str, typer.Option("--engine")] = "vllm",
    tp: Annotated[int, typer.Option("--tp")] = 1,
    pp: Annotated[int, typer.Option("--pp")] = 1,
    dp: Annotated[int, typer.Option("--dp", help="Attention data-parallel ranks (each --tp "
                                    "GPUs, its own sequences and KV pool); batch and "
                                    "concurrency are then per DP rank.")] = 1,
    ep: Annotated[int, typer.Option("--ep", help="Expert-parallel degree: GPUs of a stage the "
                                    "routed experts are spread over (vLLM: 1 or tp x dp).")] = 1,
    points: Annotated[str | None, typer.Option(
        "--points", help="x values: comma list or range (1k:128k:x2, 1:256:+8). Default: "
        "1k..128k doubling (context/position), 1..256 doubling (batch).")] = None,
    context: Annotated[str, typer.Option("--context", "-c", help="Context for --x batch; the "
                                         "max model length otherwise (default: the last x).")] = "8k",
    batch: Annotated[int | None, typer.Option(
        "--batch", help="Target batch (per DP rank) for --x context/position (default: "
        "max_num_seqs).")] = None,
    price: Annotated[float | None, typer.Option(
        "--price", help="USD per GPU-hour (default: the GPU spec's).")] = None,
    hbm_efficiency: Annotated[float | None, typer.Option(
        "--hbm-efficiency", help="Achieved fraction of HBM bandwidth (default 0.8).")] = None,
    flops_efficiency: Annotated[float | None, typer.Option(
        "--flops-efficiency", help="Achieved fraction of dense peak FLOP/s (default 0.6).")] = None,
    csv: Annotated[bool, typer.Option("--csv", help="Print CSV.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    plot: Annotated[str | None, typer.Option("--plot", help="Write a plot (.png or .svg; "
                                             "needs the plot extra: matplotlib).")] = None,
    assume_standard_attention: AssumeStandard = False,
    allow_long_max_model_len: AllowLong = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --plot file.")] = False,
) -> None:
    """Concurrency, throughput, TPOT or $/token along context, batch or position; several
    --kv-dtype and/or --gpu values give several series. With --dp N the batch and
    concurrency are per DP rank, throughput and $/token the whole deployment's."""
    from ..planning.curve import X_AXES, Y_AXES
    from ..planning.deployment import build_series
    from .axis import parse_axis

    if x not in X_AXES:
        raise InputError(f"unknown axis {x!r}; use {', '.join(X_AXES)}", field="--x")
    if y not in Y_AXES:
        raise InputError(f"unknown axis {y!r}; use {', '.join(Y_AXES)}", field="--y")
    import math

    for degree, name in ((dp, "--dp"), (ep, "--ep")):
        if degree < 1:
            raise InputError(f"must be a positive integer, got {degree}", field=name)
    if batch is not None and batch < 1:
        raise InputError(f"must be positive, got {batch}", field="--batch")
    if price is not None and not (math.isfinite(price) and price > 0):
        raise InputError(f"must be positive, got {price}", field="--price")
    for value, flag in ((hbm_efficiency, "--hbm-efficiency"), (flops_efficiency, "--flops-efficiency")):
        if value is not None and not 0 < value <= 1:
            raise InputError(f"must be in (0, 1], got {value}", field=flag)
    default = "1:256:x2" if x == "batch" else "1k:128k:x2"
    xs = parse_axis(points or default, "--points", tokens=x != "batch")
    gpus = comma_list(gpu, "--gpu")
    kvs = comma_list(kv_dtype, "--kv-dtype") or ["auto"]
    if plot:  # an existing file (or a device) is refused before any work
        from pathlib import Path

        from ..report.outfile import refuse_existing

        refuse_existing(Path(plot), force, "--plot")
    result = build_series(model, gpus=gpus, kv_dtypes=kvs, weight_dtype=weight_dtype,
                          engine=engine, tp=tp, pp=pp, dp=dp, ep=ep, x=x, y=y, xs=xs,
                          context=context,
                          batch=batch, price=price, hbm_efficiency=hbm_efficiency,
                          flops_efficiency=flops_efficiency,
                          assume_standard_attention=assume_standard_attention,
                          allow_long_max_model_len=allow_long_max_model_len)
    if plot:
        from ..report.curve_plot import plot_series

        plot_series(result.series, plot, title=result.title, force=force)
    if csv:
        from ..report.curve_records import to_csv

        typer.echo(to_csv(result.series), nl=False)
        return

    def render() -> None:
        from .render_curve import render_curve

        render_curve(result, plot)

    from ..report.curve_records import to_records

    emit(result.warnings, as_json, lambda: to_records(result), render)
