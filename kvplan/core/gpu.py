"""The GPU description the budget and perf stages work on. Pure: built by
``kvplan.loaders.gpu_yaml`` from one ``hardware_specs/*.yaml`` file.

Memory has two figures. ``memory_marketed_bytes`` is the physical capacity behind the
datasheet label (an "80 GB" H100 carries 80 GiB of HBM3). ``memory_driver_total_bytes`` is the
total that programs see (``cudaMemGetInfo`` / ``torch.cuda.mem_get_info()[1]``), a little less
because the driver keeps some: vLLM multiplies *this* figure by ``gpu_memory_utilization``,
so every budget starts from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .formats import ANY_GPU, KvFormat


def sm_major(capability: str | None) -> int | None:
    """A CUDA compute capability's major version ("10.0" -> 10); None for no GPU or an AMD
    target ("gfx942")."""
    head = (capability or "").split(".", 1)[0]
    return int(head) if head.isdigit() else None

ARCHITECTURES = ("ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3", "cdna4")
FLOP_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp6", "fp4")


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    key: str
    name: str
    vendor: str
    architecture: str
    memory_kind: str
    memory_marketed_label: str
    memory_marketed_bytes: int
    memory_driver_total_bytes: int
    memory_driver_total_basis: str  # "reported" (a cited log / smi output) or "estimated"
    hbm_bandwidth_bytes_per_s: int
    dense_flops_per_s: dict[str, int] = field(hash=False)
    native_kv_formats: tuple[str, ...]
    interconnect_kind: str
    interconnect_bandwidth_bytes_per_s_per_direction: int
    pcie_generation: int
    pcie_bandwidth_bytes_per_s_per_direction: int
    tdp_watts: int
    price_usd_per_gpu_hour: float
    aliases: tuple[str, ...] = ()
    memory_smi_total_mib: int | None = None  # nvidia-smi's memory.total (driver total + reserve)
    price_note: str = ""
    compute_capability: str = ""  # CUDA "major.minor" or AMD "gfx..." (kernel choice)
    price_source: str = ""  # who lists the price
    price_as_of: str = ""  # when it was read
    #: accumulate precision of each dense_flops_per_s figure (fp32, fp16 or int32)
    flops_accumulate: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    driver_total_note: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False)
    efficiency: dict[str, object] = field(default_factory=dict, hash=False)  # YAML overrides
    nvlink_domain_gpus: int | None = None  # GPUs the interconnect joins (None: not stated)
    #: per-GPU link between NVLink domains (None: not stated, wider groups are refused)
    scale_out_bandwidth_bytes_per_s_per_direction: int | None = None
    scale_out_kind: str = ""
    source: str = ""  # the file it was read from
    #: the GPU key (same silicon) whose serving calibrations this one uses, and why
    calibration_from: str = ""
    calibration_from_note: str = ""

    def runs_natively(self, fmt: KvFormat) -> bool:
        """True when this GPU computes on ``fmt`` without emulation. Formats that any GPU
        dequantises in its kernels (int8, int4 groups, KIVI) are native everywhere."""
        if fmt.native_archs in (ANY_GPU, ("llama.cpp",)):  # dequantised in-kernel anywhere
            return True
        if fmt.name == "fp8_ds_mla":  # fp8 e4m3 rows of FlashMLA sparse (SM90 / SM100 only)
            return self.architecture in fmt.native_archs and "fp8_e4m3" in self.native_kv_formats
        if fmt.name == "nvfp4_ds_mla":  # e2m1 latent + e4m3 RoPE and scales (SM100 only)
            return (self.architecture in fmt.native_archs and "nvfp4" in self.native_kv_formats
                    and "fp8_e4m3" in self.native_kv_formats)
        return fmt.name in self.native_kv_formats
