"""``kvplan size MODEL``: the KV footprint of one sequence, per layer kind and per GPU."""

# No `from __future__ import annotations` here: typer would eval every annotation string at
# start-up (about 5 ms); real annotations cost nothing.

from typing import Annotated

import typer

from ..loaders.resolve import load_model
from ..planning.footprint import kv_footprint
from ..report.size_record import size_record
from .emit import emit
from .options import AssumeStandard, Refresh, Revision, Token, parse_contexts, parse_state_dtype

DEFAULT_CONTEXTS = (4096, 32768, 131072)

EXAMPLES = """\b
Examples:
  kvplan size llama-3-70b
  kvplan size deepseek-v3 --tp 8 -c 128k
  kvplan size gemma-3-27b-it --kv-dtype fp8 -c 8k,128k --json
  kvplan size gpt-oss-20b --engine llama.cpp --k-dtype q8_0 --v-dtype q4_0
  kvplan size ./my-model/config.json --engine hf@4
  kvplan size Qwen/Qwen3-235B-A22B -c 32k      # fetched from the Hub, then cached"""


def size(
    model: Annotated[str, typer.Argument(help="Built-in name (see `kvplan models`), a path "
                                         "to a config.json or a folder holding one, or a Hub "
                                         "id org/name[@revision].")],
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="KV storage format for K and V: "
                                          "auto (model dtype), bf16, fp8, int4:group=64, kivi2, "
                                          "nvfp4, q8_0, ... (see `kvplan formats`).")] = "auto",
    k_dtype: Annotated[str | None, typer.Option("--k-dtype", help="Format for K only.")] = None,
    v_dtype: Annotated[str | None, typer.Option("--v-dtype", help="Format for V only.")] = None,
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline-parallel degree.")] = 1,
    dcp: Annotated[int, typer.Option("--dcp", help="Decode context parallel (vLLM "
                                     "--decode-context-parallel-size): each sequence's tokens "
                                     "split over this many of the --tp GPUs.")] = 1,
    context: Annotated[list[str] | None, typer.Option(
        "--context", "-c", help="Context length(s): 4096, 4k, 32k, 128k, 1M (k = 1024); "
        "repeatable or comma-separated. Default 4k,32k,128k.")] = None,
    block_size: Annotated[int | None, typer.Option(
        "--block-size", help="Paged-cache block size in tokens (1 = no rounding). "
        "Default: the engine's (vllm 16, 64 from vllm@0.34, sglang 1, llama.cpp 256-cell "
        "padding).")] = None,
    engine: Annotated[str, typer.Option("--engine", help="Cache layout: vllm (default), sglang, "
                                        "hf (transformers 5; hf@4 for 4.x) or llama.cpp; "
                                        "NAME@VERSION for older rules (vllm@0.11).")] = "vllm",
    state_dtype: Annotated[str | None, typer.Option(
        "--state-dtype", help="Override the dtype of SSM / linear-attention states.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    revision: Revision = None,
    token: Token = None,
    refresh: Refresh = False,
    assume_standard_attention: AssumeStandard = False,
) -> None:
    """How much KV cache one sequence of MODEL needs, per layer kind, per context, per GPU."""
    contexts = parse_contexts(context, DEFAULT_CONTEXTS)
    state_dtype = parse_state_dtype(state_dtype)
    m = load_model(model, revision=revision, token=token, refresh=refresh,
                   assume_standard_attention=assume_standard_attention)
    fp = kv_footprint(m, contexts, kv_dtype=kv_dtype, k_dtype=k_dtype, v_dtype=v_dtype, tp=tp,
                      pp=pp, block_size_tokens=block_size, engine=engine, state_dtype=state_dtype,
                      dcp=dcp)
    def render() -> None:
        from .render import render_size

        render_size(fp)

    emit(m.warnings, as_json, lambda: size_record(fp), render)
