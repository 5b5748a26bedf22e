"""Errors a user can cause. Each names where the bad value came from and how to fix it.

The CLI turns every ``KvplanError`` into one line on stderr and exit status 2.
"""

from __future__ import annotations


class KvplanError(Exception):
    """Base class: a user-caused failure with a one-line message."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        self.detail = message
        prefix = ""
        if source and field:
            prefix = f"{source}: {field}: "
        elif source:
            prefix = f"{source}: "
        elif field:
            prefix = f"{field}: "
        super().__init__(prefix + message)


class ConfigError(KvplanError):
    """A model config is malformed, lacks a field, or holds an impossible value."""


class UnknownModelError(KvplanError):
    """A model name that is neither built in, nor a path, nor (later) a Hub id."""


class FormatError(KvplanError):
    """An unknown or malformed KV storage format spec."""


class ParallelismError(KvplanError):
    """A TP/PP degree that cannot split the model."""


class InputError(KvplanError):
    """A bad command-line value (context length, block size, ...)."""


class GpuSpecError(KvplanError):
    """A GPU YAML file that is malformed or holds a missing or impossible value."""


class UnknownGpuError(KvplanError):
    """A GPU name that is neither a known spec, an alias, nor a YAML file."""


class HubError(KvplanError):
    """A Hub fetch that failed: gated, not found, offline without a cache, network trouble."""


class ScenarioError(KvplanError):
    """A scenario file (or its trace) with one or more problems, one line each."""

    #: the most problem lines printed (a trace with 50,000 bad lines would flood the terminal)
    SHOWN = 20

    def __init__(self, problems: list[str]):
        self.problems = problems
        shown = problems[:self.SHOWN]
        if len(problems) > self.SHOWN:
            shown.append(f"... and {len(problems) - self.SHOWN:,} more problems")
        super().__init__("\n".join(shown))
