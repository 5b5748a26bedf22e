"""Footprint cases: allocate a model's cache exactly as the engine lays it out, measure the
bytes really taken, and put kvplan's prediction beside it (they must be equal to the byte).

A case: model, KV format (bf16 or fp8), TP degree (rank 0 is measured), paged block size and
count, and the number of sequences whose recurrent states are allocated. Measured: on CPU the
tensors' storage bytes; on CUDA the change in ``torch.cuda.memory_allocated()`` (and, apart,
in reserved memory: the allocator's rounding).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .shapes import attention_shapes, held_blocks_simulated, state_shapes

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32",
                "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


@dataclass(frozen=True)
class FootprintCase:
    id: str
    model: str
    kv_dtype: str = "auto"
    tp: int = 1
    block_size_tokens: int = 16
    num_blocks: int = 64
    num_seqs: int = 4
    context_tokens: int | None = None  # set: allocate the blocks one sequence holds at n


QUICK_CASES = (
    FootprintCase("full-gqa-bf16", "llama-3-8b"),
    FootprintCase("full-gqa-fp8", "llama-3-8b", kv_dtype="fp8"),
    FootprintCase("gqa-tp16-replicated", "llama-3-8b", tp=16),
    FootprintCase("mha-fp16", "llama-2-7b", num_blocks=8),
    FootprintCase("sliding-window-8k", "mistral-7b-v0.1", context_tokens=8192, num_blocks=0),
    FootprintCase("mla-latent", "deepseek-v2-lite"),
    FootprintCase("mla-latent-tp4", "deepseek-v2-lite", tp=4),
    FootprintCase("mamba1-state", "mamba-130m", num_seqs=8),
    FootprintCase("mamba2-state", "mamba2-2.7b", num_seqs=2),
    FootprintCase("hybrid-jamba", "jamba-v0.1", num_blocks=16, num_seqs=2),
    FootprintCase("hybrid-gated-deltanet", "qwen3-next-80b-a3b-instruct", num_blocks=16, num_seqs=2),
)


def prediction(case: FootprintCase) -> int:
    """kvplan's bytes for the case (the same function ``kvplan validate`` re-runs)."""
    from kvplan.planning.validate import footprint_prediction

    return footprint_prediction(asdict(case))


def _dtypes(m, fp, torch):
    """(KV, conv state, SSM state) torch dtypes under vLLM's rules for this model."""
    from kvplan.engines import get_engine

    engine = get_engine("vllm")
    declared: tuple = ()
    for c in (c for layer in fp.layer_costs for c in layer):
        declared = getattr(c.spec, "ssm_dtypes", ()) or getattr(c.spec, "state_dtypes", ()) or declared
    conv, ssm = engine.state_dtypes(m.model_type, m.dtype, declared)
    return (getattr(torch, TORCH_DTYPES[fp.formats.k.name]), getattr(torch, TORCH_DTYPES[conv]),
            getattr(torch, TORCH_DTYPES[ssm]))


def measure(case: FootprintCase, device: str) -> dict:
    """Allocate the case's tensors on ``device`` and return the record (prediction included)."""
    import torch

    from kvplan.loaders.resolve import load_model
    from kvplan.planning.footprint import kv_footprint

    m = load_model(case.model)
    fp = kv_footprint(m, (case.block_size_tokens,), kv_dtype=case.kv_dtype, tp=case.tp,
                      block_size_tokens=case.block_size_tokens, engine="vllm")
    kv_dtype, conv_dtype, ssm_dtype = _dtypes(m, fp, torch)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        alloc0, reserved0 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    tensors = []
    for layer in m.layers:
        for spec in layer:
            if spec.kind in ("mamba", "linear_attention"):
                for role, shape in state_shapes(spec, case.tp, case.num_seqs):
                    dtype = conv_dtype if role == "conv" else ssm_dtype
                    tensors.append(torch.empty(shape, dtype=dtype, device=device))
                continue
            blocks = case.num_blocks
            if case.context_tokens:
                kind = {"sliding_window": "sliding", "chunked_local": "chunked"}.get(spec.kind, "full")
                window = getattr(spec, "window_tokens", None) or getattr(spec, "chunk_tokens", None)
                blocks = held_blocks_simulated(kind, window, case.context_tokens,
                                               case.block_size_tokens)
            for _, shape in attention_shapes(spec, case.tp, blocks, case.block_size_tokens):
                tensors.append(torch.empty(shape, dtype=kv_dtype, device=device))
    if cuda:
        torch.cuda.synchronize()
        measured = torch.cuda.memory_allocated() - alloc0
        reserved = torch.cuda.memory_reserved() - reserved0
    else:
        measured = sum(t.untyped_storage().nbytes() for t in tensors)
        reserved = None
    record = {"kind": "footprint", "id": case.id, "inputs": asdict(case),
              "predicted_bytes": prediction(case), "measured_bytes": int(measured),
              "reserved_bytes": reserved, "tensors": len(tensors), "tolerance": 0}
    del tensors
    return record
