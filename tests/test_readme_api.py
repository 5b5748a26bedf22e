"""The README's Python API examples run as written (from the repository root)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_python_blocks_run(monkeypatch):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    api = text[text.index("## Python API"):text.index("## How the code is laid out")]
    blocks = re.findall(r"```python\n(.*?)```", api, re.S)
    assert len(blocks) == 2
    monkeypatch.chdir(ROOT)
    scope: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 - our own README
    r, df = scope["r"], scope["df"]
    assert r.request.tp == 2 and r.request.context_tokens == 32768
    assert scope["kvplan"].fit_record(r)["max_concurrency"] == r.max_concurrency
    assert len(df) == 2 * 2  # tp 1, 2 x batch 1, 64
    assert scope["kvplan"].plan_record(scope["report"])["kvplan_plan"] == 1
