"""Read a YAML file safely and turn validation errors into one line naming file, line and
field (``h100.yaml:12: memory.driver_total_bytes: ...``). ``yaml.safe_load`` semantics only.

PyYAML is YAML 1.1: ``4.8e12`` loads as a *string* and ``no`` as False, so a numeric field
holding a numeric-looking string gets a hint to write an integer with ``_`` separators.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import KvplanError
from .files import read_text

NUMERIC_LOOKING = re.compile(r"^[+-]?(\d[\d_]*)?\.?\d*([eE][+-]?\d+)?$")
MAX_NODES = 100_000  # a document's nodes with every alias expanded (an alias bomb has 10^9)
MAX_DEPTH = 64  # nested mappings and lists (kvplan's own files need 6); deeper input would
# overflow the C stack of libyaml's recursive composer (a segfault, not an exception)


def _too_deep(text: str, loader: type) -> bool:
    """Whether the document nests past ``MAX_DEPTH``, read from the event stream (libyaml's
    parser keeps its state on the heap, so this pass itself is bounded)."""
    depth = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
    return False


def _expanded_nodes(node: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes of the document with aliases expanded, counted on the shared graph (linear)."""
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = 1  # a cycle counts once
    total = 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            total += _expanded_nodes(k, memo) + _expanded_nodes(v, memo)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            total += _expanded_nodes(item, memo)
    memo[id(node)] = min(total, 10 * MAX_NODES)
    return memo[id(node)]


def _node_lines(node: yaml.Node, path: tuple = (), dups: list | None = None) -> dict[tuple, int]:
    """Field path -> line; a key repeated in one mapping goes to ``dups`` as (key, line)
    (PyYAML keeps the last one silently; a plan must not)."""
    lines = {path: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key, value in node.value:
            if key.value in seen and dups is not None:
                dups.append((str(key.value), key.start_mark.line + 1))
            seen.add(key.value)
            sub = path + (key.value,)
            lines[sub] = key.start_mark.line + 1
            lines.update(_node_lines(value, sub, dups))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines.update(_node_lines(item, path + (i,), dups))
    return lines


def read_yaml(path: Path, error: type[KvplanError]) -> tuple[Any, Callable[[tuple], int | None]]:
    """The document and a function mapping a field path to its line number."""
    text = read_text(path, error)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser, for line numbers
    try:
        if _too_deep(text, loader):
            raise error(f"YAML nested too deeply (more than {MAX_DEPTH} levels)", source=str(path))
        node = yaml.compose(text, Loader=loader)
        size = _expanded_nodes(node, {}) if node is not None else 0
        if size > MAX_NODES:
            raise error(f"the document expands to more than {MAX_NODES:,} YAML nodes (anchors "
                        "and aliases multiply it); write it out plainly", source=str(path))
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise error(f"malformed YAML: {problem}", source=f"{path}{where}") from None
    except RecursionError:
        raise error("YAML nested too deeply", source=str(path)) from None
    except ValueError as e:  # an integer of more than 4,300 digits (Python's limit)
        raise error(f"unreadable YAML ({str(e).split(':')[0]})", source=str(path)) from None
    dups: list[tuple[str, int]] = []
    lines = _node_lines(node, (), dups) if node is not None else {}
    if dups:  # every repeated key, one line each
        raise error("\n".join(f"{path}:{line}: duplicate key {key!r} (YAML would keep only the "
                              "last one)" for key, line in dups))

    def locate(field_path: tuple) -> int | None:
        for n in range(len(field_path), -1, -1):
            if tuple(field_path[:n]) in lines:
                return lines[tuple(field_path[:n])]
        return None

    return data, locate


def _message(err: dict) -> str:
    msg = err.get("msg", "invalid value")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    kind = err.get("type", "")
    value = err.get("input")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "missing required field"
    if kind != "value_error" and isinstance(value, str) and NUMERIC_LOOKING.match(value.strip()) \
            and value.strip():
        if kind.startswith("float"):
            return msg + f" (got the string {value!r}: write the number without quotes)"
        return msg + (f" (got the string {value!r}: YAML 1.1 reads that as text; write an "
                      "integer with _ separators, e.g. 4_800_000_000_000)")
    if value is not None and kind != "value_error":
        shown = repr(value)
        msg += f" (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
    return msg


def dotted(loc: tuple) -> str:
    return ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")


def problem_line(path: Path, locate: Callable[[tuple], int | None], loc: tuple, msg: str) -> str:
    """``file:line: field: message`` (the line when the field is found)."""
    line = locate(loc)
    source = f"{path}:{line}" if line else str(path)
    return f"{source}: {dotted(loc)}: {msg}" if loc else f"{source}: {msg}"


def error_lines(exc: Any, path: Path, locate: Callable[[tuple], int | None],
                hint: Callable[[tuple, str], str] | None = None) -> list[str]:
    """Every pydantic error as one ``file:line: field: message`` line; ``hint(loc, kind)`` may
    add to the message (e.g. the closest valid key of an unknown one)."""
    out = []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        msg = _message(err) + (hint(loc, err.get("type", "")) if hint else "")
        out.append(problem_line(path, locate, loc, msg))
    return out


def validation_error(exc: Any, path: Path, locate: Callable[[tuple], int | None],
                     error: type[KvplanError]) -> KvplanError:
    """The first pydantic error as one KvplanError line with file:line and dotted field."""
    first = exc.errors()[0]
    loc = tuple(first.get("loc", ()))
    line = locate(loc)
    msg = _message(first)
    more = len(exc.errors()) - 1
    if more:
        msg += f" [+{more} more error{'s' if more > 1 else ''}]"
    source = f"{path}:{line}" if line else str(path)
    return error(msg, source=source, field=dotted(loc) or None)
