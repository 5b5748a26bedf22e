"""``kvplan gpus``: the known GPU specs (built in plus ``KVPLAN_HARDWARE_PATH``)."""

# No `from __future__ import annotations` (typer evaluates annotation strings at start-up).

from typing import Annotated

import typer

from ..core.gpu import GpuSpec


def gpu_record(g: GpuSpec) -> dict:
    """The public JSON of one GPU spec (names are stable)."""
    return {
        "key": g.key, "name": g.name, "vendor": g.vendor, "architecture": g.architecture,
        "aliases": list(g.aliases), "memory_kind": g.memory_kind,
        "memory_marketed_label": g.memory_marketed_label,
        "memory_marketed_bytes": g.memory_marketed_bytes,
        "memory_driver_total_bytes": g.memory_driver_total_bytes,
        "memory_driver_total_basis": g.memory_driver_total_basis,
        "memory_smi_total_mib": g.memory_smi_total_mib,
        "hbm_bandwidth_bytes_per_s": g.hbm_bandwidth_bytes_per_s,
        "dense_flops_per_s": dict(g.dense_flops_per_s),
        "native_kv_formats": list(g.native_kv_formats),
        "interconnect_kind": g.interconnect_kind,
        "interconnect_bandwidth_bytes_per_s_per_direction":
            g.interconnect_bandwidth_bytes_per_s_per_direction,
        "pcie_generation": g.pcie_generation,
        "pcie_bandwidth_bytes_per_s_per_direction": g.pcie_bandwidth_bytes_per_s_per_direction,
        "dense_flops_accumulate": dict(g.flops_accumulate),
        "tdp_watts": g.tdp_watts, "price_usd_per_gpu_hour": g.price_usd_per_gpu_hour,
        "price_source": g.price_source, "price_as_of": g.price_as_of,
        "source": g.source,
    }


def gpus(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column, however wide.")] = False,
) -> None:
    """List the known GPUs (use a key or alias as --gpu, or pass your own YAML file)."""
    from ..core.units import GiB
    from ..loaders.hardware import all_gpus
    from ..report import strict_json

    specs = all_gpus()
    if as_json:
        typer.echo(strict_json.dumps([gpu_record(g) for g in specs], indent=2))
        return
    from .render import console
    from .tables import Col, print_table

    cols = [Col("key", "key", "left"), Col("arch", "num", "left", True, 1),
            Col("marketed", optional=True, rank=0), Col("driver total"), Col("HBM TB/s"),
            Col("bf16 TFLOP/s"), Col("fp8 TFLOP/s", optional=True, rank=3),
            Col("fp4 TFLOP/s", optional=True, rank=2), Col("KV natively", "num", "left", True, 4),
            Col("link GB/s/dir", optional=True, rank=1), Col("TDP W", optional=True, rank=0),
            Col("$/GPU-h")]

    def tflops(g: GpuSpec, dtype: str) -> str:
        v = g.dense_flops_per_s.get(dtype)
        return f"{v / 1e12:,.0f}" if v else "-"

    rows = []
    for g in specs:
        natives = sorted({f.split("_")[0] for f in g.native_kv_formats
                          if f not in ("fp32", "fp16", "bf16")})
        rows.append([
            g.key, g.architecture, g.memory_marketed_label,
            f"{g.memory_driver_total_bytes / GiB:.2f} GiB" + ("*" if g.memory_driver_total_basis
                                                            == "estimated" else ""),
            f"{g.hbm_bandwidth_bytes_per_s / 1e12:.2f}", tflops(g, "bf16"), tflops(g, "fp8"),
            tflops(g, "fp4"), ", ".join(natives) or "16-bit only",
            f"{g.interconnect_bandwidth_bytes_per_s_per_direction / 1e9:,.0f}",
            str(g.tdp_watts), f"{g.price_usd_per_gpu_hour:.2f}"])
    out = console()
    shown = print_table(out, cols, rows, wide=wide, title=f"{len(specs)} GPUs (memory: marketed "
                        "label, and the total the driver reports to programs, which budgets "
                        "start from)")
    if len(shown) < len(cols):
        out.print("more columns: --wide (or a wider terminal); every figure: --json", style="dim")
    out.print("$/GPU-h: on-demand list prices (a default; override with --price or the "
              "scenario's price): " + "; ".join(
                  f"{g.key} {g.price_source}, {g.price_as_of}" for g in specs), style="dim")
    fp16_acc = [g.key for g in specs if "fp16" in g.flops_accumulate.values()]
    out.print("* estimated driver total (no published measurement found; see the YAML's "
              "driver_total_note). Dense FLOP/s (no sparsity), every figure at FP32 accumulate "
              "(INT8 at INT32)" + (f" except where --json dense_flops_accumulate says fp16 "
                                   f"({', '.join(fp16_acc)})" if fp16_acc else "")
              + ". TB/s, GB/s and TFLOP/s are decimal (10^12, 10^9); GiB is 2^30.", style="dim")
