"""Multi-process cases (``torchrun --nproc-per-node N -m calibrate.distributed``, or
``run_spawned(N)``): each rank allocates its share of a TP-sharded KV cache and measures it
against kvplan's per-rank prediction (replication when KV heads < ranks), and the all-reduce
bus bandwidth of the TP communication model is timed. NCCL on CUDA, gloo on CPU."""

from __future__ import annotations

import os
import statistics
import time

from .footprint import FootprintCase, measure

TP_CASES = (("llama-3-8b", "gqa"), ("qwen2.5-7b-instruct", "gqa-4-kv-heads"),
            ("deepseek-v2-lite", "mla"))


def rank_main(rank: int, world: int, results, device: str = "cpu") -> None:
    import torch
    import torch.distributed as dist

    backend = "nccl" if device.startswith("cuda") else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world)
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    cases = []
    for model, label in TP_CASES:
        case = FootprintCase(f"tp{world}-{label}-rank{rank}", model, tp=world, num_blocks=16)
        cases.append(measure(case, device))
    # all-reduce bus bandwidth: 2 (n - 1) / n x message / time (the ring's bytes per rank)
    x = torch.rand(4 * 2**20, device=device)
    dist.all_reduce(x)
    times = []
    for _ in range(5):
        if backend == "nccl":
            torch.cuda.synchronize()
        t = time.perf_counter()
        dist.all_reduce(x)
        if backend == "nccl":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    seconds = statistics.median(times)
    msg = x.numel() * x.element_size()
    bus = 2 * (world - 1) / world * msg / seconds
    gathered = [None] * world
    dist.all_gather_object(gathered, cases)
    if rank == 0:
        results.put({"world_size": world, "backend": backend,
                     "cases": [c for per_rank in gathered for c in per_rank],
                     "allreduce": {"kind": "bandwidth", "id": f"allreduce-{backend}-{world}",
                                   "bytes": msg, "seconds": seconds, "bus_bytes_per_s": bus,
                                   "tolerance": None}})
    dist.destroy_process_group()


def _spawned(rank: int, world: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rank_main(rank, world, queue)


def run_spawned(world: int = 2) -> dict:
    """Run the CPU (gloo) cases in ``world`` local processes and return rank 0's record."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_spawned, args=(world, port, queue), nprocs=world, join=True,
                       start_method="spawn")
    return queue.get()


if __name__ == "__main__":  # torchrun entry point
    import json
    import queue as _queue

    q: _queue.Queue = _queue.Queue()
    rank_main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), q,
              "cuda" if os.environ.get("CALIBRATE_DEVICE") == "cuda" else "cpu")
    if not q.empty():
        print(json.dumps(q.get()))
