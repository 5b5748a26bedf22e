"""Shared assertions for CLI tests."""

from __future__ import annotations

from kvplan.cli.main import run


def fail(capsys, *argv: str) -> str:
    """Run the CLI expecting the one-line error contract: exit 2, nothing on stdout, one line
    on stderr starting ``kvplan: error:``, no traceback. Returns that line."""
    code = run(list(argv))
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("kvplan: error: ")
    return lines[0]
