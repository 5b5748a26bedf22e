"""A measurement filed twice is counted once (``kvplan.loaders.benchmarks.read_all``).

AIConfigurator's silicon sample files some sweeps under several source files (for example
Kimi-K2.5 on B200 under 2026-03-25.csv, 2026-04-06.csv and kimi-k2.5-gap-analysis.csv): rows
whose every column but ``id``, ``silicon_data_source`` and ``backend_version`` is equal,
measured TTFT and TPOT to the last digit. Left in, a repeat of a fitted row can land in the
held-out half of a split by sweep, and repeats weigh twice in every median.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

from kvplan.loaders.benchmarks import REPEAT, read_all

DATA = Path(__file__).resolve().parent.parent / "benchmarks/data/aiconfigurator_silicon_sample.csv"
PROVENANCE = {"id", "silicon_data_source", "backend_version"}


def test_repeats_in_the_silicon_sample_counted_independently():
    with DATA.open() as f:
        rows = list(csv.DictReader(f))
    key = Counter(tuple(v for k, v in r.items() if k not in PROVENANCE) for r in rows)
    repeats = sum(n - 1 for n in key.values())
    assert len(rows) == 5_221 and repeats == 711
    runs, problems = read_all([DATA])
    repeated = [p for p in problems if p.message == REPEAT]
    # rows the reader refuses (disaggregated rows without worker counts, unknown GPUs) are
    # refused whether repeated or not, so fewer repeats reach the check than the file holds
    assert 0 < len(repeated) <= repeats
    readable = {p.source for p in repeated} | {r.source for r in runs}
    # every readable row is either kept once or named as a repeat
    assert len(readable) == len(runs) + len(repeated)
    kept = Counter((r.model, r.gpu, r.engine, r.tp, r.pp, r.dp, r.ep, r.weight_dtype,
                    r.prompt_tokens, r.output_tokens, r.concurrency, r.ttft_s, r.tpot_s,
                    r.prefill, r.prefill_workers, r.decode_workers) for r in runs)
    assert max(kept.values()) == 1


def test_a_repeat_is_counted_once_and_a_different_digit_is_not(tmp_path: Path):
    header = "model,gpu,engine,engine_version,tp,prompt_tokens,output_tokens,concurrency,ttft_ms,tpot_ms\n"
    row = "meta-llama/Llama-3.1-8B-Instruct,h100,vllm,{v},1,1024,1024,16,{ttft},12.5\n"
    a = tmp_path / "a.csv"
    a.write_text(header + row.format(v="0.19.0", ttft="80.25") + row.format(v="", ttft="80.25")
                 + row.format(v="0.19.0", ttft="80.26"))
    b = tmp_path / "b.csv"
    b.write_text(header + row.format(v="0.19.0", ttft="80.25"))
    runs, problems = read_all([a, b])
    assert [r.source for r in runs] == [f"{a}:2", f"{a}:4"]
    assert [(p.source, p.field, p.message) for p in problems] == [
        (f"{a}:3", "row", REPEAT), (f"{b}:2", "row", REPEAT)]
