"""The core: engine-agnostic pure math and types (units, dtypes, KV formats, layer kinds, the
model, token counts, parallel splits, weights, the memory budget's terms, the roofline, workloads,
the GPU and scenario specs, errors). No I/O, no environment, no printing; imports nothing of
kvplan outside this folder and no pydantic, yaml, typer, rich, torch, pandas or huggingface_hub.
"""
