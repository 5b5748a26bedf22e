"""vLLM releases and the day each reached PyPI (the earliest upload of its files, UTC), 0.9.0
to 0.34.0, read from https://pypi.org/pypi/vllm/json on 2026-12-03. Pure data.

A measured run that names no release (a nightly image, or no version at all) ran a build no
newer than the day it was measured; ``release_on`` gives the last release out by that day,
which is the rule set kvplan plans such a row with (the build may carry changes merged after
that release, which kvplan cannot see).
"""

from __future__ import annotations

#: the day the list was read: a later day may have releases it lacks
READ_ON = "2026-12-03"

RELEASE_DAYS: tuple[tuple[str, str], ...] = (
    ("0.9.0", "2025-05-28"),
    ("0.9.0.1", "2025-05-30"),
    ("0.9.1", "2025-06-10"),
    ("0.9.2", "2025-07-08"),
    ("0.10.0", "2025-07-25"),
    ("0.10.1", "2025-08-19"),
    ("0.10.1.1", "2025-08-20"),
    ("0.10.2", "2025-09-13"),
    ("0.11.0", "2025-10-04"),
    ("0.11.1", "2025-11-19"),
    ("0.11.2", "2025-11-20"),
    ("0.12.0", "2025-12-03"),
    ("0.13.0", "2025-12-19"),
    ("0.14.0", "2026-01-20"),
    ("0.14.1", "2026-01-24"),
    ("0.15.0", "2026-01-29"),
    ("0.15.1", "2026-02-05"),
    ("0.16.0", "2026-02-26"),
    ("0.17.0", "2026-03-07"),
    ("0.17.1", "2026-03-11"),
    ("0.18.0", "2026-03-20"),
    ("0.18.1", "2026-03-31"),
    ("0.19.0", "2026-04-03"),
    ("0.19.1", "2026-04-18"),
    ("0.20.0", "2026-04-27"),
    ("0.20.1", "2026-05-03"),
    ("0.20.2", "2026-05-10"),
    ("0.21.0", "2026-05-15"),
    ("0.22.0", "2026-05-29"),
    ("0.22.1", "2026-06-05"),
    ("0.23.0", "2026-06-13"),
    ("0.24.0", "2026-06-30"),
    ("0.25.0", "2026-07-11"),
    ("0.25.1", "2026-07-14"),
    ("0.26.0", "2026-07-25"),
    ("0.27.0", "2026-08-10"),
    ("0.27.1", "2026-08-11"),
    ("0.28.0", "2026-08-26"),
    ("0.29.0", "2026-09-09"),
    ("0.30.0", "2026-09-22"),
    ("0.31.0", "2026-10-05"),
    ("0.32.0", "2026-10-18"),
    ("0.33.0", "2026-11-02"),
    ("0.34.0", "2026-11-16"),
)


def release_on(day: str) -> str | None:
    """The last vLLM release published on or before ``day`` (ISO ``YYYY-MM-DD``), or None
    when the day precedes 0.9.0 (the first release listed)."""
    out = [(published, version) for version, published in RELEASE_DAYS if published <= day]
    return max(out, key=lambda x: (x[0], tuple(int(p) for p in x[1].split("."))))[1] \
        if out else None
