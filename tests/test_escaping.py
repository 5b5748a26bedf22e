"""Names from files and folders cannot drive the terminal or inject Markdown (issue 16 class 5,
issue 15): control characters are shown as escapes, one line stays one line."""

from __future__ import annotations

import shutil
from pathlib import Path

from kvplan.cli.main import run
from kvplan.core.text import printable

CONFIG = Path(__file__).parent / "fixtures" / "configs" / "CohereForAI__c4ai-command-r-v01.json"


def test_printable():
    assert printable("a\x1b]0;PWNED\x07b") == "a\\x1b]0;PWNED\\x07b"
    assert printable("x\u202ey") == "x\\u202ey"  # a bidi override
    assert printable("a\nb\tc") == "a\nb\tc" and printable("a\nb", newlines=False) == "a\\nb"


def test_a_folder_name_with_escapes_reaches_no_terminal_raw(tmp_path, capsys):
    folder = tmp_path / "bad\x1b]0;PWNED\x07model"
    folder.mkdir()
    shutil.copy(CONFIG, folder / "config.json")
    assert run(["size", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "\x1b]0;" not in out and "bad\\x1b]0;PWNED\\x07model" in out
    assert run(["size", str(folder / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b" in err and err.count("\n") == 1


def test_a_scenario_name_adds_no_heading_or_html(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text('kvplan: 1\nname: "x\\n# injected <img src=x onerror=alert(1)>"\n'
                 "model: llama-3.1-8b\nhardware: {gpu: h100}\nserving: {tp: 1}\n"
                 "workload: {request_rate: 1, prompt_tokens: 500, output_tokens: 50}\n"
                 "samples: 50\n", encoding="utf-8")
    assert run(["plan", str(f), "-f", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "\n# injected" not in md and "<img" not in md
    assert md.startswith("# kvplan plan: x\\n# injected &lt;img src=x onerror=alert(1)&gt;\n")
