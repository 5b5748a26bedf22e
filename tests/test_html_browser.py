"""The HTML report in a real headless browser (Debian's chromium): it renders to a screenshot
and logs no console error (issue 15). Skipped where no chromium is installed; .ci/run installs
it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kvplan.cli.main import run

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no chromium installed")


def render(page: Path, shot: Path) -> tuple[int, list[str]]:
    """(exit status, console messages) of a headless screenshot of ``page``."""
    p = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
                        "--window-size=1280,2400", f"--screenshot={shot}", page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, [ln for ln in p.stderr.splitlines() if re.search(r":CONSOLE[:(]", ln)]


def test_the_detector_sees_a_broken_page(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFn()</script></body></html>", encoding="utf-8")
    rc, console = render(bad, tmp_path / "bad.png")
    assert rc == 0 and any("undefinedFn is not defined" in c for c in console)


def test_the_report_renders_without_console_errors(tmp_path, capsys):
    page = tmp_path / "r.html"
    assert run(["plan", str(EXAMPLES / "guide-1-8xh100-llama3-70b-32k.yaml"), "-f", "html",
                "-o", str(page), "--samples", "500"]) == 0
    capsys.readouterr()
    shot = tmp_path / "r.png"
    rc, console = render(page, shot)
    assert rc == 0 and console == []
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000  # a page, not a blank
