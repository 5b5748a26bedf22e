"""GPU YAML (``hardware_specs/*.yaml``) -> ``GpuSpec``. A pydantic schema with
``extra="forbid"`` validates every file; errors name the file, line and field.

Byte, FLOP/s and bandwidth figures are strict positive integers; the marketed label and the
driver-reported total are both required because budgets start from the latter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

from ..core.errors import GpuSpecError, KvplanError
from ..core.formats import parse_format
from ..core.gpu import ARCHITECTURES, FLOP_DTYPES, GpuSpec
from .yaml_file import read_yaml, validation_error

PositiveInt = Annotated[StrictInt, Field(gt=0)]
#: bounds stated before any arithmetic (a 10^400 figure would overflow a float later)
Bytes = Annotated[StrictInt, Field(gt=0, le=2**50)]  # up to 1 PiB
Rate = Annotated[StrictInt, Field(gt=0, le=10**18)]  # bytes or FLOPs per second
#: a finite number (not a YAML boolean, not a string)
Real = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Text = Annotated[str, Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Memory(_Strict):
    kind: Text
    marketed_label: Text
    marketed_bytes: Bytes
    driver_total_bytes: Bytes
    driver_total_basis: Literal["reported", "estimated"]
    driver_total_note: Text
    #: nvidia-smi memory.total, where known
    smi_total_mib: Annotated[StrictInt, Field(gt=0, le=2**30)] | None = None

    @model_validator(mode="after")
    def _driver_not_above_physical(self) -> Memory:
        if self.driver_total_bytes > self.marketed_bytes:
            raise ValueError(f"driver_total_bytes ({self.driver_total_bytes:,}) exceeds "
                             f"marketed_bytes ({self.marketed_bytes:,}); the driver reports "
                             "a little less than the physical memory")
        return self


class Interconnect(_Strict):
    kind: Text
    bandwidth_bytes_per_s_per_direction: Rate
    note: str = ""
    #: GPUs one NVLink domain joins at that bandwidth (an HGX board: 8; GB200 NVL72: 72)
    domain_gpus: Annotated[StrictInt, Field(gt=0, le=100_000)] | None = None


class ScaleOut(_Strict):
    """The link between NVLink domains, per GPU (its NIC): collectives over more GPUs than a
    domain cross it."""

    kind: Text
    bandwidth_bytes_per_s_per_direction: Rate
    note: str = ""
    source: Text


class Pcie(_Strict):
    generation: Annotated[StrictInt, Field(ge=1, le=7)]
    bandwidth_bytes_per_s_per_direction: Rate


Fraction01 = Annotated[Real, Field(gt=0, le=1)]


class EfficiencyYaml(_Strict):
    """Achieved fractions of the datasheet figures for this GPU (optional; kvplan's defaults
    otherwise, and a calibrated run replaces them)."""

    hbm_bandwidth: Fraction01 | None = None
    flops: Fraction01 | None = None
    interconnect: Fraction01 | None = None
    allreduce_latency_us: Annotated[Real, Field(gt=0, le=1e6)] | None = None
    source: Text


class Sources(_Strict):
    memory: Text
    driver_total: Text
    bandwidth: Text
    flops: Text
    interconnect: Text
    pcie: Text
    tdp: Text
    price: Text


class GpuFile(_Strict):
    name: Text
    vendor: Literal["nvidia", "amd", "intel"]
    architecture: Literal[ARCHITECTURES]  # type: ignore[valid-type]
    #: CUDA compute capability ("9.0") or AMD gfx target ("gfx942"); engines pick kernels by it.
    #: Optional except on Blackwell, whose datacenter (10.x) and consumer (12.x) parts differ.
    compute_capability: Annotated[str, Field(pattern=r"^(\d{1,2}\.\d{1,2}|gfx[0-9a-f]{3,4})$")] | None = None
    aliases: list[Text] = []
    memory: Memory
    hbm_bandwidth_bytes_per_s: Rate
    dense_flops_per_s: dict[Literal[FLOP_DTYPES], Rate]  # type: ignore[valid-type]
    native_kv_formats: list[Text]
    interconnect: Interconnect
    scale_out: ScaleOut | None = None
    pcie: Pcie
    tdp_watts: Annotated[StrictInt, Field(gt=0, le=100_000)]
    price_usd_per_gpu_hour: Annotated[Real, Field(gt=0, le=10_000)]
    price_note: Text
    price_source: Text | None = None  # who lists the price (shown beside it)
    price_as_of: Text | None = None  # when it was read
    #: the accumulate precision of each dense_flops_per_s figure (default: fp32 for floating
    #: point, int32 for int8: the full-rate datacenter figures)
    flops_accumulate: dict[Literal[FLOP_DTYPES], Literal["fp32", "fp16", "int32"]] = {}  # type: ignore[valid-type]
    sources: Sources
    efficiency: EfficiencyYaml | None = None
    #: the GPU (same silicon) whose serving calibrations this one uses, with why
    calibration_from: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{0,40}$")] | None = None
    calibration_from_note: Text | None = None

    @model_validator(mode="after")
    def _checks(self) -> GpuFile:
        if "bf16" not in self.dense_flops_per_s:
            raise ValueError("dense_flops_per_s needs a bf16 entry")
        if self.architecture == "blackwell" and self.compute_capability is None:
            raise ValueError("compute_capability is needed on Blackwell (10.0 datacenter, 12.0 "
                             "GeForce): the engines choose kernels by it")
        if (self.calibration_from is None) != (self.calibration_from_note is None):
            raise ValueError("calibration_from and calibration_from_note come together")
        extra = set(self.flops_accumulate) - set(self.dense_flops_per_s)
        if extra:
            raise ValueError(f"flops_accumulate names {', '.join(sorted(extra))}, which "
                             "dense_flops_per_s does not list")
        for name in self.native_kv_formats:
            try:
                parse_format(name)
            except KvplanError as e:
                raise ValueError(f"native_kv_formats: {e.detail}") from None
        return self


#: the compute capability of an architecture with one (a GPU YAML may say its own)
DEFAULT_CAPABILITY = {"ampere": "8.0", "ada": "8.9", "hopper": "9.0", "blackwell": "",
                      "cdna2": "gfx90a", "cdna3": "gfx942", "cdna4": "gfx950"}


def gpu_from_file(path: Path) -> GpuSpec:
    data, locate = read_yaml(path, GpuSpecError)
    if not isinstance(data, dict):
        raise GpuSpecError("expected a mapping of GPU fields at the top level", source=str(path))
    try:
        f = GpuFile.model_validate(data)
    except ValidationError as e:
        raise validation_error(e, path, locate, GpuSpecError) from None
    m = f.memory
    return GpuSpec(
        key=path.stem, name=f.name, vendor=f.vendor, architecture=f.architecture,
        compute_capability=f.compute_capability or DEFAULT_CAPABILITY[f.architecture],
        aliases=tuple(f.aliases), memory_kind=m.kind, memory_marketed_label=m.marketed_label,
        memory_marketed_bytes=m.marketed_bytes, memory_driver_total_bytes=m.driver_total_bytes,
        memory_driver_total_basis=m.driver_total_basis, driver_total_note=m.driver_total_note,
        memory_smi_total_mib=m.smi_total_mib,
        hbm_bandwidth_bytes_per_s=f.hbm_bandwidth_bytes_per_s,
        dense_flops_per_s=dict(f.dense_flops_per_s),
        native_kv_formats=tuple(parse_format(n).name for n in f.native_kv_formats),
        interconnect_kind=f.interconnect.kind,
        interconnect_bandwidth_bytes_per_s_per_direction=(
            f.interconnect.bandwidth_bytes_per_s_per_direction),
        nvlink_domain_gpus=f.interconnect.domain_gpus,
        scale_out_bandwidth_bytes_per_s_per_direction=(
            f.scale_out.bandwidth_bytes_per_s_per_direction if f.scale_out else None),
        scale_out_kind=f.scale_out.kind if f.scale_out else "",
        pcie_generation=f.pcie.generation,
        pcie_bandwidth_bytes_per_s_per_direction=f.pcie.bandwidth_bytes_per_s_per_direction,
        tdp_watts=f.tdp_watts, price_usd_per_gpu_hour=f.price_usd_per_gpu_hour,
        price_note=f.price_note, sources=f.sources.model_dump(), source=str(path),
        price_source=f.price_source or f.price_note, price_as_of=f.price_as_of or "",
        flops_accumulate={d: f.flops_accumulate.get(d, "int32" if d == "int8" else "fp32")  # type: ignore[call-overload]
                          for d in f.dense_flops_per_s},
        efficiency={k: v for k, v in (f.efficiency.model_dump() if f.efficiency else {}).items()
                    if v is not None},
        calibration_from=f.calibration_from or "",
        calibration_from_note=f.calibration_from_note or "",
    )
