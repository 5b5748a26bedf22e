"""Deterministic hostile inputs for the kvplan CLI and the in-process harness that runs one.

Not a test module: ``tests/test_fuzz.py`` runs a few hundred cases, ``scripts/fuzz.py`` as
many as asked. ``cases(n, seed)`` is a stream: the first n cases of a seed are always the
same (a larger n extends a smaller one). Each case runs in its own folder (the working
directory during the run); ``{dir}`` in its argv is that folder.
"""

from __future__ import annotations

import faulthandler
import io
import itertools
import json
import os
import pickle
import random
import re
import resource
import select
import signal
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
SEED = 1234
PREFIX = "kvplan: error: "

# Sentinel strings, swapped for raw tokens after dumping (json/yaml cannot write them).
_RAW = {"ZZNANZZ": ("NaN", ".nan"), "ZZINFZZ": ("1.0e40000000", "1.0e+40000000"),
        "ZZBIGZZ": ("9" * 5000, "9" * 5000)}
VALUES = [None, True, "x", -1, 0, 1e308, "ZZNANZZ", "ZZINFZZ", [], {}, "ZZBIGZZ", "y" * 100_000]
CLI_VALUES = ["0", "-1", "nan", "inf", "-inf", "1e308", "1.0e40000000", "9223372036854775808",
              ",", "", " ", "x" * 300, "\x01\x1b[2J\r\nz", "１２８ｋ", "٣٢k", "🦙", "4k,,8k", "1k:1M:+1",
              "1:0:x2", "0x10", "1_000", "-0", "1e3", "0.5", "a/b", "../up.yaml"]
DEEP = 100_000
MEMORY = 8 << 30  # address space of a case's process
# Every case: no network, caches in the case folder, no serving calibrations (as tests/conftest.py).
BASE_ENV = (("HF_HUB_OFFLINE", "1"), ("HF_HOME", "{dir}/.hf"), ("KVPLAN_CACHE", "{dir}/.cache"),
            ("KVPLAN_CALIBRATIONS", "off"), ("KVPLAN_DEBUG", None))


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    files: tuple[tuple[str, bytes], ...] = ()
    env: tuple[tuple[str, str | None], ...] = ()  # None: unset


@dataclass
class Outcome:
    case: Case
    code: int | None = None
    out: str = ""
    err: str = ""
    seconds: float = 0.0
    exc: str = ""  # the uncaught exception's traceback
    site: str = ""  # its raising site: EXC at kvplan/file.py:line (the innermost kvplan frame)
    problems: list[str] = field(default_factory=list)


# ---- serialising mutated documents ------------------------------------------------------

def _dump(doc, kind: str) -> bytes:
    text = json.dumps(doc, indent=1) if kind == "json" else yaml.safe_dump(doc, sort_keys=False)
    for key, (js, ym) in _RAW.items():
        text = text.replace(f'"{key}"' if kind == "json" else key, js if kind == "json" else ym)
    return text.encode("utf-8", "surrogatepass")


def _label(value) -> str:
    return _RAW[value][0][:12] if isinstance(value, str) and value in _RAW else repr(value)[:12]


def _paths(node, prefix=()):
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        yield prefix + (k,)
        yield from _paths(v, prefix + (k,))


def _set(doc, path, value=None, delete=False):
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value


def mutate(raw: bytes, kind: str, rng: random.Random) -> tuple[str, bytes]:
    """One mutation of a JSON or YAML document: (what was done, the new bytes)."""
    op = rng.choice(["delete", "replace", "replace", "replace", "nest", "deep", "dup", "truncate",
                     "bytes", "empty"])
    if op == "truncate":
        cut = rng.randrange(len(raw))
        return f"truncate@{cut}", raw[:cut]
    if op == "bytes":
        at = rng.randrange(len(raw))
        junk = rng.choice([b"\xff\xfe", b"\xc3", b"\x00", b"\xed\xa0\x80"])
        return f"non-utf8@{at}", raw[:at] + junk + raw[at:]
    if op == "empty":
        return "empty", rng.choice([b"", b"\n", b"null", b"[]", b"0", b"\xef\xbb\xbf{}"])
    if op == "deep":
        return "deep", b"[" * DEEP + b"]" * DEEP if rng.random() < 0.5 else b'{"a": ' + b"[" * DEEP
    doc = json.loads(raw) if kind == "json" else yaml.safe_load(raw)
    paths = list(_paths(doc))
    if not paths:
        return "empty", b""
    path = rng.choice(paths)
    where = ".".join(map(str, path))
    if op == "delete":
        _set(doc, path, delete=True)
    elif op == "nest":
        value = doc
        for k in path:
            value = value[k]
        for _ in range(60):
            value = [value] if rng.random() < 0.5 else {"a": value}
        _set(doc, path, value)
    elif op == "dup" and isinstance(doc, dict):
        key, value = rng.choice(list(doc)), rng.choice(VALUES)
        text = _dump(doc, kind).decode("utf-8")
        extra = _dump({key: value}, kind).decode("utf-8").strip()
        text = text.rstrip()[:-1] + "," + extra[1:-1] + "}" if kind == "json" else f"{text}{extra}\n"
        return f"dup:{key}={_label(value)}", text.encode()
    else:
        value = rng.choice(VALUES)
        _set(doc, path, value)
        return f"{where}={_label(value)}", _dump(doc, kind)
    return f"{op}:{where}", _dump(doc, kind)


# ---- case families --------------------------------------------------------------------

def _docs(rng, paths, kind, make):
    """Cases mutating a random file of ``paths``; ``make(name, bytes)`` gives (argv, files, env)."""
    paths = sorted(paths)
    while True:
        src = rng.choice(paths)
        what, data = mutate(src.read_bytes(), kind, rng)
        argv, files, env = make(src.name, data, rng)
        yield Case(f"{src.name}:{what}", tuple(argv), tuple(files), tuple(env))


def _config(name, data, rng):
    return rng.choice([["size", "{dir}/config.json", "--json"],
                       ["size", "{dir}/config.json", "--engine", "sglang", "-c", "1M", "--json"],
                       ["fit", "{dir}/config.json", "--gpu", "h100", "--json"],
                       ["fit", "{dir}/config.json", "--gpu", "h200", "--tp", "8", "-c", "128k", "--json"],
                       ["curve", "{dir}/config.json", "--gpu", "h100", "--json"]]), \
        [("config.json", data)], []


def _gpu(name, data, rng):
    argv = rng.choice([["fit", "llama-3.1-8b", "--gpu", "{dir}/gpu.yaml", "--json"],
                       ["curve", "llama-3.1-8b", "--gpu", "{dir}/gpu.yaml", "--y", "cost", "--json"],
                       ["gpus", "--json"]])
    env = [("KVPLAN_HARDWARE_PATH", "{dir}")] if argv[0] == "gpus" or rng.random() < 0.5 else []
    return argv, [("gpu.yaml", data)], env


def _scenario(name, data, rng):
    files = [("s.yaml", data), ("rag-trace.jsonl", (ROOT / "examples/rag-trace.jsonl").read_bytes())]
    return ["plan", "{dir}/s.yaml", "--format", "json", "--samples", "300"], files, []


def _trace(name, data, rng):
    scenario = (ROOT / "examples/rag-trace.yaml").read_bytes()
    return ["plan", "{dir}/s.yaml", "--format", "json"], [("s.yaml", scenario), ("rag-trace.jsonl", data)], []


def _trace_lines(rng):
    lines = (ROOT / "examples/rag-trace.jsonl").read_bytes().splitlines()
    while True:
        i = rng.randrange(len(lines))
        what, line = mutate(lines[i], "json", rng)
        data = b"\n".join(lines[:i] + [line.replace(b"\n", b"")] + lines[i + 1:]) + b"\n"
        argv, files, env = _trace("", data, rng)
        yield Case(f"rag-trace.jsonl:{i + 1}:{what}", tuple(argv), tuple(files))


def _run_file(name, data, rng):
    return ["validate", "{dir}/run.json", "--json"], [("run.json", data)], []


def _serving(name, data, rng):
    gpu, engine = name.removesuffix(".json").split("--")
    return (["curve", "llama-3.1-8b", "--gpu", gpu, "--engine", engine, "--y", "tpot", "--json"],
            [(name, data)],
            [("KVPLAN_CALIBRATION_PATH", "{dir}"), ("KVPLAN_CALIBRATIONS", None)])


def _bench_csv(rng):
    src = ROOT / "benchmarks/data/aiconfigurator_silicon_sample.csv"
    rows = [r.split(",") for r in src.read_text().splitlines()[:6]]
    while True:
        r, c = rng.randrange(len(rows)), rng.randrange(len(rows[0]))
        value = rng.choice(CLI_VALUES + ["NaN", "1e999", '"', "9" * 5000])
        grid = [row[:c] + [value] + row[c + 1:] if i == r else row for i, row in enumerate(rows)]
        data = "\n".join(",".join(row) for row in grid).encode("utf-8", "surrogatepass")
        yield Case(f"silicon.csv:{r}.{c}={value[:20]!r}",
                   ("validate", "--benchmarks", "{dir}/s.csv", "--json"), (("s.csv", data),))


_CLI = [["size", "llama-3.1-8b", "-c", "V", "--json"], ["size", "llama-3.1-8b", "--kv-dtype", "V", "--json"],
        ["size", "llama-3.1-8b", "--tp", "V"], ["size", "llama-3.1-8b", "--block-size", "V", "--json"],
        ["size", "llama-3.1-8b", "--engine", "V"], ["size", "V", "--json"],
        ["size", "llama-3.1-8b", "--k-dtype", "V", "--v-dtype", "fp8"],
        ["fit", "llama-3.1-8b", "--gpu", "V", "--json"],
        ["fit", "llama-3.1-8b", "--gpu", "h100", "-c", "V", "--json"],
        ["fit", "llama-3.1-8b", "--gpu", "h100", "--gpu-memory-utilization", "V", "--json"],
        ["fit", "llama-3.1-8b", "--gpu", "h100", "--kv-cache-memory", "V", "--json"],
        ["fit", "llama-3.1-8b", "--gpu", "h100", "--total-memory", "V"],
        ["fit", "llama-3.1-8b", "--gpu", "h100", "--shared-prefix", "V", "--json"],
        ["fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "V", "--json"],
        ["fit", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "V", "--json"],
        ["fit", "llama-3.1-8b", "--gpu", "h100", "--weight-dtype", "V", "--json"],
        ["fit", "deepseek-v3", "--gpu", "h200", "--dp", "V", "--ep", "8", "--json"],
        ["curve", "llama-3.1-8b", "--gpu", "h100", "--points", "V", "--json"],
        ["curve", "llama-3.1-8b", "--gpu", "h100", "--x", "batch", "--points", "V", "--json"],
        ["curve", "llama-3.1-8b", "--gpu", "h100", "--y", "cost", "--price", "V", "--json"],
        ["curve", "llama-3.1-8b", "--gpu", "h100", "--y", "tpot", "--hbm-efficiency", "V", "--json"],
        ["curve", "llama-3.1-8b", "--gpu", "h100", "--batch", "V", "--csv"],
        ["sweep", "llama-3.1-8b", "--gpu", "h100", "-c", "V", "--format", "json"],
        ["sweep", "llama-3.1-8b", "--gpu", "h100", "--tp", "V", "--format", "json"],
        ["sweep", "llama-3.1-8b", "--gpu", "h100", "--batch", "V", "--format", "json"],
        ["sweep", "llama-3.1-8b", "--gpu", "h100", "--where", "V"],
        ["sweep", "llama-3.1-8b", "--gpu", "h100", "--request", "V", "--format", "json"],
        ["sweep", "llama-3.1-8b", "--gpu", "h100", "--top", "V", "--objective", "tpot"],
        ["sweep", "llama-3.1-8b", "--gpu", "h100", "--price", "V", "--format", "json"],
        ["sweep", "llama-3.1-8b", "--gpu", "h100", "--format", "V"],
        ["formats", "--head-dim", "V"], ["gpus", "--json", "V"],
        ["plan", "{dir}/s.yaml", "--samples", "V", "--format", "json"],
        ["plan", "{dir}/s.yaml", "--seed", "V", "--samples", "100", "--format", "json"],
        ["plan", "{dir}/s.yaml", "--simulate", "V", "--samples", "100", "--format", "json"],
        ["plan", "{dir}/s.yaml", "--samples", "100", "--format", "V"], ["init", "V"],
        ["validate", "{dir}/run.json", "--tpot-tolerance", "V", "--json"],
        ["validate", "--benchmarks", "{dir}/s.csv", "--meta", "V", "--json"],
        ["validate", "--benchmarks", "{dir}/s.csv", "--by", "V", "--json"],
        ["calibrate", "--from-benchmarks", "{dir}/s.csv", "--out", "{dir}/out", "--meta", "V"]]


def _cli(rng):
    inputs = (("s.yaml", (ROOT / "kvplan/cli/starter_scenario.yaml").read_bytes()),
              ("run.json", next((ROOT / "calibrate/runs").glob("*.json")).read_bytes()),
              ("s.csv", (ROOT / "benchmarks/data/aiconfigurator_silicon_sample.csv").read_bytes()))
    pairs = list(itertools.product(range(len(_CLI)), CLI_VALUES))
    rng.shuffle(pairs)
    for i, value in itertools.cycle(pairs):
        argv = tuple(value if a == "V" else a for a in _CLI[i])
        used = tuple(f for f in inputs if any(f[0] in a for a in argv))
        yield Case(f"cli:{' '.join(argv)[:120]!r}", argv, used)


def cases(n: int, seed: int = SEED) -> list[Case]:
    rng = random.Random(seed)
    configs = list((FIX / "configs").glob("*.json")) + list((FIX / "checkpoints").glob("*/config.json"))
    scenarios = [ROOT / "kvplan/cli/starter_scenario.yaml", *(ROOT / "examples").glob("*.yaml")]
    families = [_docs(rng, configs, "json", _config), _cli(rng),
                _docs(rng, configs, "json", _config), _cli(rng),
                _docs(rng, scenarios, "yaml", _scenario),
                _docs(rng, (ROOT / "hardware_specs").glob("*.yaml"), "yaml", _gpu),
                _trace_lines(rng), _docs(rng, (ROOT / "calibrate/runs").glob("*.json"), "json", _run_file),
                _docs(rng, (ROOT / "calibrations").glob("*.json"), "json", _serving), _bench_csv(rng)]
    return [next(families[i % len(families)]) for i in range(n)]


# ---- the harness ------------------------------------------------------------------------

class CaseTimeout(BaseException):
    """Raised by SIGALRM: a BaseException, so no ``except Exception`` in kvplan swallows it."""


def _alarm(signum, frame):
    raise CaseTimeout


def strict_json(text: str):
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def _wants_json(argv) -> bool:
    a = list(argv)
    fmt = next((a[i + 1] for i, x in enumerate(a[:-1]) if x in ("--format", "-f")), None)
    return "--json" in a or (fmt == "json" and "--output" not in a and "-o" not in a)


def _site(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if "/kvplan/" in f.filename and "/tests/" not in f.filename] or frames
    f = own[-1]
    return f"{type(exc).__name__} at {f.filename.split('/kvplan/')[-1]}:{f.lineno}"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def run_case(case: Case, folder: Path, timeout: float = 10.0) -> Outcome:
    """Run ``case`` in a forked copy of this process (a segfault or a memory bomb cannot take
    the harness down) in ``folder``; the problems found are in ``Outcome.problems``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in case.files:
        (folder / name).write_bytes(data)
    before = _snapshot(folder)
    argv = [a.replace("{dir}", str(folder)) for a in case.argv]
    r, w = os.pipe()
    log = tempfile.TemporaryFile()  # the child's Python stack if it dies or hangs past SIGALRM
    pid = os.fork()
    if pid == 0:  # the child: run, send the outcome, leave without running any exit hooks
        os.close(r)
        try:
            faulthandler.enable(log)
            faulthandler.dump_traceback_later(timeout + 5, file=log)
            os.write(w, pickle.dumps(_run_here(case, argv, folder, timeout)))
        finally:
            os._exit(0)
    os.close(w)
    chunks, deadline = [], time.monotonic() + timeout + 20  # past SIGALRM: what it cannot break
    with os.fdopen(r, "rb") as pipe:
        while select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))[0]:
            chunk = os.read(pipe.fileno(), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        else:
            os.kill(pid, signal.SIGKILL)
    status = os.waitpid(pid, 0)[1]
    o = pickle.loads(b"".join(chunks)) if chunks else Outcome(case)
    if os.WIFSIGNALED(status) and not chunks:
        log.seek(0)
        o.exc = log.read().decode("utf-8", "replace")
        frame = re.search(r'File "[^"]*/kvplan/([^"]+)", line (\d+)', o.exc)
        where = f"at {frame[1]}:{frame[2]}" if frame else f"in kvplan {case.argv[0]}"
        o.site = f"{signal.Signals(os.WTERMSIG(status)).name} {where}"
        o.problems.append("hang: killed" if time.monotonic() >= deadline else f"crash: {o.site}")
    log.close()
    _check(o, argv, folder, before)
    return o


def _run_here(case: Case, argv: list[str], folder: Path, timeout: float) -> Outcome:
    from kvplan.cli.main import run

    limit = resource.getrlimit(resource.RLIMIT_AS)[1]
    resource.setrlimit(resource.RLIMIT_AS, (min(limit, MEMORY), limit))  # a bomb: MemoryError
    for k, v in BASE_ENV + case.env:
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v.replace("{dir}", str(folder)))
    os.chdir(folder)
    out, err = (io.TextIOWrapper(io.BytesIO(), "utf-8", "backslashreplace", write_through=True) for _ in "12")
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(""), out, err
    o = Outcome(case)
    signal.signal(signal.SIGALRM, _alarm)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for w in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", w)
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                o.code = run(argv)
            except SystemExit as e:
                o.code = e.code if isinstance(e.code, int) else 1
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        for w in caught:
            err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    except CaseTimeout as e:
        o.exc, o.site = traceback.format_exc(), _site(e)
        o.problems.append(f"hang: over {timeout:g} s")
    except Exception as e:  # what `kvplan` would show as a traceback
        o.exc, o.site = traceback.format_exc(), _site(e)
        o.problems.append(f"traceback: {o.site}")
    o.seconds = time.perf_counter() - start
    o.out, o.err = (s.buffer.getvalue().decode("utf-8", "replace") for s in (out, err))
    return o


def _check(o: Outcome, argv: list[str], folder: Path, before: dict[str, bytes]) -> None:
    p = o.problems
    after = _snapshot(folder)
    temps = [n for n in after if re.search(r"(^|/)\.[^/]*\.tmp$", n) and n not in before]
    if temps:
        p.append(f"partial: temp files left {temps}")
    for name, data in before.items():
        if after.get(name) != data and "--force" not in argv:
            p.append(f"partial: {name} changed without --force")
    if o.code is None:  # it hung or died
        return
    if "Traceback" in o.err or "Traceback" in o.out:
        p.append("traceback: printed")
    if o.code not in (0, 1, 2):
        p.append(f"exit status {o.code}")
    lines = o.err.splitlines()
    errors = [x for x in lines if x.startswith(PREFIX)]
    if o.code == 2:
        stray = [x for x in lines if not x.startswith("kvplan: ")]
        # a scenario reports each of its problems on its own line (kvplan/cli/main.py: _fail)
        if stray or not errors or (len(errors) > 1 and argv[0] != "plan"):
            p.append(f"error lines: {len(errors)} error, {len(stray)} other: {o.err[:200]!r}")
    if _wants_json(argv) and o.code in (0, 1) and o.out.strip():
        try:
            strict_json(o.out)
        except ValueError as e:
            p.append(f"json: {str(e)[:100]}")


# ---- tallies ----------------------------------------------------------------------------

def failure_class(problem: str, o: Outcome) -> str:
    """The root cause a problem is grouped under: a traceback's raising site, else the kind
    of problem and the command."""
    kind = problem.split(":")[0]
    if kind in ("traceback", "hang", "crash") and o.site:
        return f"{kind}: {o.site}"
    return f"{kind}: kvplan {o.case.argv[0]}" if kind != "partial" else problem


def tally(outcomes: list[Outcome]) -> dict[str, int]:
    def count(kind):
        return sum(any(p.startswith(kind) for p in o.problems) for o in outcomes)

    return {"cases": len(outcomes), "failing": sum(bool(o.problems) for o in outcomes),
            "tracebacks": count("traceback"), "crashes": count("crash"), "hangs": count("hang"),
            "partial files": count("partial"),
            "error-line": count("error lines"), "json": count("json"), "exit status": count("exit")}
