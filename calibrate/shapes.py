"""The cache tensors an engine allocates, written from vLLM's shape rules (read from
``get_kv_cache_shape`` / ``MambaStateShapeCalculator``, main as of late 2026) independently of
kvplan's byte formulas, so that measuring them checks kvplan.

- full / sliding / chunked attention: ``[2, num_blocks, block, kv_heads_rank, head_dim]``
  (K and V apart when their head dims differ), ``kv_heads_rank = max(1, kv_heads // tp)``;
- MLA: ``[num_blocks, block, kv_lora_rank + qk_rope_head_dim]`` on every rank;
- Mamba-1: conv ``(d_inner / tp, d_conv - 1)``, ssm ``(d_inner / tp, d_state)`` per sequence;
- Mamba-2: conv ``(conv_dim / tp, d_conv - 1)`` with ``conv_dim = d_inner + 2 x groups x
  d_state`` (groups replicated when they do not divide), ssm ``(heads / tp, head_dim, d_state)``;
- gated DeltaNet: conv ``((2 k_heads k_dim + v_heads v_dim) / tp, kernel - 1)``, ssm
  ``(v_heads / tp, v_dim, k_dim)``.
"""

from __future__ import annotations

from kvplan import ChunkedLocal, FullAttention, LinearAttention, Mamba, MultiHeadLatent, SlidingWindow


def _per_rank(total: int, tp: int) -> int:
    return max(1, total // tp)


def attention_shapes(spec, tp: int, num_blocks: int, block: int) -> list[tuple[str, tuple[int, ...]]]:
    """(role, shape) of one attention layer's paged cache on one rank."""
    if isinstance(spec, MultiHeadLatent):
        return [("latent", (num_blocks, block, spec.kv_lora_rank + spec.qk_rope_head_dim))]
    assert isinstance(spec, (FullAttention, SlidingWindow, ChunkedLocal))
    heads = _per_rank(spec.num_kv_heads, tp)
    if spec.head_dim_k == spec.head_dim_v:
        return [("kv", (2, num_blocks, block, heads, spec.head_dim_k))]
    return [("k", (num_blocks, block, heads, spec.head_dim_k)),
            ("v", (num_blocks, block, heads, spec.head_dim_v))]


def state_shapes(spec, tp: int, seqs: int) -> list[tuple[str, tuple[int, ...]]]:
    """(role, shape) of one recurrent layer's states for ``seqs`` sequences on one rank."""
    if isinstance(spec, Mamba) and spec.version == 1:
        d = spec.d_inner // tp
        return [("conv", (seqs, d, spec.d_conv - 1)), ("ssm", (seqs, d, spec.d_state))]
    if isinstance(spec, Mamba):
        # vLLM extra_groups_for_head_shards: groups that do not divide are replicated up to tp
        groups = spec.n_groups // tp if spec.n_groups % tp == 0 else 1
        conv_dim = spec.d_inner // tp + 2 * groups * spec.d_state
        return [("conv", (seqs, conv_dim, spec.d_conv - 1)),
                ("ssm", (seqs, spec.num_heads // tp, spec.head_dim, spec.d_state))]
    assert isinstance(spec, LinearAttention)
    conv_dim = (2 * spec.num_k_heads * spec.head_k_dim + spec.num_v_heads * spec.head_v_dim) // tp
    return [("conv", (seqs, conv_dim, spec.conv_kernel - 1)),
            ("ssm", (seqs, spec.num_v_heads // tp, spec.head_v_dim, spec.head_k_dim))]


def held_blocks_simulated(kind: str, window: int | None, n: int, block: int) -> int:
    """Blocks one sequence of n tokens needs at its peak, by stepping through every length
    (vLLM: a sliding layer frees blocks wholly before token m - (W - 1); a chunked layer keeps
    the current chunk). A brute-force check of kvplan's closed forms."""
    if kind == "full" or window is None:
        return -(-n // block)
    best = 0
    for m in range(1, n + 1):
        start = max(0, m - (window - 1)) if kind == "sliding" else (m // window) * window
        held = -(-m // block) - start // block if m > start else 0
        best = max(best, held)
    return best
