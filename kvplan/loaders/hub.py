"""Hugging Face Hub: ``config.json`` (and safetensors headers) of a repo id. The only network
code in kvplan; ``huggingface_hub`` is imported only here, and only when the Hub is needed.

- Cache: huggingface_hub's own layout (``$HF_HUB_CACHE`` or ``$HF_HOME/hub``:
  ``models--org--name/refs/<revision>`` -> commit, ``snapshots/<commit>/config.json``). A cached
  config is read straight from there without contacting the Hub (``--refresh`` asks the Hub
  again), so a second run works offline and as fast as a local path.
- Environment, read on every call (not at import): ``HF_ENDPOINT``, ``HF_HUB_OFFLINE``,
  ``HF_TOKEN`` (``--token`` wins), ``HF_HUB_CACHE`` / ``HF_HOME``, and ``KVPLAN_HUB_TIMEOUT``
  (seconds per request, default 10; a whole fetch gives up after three times that, before
  huggingface_hub's retry schedule runs out).
- Never loads repository code: ``auto_map`` / ``trust_remote_code`` configs are read as JSON.
- Tokens are never printed: every message is built here without one, and ``secrets()`` lists
  the values the CLI redacts from a debug traceback.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import HubError

DEFAULT_ENDPOINT = "https://huggingface.co"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SECRETS: set[str] = set()

#: safetensors dtype -> bytes per element (F8 and U8 one byte; FP4 packs two per U8 byte).
ST_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
                  "F8_E8M0": 1, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def secrets() -> set[str]:
    return set(_SECRETS)


@dataclass(frozen=True)
class HubConfig:
    repo_id: str
    revision: str
    commit: str
    config: dict
    cached: bool
    endpoint: str


@dataclass(frozen=True)
class CheckpointSize:
    """Parameters and bytes by dtype from the safetensors headers (never the weights)."""

    params_by_dtype: dict[str, int]
    bytes_by_dtype: dict[str, int]
    files: int

    @property
    def params_total(self) -> int:
        return sum(self.params_by_dtype.values())

    @property
    def bytes_total(self) -> int:
        return sum(self.bytes_by_dtype.values())


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def check_endpoint() -> None:
    """HF_ENDPOINT must be an http(s) URL with a host before huggingface_hub (which parses it
    at import) is touched."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(endpoint())
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        ok = False
    if not ok:
        raise HubError(f"not an http(s) URL with a host: {shown_endpoint()}", field="HF_ENDPOINT")


#: how long the reachability probe waits for a TCP connection (KVPLAN_HUB_TIMEOUT, when set,
#: replaces it): a refused or unroutable endpoint is one line in well under this
PROBE_S = 2.0


def probe_endpoint(where: str) -> None:
    """Connect to the Hub's host (or the proxy the environment names for it) before
    huggingface_hub is asked: its retry schedule turns a refused connection into 20+ silent
    seconds; this decides in one connect, bounded by PROBE_S."""
    import socket
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint())
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    via = ""
    if proxy and not urllib.request.proxy_bypass(host):
        pp = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        default = {"https": 443, "socks5": 1080, "socks5h": 1080, "socks4": 1080}.get(pp.scheme, 80)
        host, port = pp.hostname or host, pp.port or default
        via = f" through the proxy {host}:{port} ({parts.scheme}_proxy)"
    wait = timeout_s() if os.environ.get("KVPLAN_HUB_TIMEOUT") else PROBE_S
    try:
        socket.create_connection((host, port), timeout=wait).close()
    except OSError as e:
        why = (f"no answer within {wait:g} s" if isinstance(e, TimeoutError)
               else (e.strerror or type(e).__name__).lower())
        raise HubError(f"cannot reach the Hub at {shown_endpoint()}{via} ({why}); check the "
                       "network, the proxy or HF_ENDPOINT, set HF_HUB_OFFLINE=1 to use the "
                       "cache only, or raise KVPLAN_HUB_TIMEOUT", source=where) from None


def shown_endpoint() -> str:
    """The endpoint as printed: user name, password and query string (tokens) redacted."""
    from urllib.parse import urlsplit, urlunsplit

    url = endpoint()
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # not a URL: say nothing of it beyond its scheme
        return url.split(":", 1)[0] + "://<unparseable HF_ENDPOINT>"
    if not parts.netloc:  # no scheme://host: show none of it (it may hold a secret)
        return "<HF_ENDPOINT without scheme://host>"
    netloc = ("***@" if "@" in parts.netloc else "") + host + (f":{port}" if port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "***" if parts.query else "", ""))


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def timeout_s() -> float:
    text = os.environ.get("KVPLAN_HUB_TIMEOUT", "10")
    try:
        value = float(text)
    except ValueError:
        raise HubError(f"expected seconds, got {text!r}", field="KVPLAN_HUB_TIMEOUT") from None
    if not 0 < value <= 3600:  # NaN and inf fail too
        raise HubError(f"expected 0 to 3,600 seconds, got {text[:40]!r}", field="KVPLAN_HUB_TIMEOUT")
    return value


def _token(token: str | None) -> str | None:
    value = token or os.environ.get("HF_TOKEN") or None
    if value:
        _SECRETS.add(value)
    return value


def _repo_folder(repo_id: str) -> Path:
    return cache_dir() / ("models--" + repo_id.replace("/", "--"))


def cached_config(repo_id: str, revision: str) -> tuple[str, Path] | None:
    """(commit, path) of a cached config.json, read from huggingface_hub's cache layout."""
    folder = _repo_folder(repo_id)
    if COMMIT.match(revision):
        commit = revision
    else:
        ref = folder / "refs" / revision
        try:
            commit = ref.read_text(encoding="utf-8").strip()
        except OSError:
            return None
    path = folder / "snapshots" / commit / "config.json"
    return (commit, path) if path.is_file() else None


def _read_json(path: Path, repo_id: str) -> dict:
    from .files import read_bytes

    try:
        data = json.loads(read_bytes(path, HubError).decode("utf-8-sig"))
    except HubError as e:
        raise HubError(f"cached config.json is unreadable ({e.detail}); delete it or pass "
                       "--refresh", source=str(path)) from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise HubError(f"cached config.json is unreadable ({type(e).__name__}); delete it or "
                       "pass --refresh", source=str(path)) from None
    if not isinstance(data, dict):
        raise HubError("config.json is not a JSON object", source=f"{repo_id} (Hub)")
    return data


def _where(repo_id: str, revision: str) -> str:
    return f"{repo_id}@{revision} ({shown_endpoint()})"


def _translate(e: Exception, repo_id: str, revision: str, what: str) -> HubError:
    """One line, with what to do next, for each failure huggingface_hub raises."""
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = _where(repo_id, revision)
    if isinstance(e, GatedRepoError):  # before RepositoryNotFoundError: it is a subclass
        return HubError(f"{repo_id} is a gated repo: accept its licence at "
                        f"{shown_endpoint()}/{repo_id}, then log in (`hf auth login`) or pass --token "
                        "/ set HF_TOKEN", source=where)
    if isinstance(e, RevisionNotFoundError):
        return HubError(f"revision {revision!r} not found in {repo_id}; check the branch, tag "
                        "or commit", source=where)
    if isinstance(e, RepositoryNotFoundError):
        return HubError(f"repo {repo_id} not found (or private: pass --token / set HF_TOKEN); "
                        "check the id", source=where)
    if isinstance(e, RemoteEntryNotFoundError):
        return HubError(f"the repo has no {what}; it may not be a transformers model", source=where)
    status = _http_status(e)
    if status is not None and not offline():
        if status in (401, 403):
            why = "access refused: log in (`hf auth login`) or pass --token / set HF_TOKEN"
        elif status == 404:
            why = "not found: check the id, the revision and HF_ENDPOINT"
        elif status == 429:
            why = "rate limited: try again later"
        else:
            why = "the server failed: try again later"
        return HubError(f"the Hub at {shown_endpoint()} answered HTTP {status} for {what} "
                        f"({why})", source=where)
    names = {c.__name__ for c in type(e).__mro__}
    network = names & {"TimeoutException", "TimeoutError", "ConnectError", "NetworkError",
                       "TransportError", "ConnectionError", "RemoteProtocolError"}
    if isinstance(e, LocalEntryNotFoundError) or network:
        if offline():
            return HubError(f"HF_HUB_OFFLINE is set and {what} of {repo_id}@{revision} is not in "
                            f"the cache ({cache_dir()}); run once online or unset HF_HUB_OFFLINE",
                            source=where)
        return HubError(f"cannot reach the Hub at {shown_endpoint()} (network failure, or no answer "
                        f"within the {timeout_s():g} s timeout) and {what} is not cached; check "
                        "the network or HF_ENDPOINT, or raise KVPLAN_HUB_TIMEOUT", source=where)
    return HubError(f"Hub request failed: {_safe(str(e))}", source=where)


def _http_status(e: BaseException) -> int | None:
    """The HTTP status of the response behind ``e`` (its cause chain), if one came back."""
    seen = 0
    cur: BaseException | None = e
    while cur is not None and seen < 8:
        status = getattr(getattr(cur, "response", None), "status_code", None)
        if isinstance(status, int) and status >= 400:
            return status
        cur, seen = cur.__cause__ or cur.__context__, seen + 1
    return None


def _safe(text: str) -> str:
    for secret in _SECRETS:
        text = text.replace(secret, "***")
    text = re.sub(r"(//)[^/@\s]*@", r"\1***@", text)  # user:password@ in any URL
    return text.splitlines()[0] if text else type(text).__name__


def _configure() -> None:
    """huggingface_hub reads its settings once, at import; kvplan reads the environment on
    every call, so the per-call values are written into its constants here."""
    from huggingface_hub import constants

    constants.HF_HUB_DOWNLOAD_TIMEOUT = timeout_s()  # type: ignore[assignment]
    constants.HF_HUB_ETAG_TIMEOUT = timeout_s()  # type: ignore[assignment]
    constants.HF_HUB_OFFLINE = offline()
    from huggingface_hub.utils import disable_progress_bars, logging

    logging.set_verbosity_error()  # its retry warnings would break the one-line error rule
    disable_progress_bars()


def _within_deadline(fn, *args, **kwargs):
    """Run ``fn`` in a daemon thread and give up after 3 x KVPLAN_HUB_TIMEOUT: a dead or
    hanging endpoint then costs seconds, not huggingface_hub's full retry schedule."""
    import threading

    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(3 * timeout_s())
    if worker.is_alive():
        raise TimeoutError(f"no answer within {3 * timeout_s():g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def fetch_config(repo_id: str, revision: str | None = None, token: str | None = None,
                 refresh: bool = False) -> HubConfig:
    """config.json of ``repo_id`` at ``revision`` (default ``main``): cache first."""
    revision = revision or "main"
    tok = _token(token)
    hit = None if refresh else cached_config(repo_id, revision)
    if hit is not None:
        commit, path = hit
        return HubConfig(repo_id, revision, commit, _read_json(path, repo_id), True, shown_endpoint())
    if offline() and not refresh:
        raise HubError(f"HF_HUB_OFFLINE is set and config.json of {repo_id}@{revision} is not "
                       f"in the cache ({cache_dir()}); run once online or unset HF_HUB_OFFLINE",
                       source=_where(repo_id, revision))
    check_endpoint()
    probe_endpoint(_where(repo_id, revision))
    from huggingface_hub import hf_hub_download

    _configure()
    try:
        path = Path(_within_deadline(
            hf_hub_download, repo_id, "config.json", revision=revision, token=tok,
            endpoint=endpoint(), cache_dir=cache_dir(), local_files_only=offline(),
            etag_timeout=timeout_s()))
    except Exception as e:  # every huggingface_hub / network failure becomes one line
        raise _translate(e, repo_id, revision, "config.json") from None
    hit = cached_config(repo_id, revision)
    commit = hit[0] if hit else path.parent.name
    return HubConfig(repo_id, revision, commit, _read_json(path, repo_id), False, shown_endpoint())


def _kvplan_cache(repo_id: str, commit: str) -> Path:
    base = os.environ.get("KVPLAN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or "~/.cache", "kvplan")
    return Path(base).expanduser() / "safetensors" / f"{repo_id.replace('/', '--')}--{commit}.json"


def checkpoint_size(repo_id: str, commit: str, token: str | None = None) -> CheckpointSize | None:
    """See ``_checkpoint_size``; bounded by the same deadline as the config fetch."""
    try:
        return _within_deadline(_checkpoint_size, repo_id, commit, token)
    except TimeoutError as e:
        raise _translate(e, repo_id, commit[:12], "safetensors headers") from None


def _sane(size: CheckpointSize) -> bool:
    """A cached summary holds what kvplan writes: dtype names to non-negative integers."""
    def counts(d: object) -> bool:
        return isinstance(d, dict) and all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            and 0 <= v < 10**16 for k, v in d.items())
    return (counts(size.params_by_dtype) and counts(size.bytes_by_dtype)
            and isinstance(size.files, int) and not isinstance(size.files, bool) and size.files >= 0)


def _checkpoint_size(repo_id: str, commit: str, token: str | None = None) -> CheckpointSize | None:
    """Parameter counts by dtype from the repo's safetensors headers (range requests for the
    headers only, through huggingface_hub), cached per commit. None when the repo has no
    safetensors files or the Hub cannot be asked (offline, uncached)."""
    cache = _kvplan_cache(repo_id, commit)
    try:
        from .files import read_bytes

        data = json.loads(read_bytes(cache, HubError))
        size = CheckpointSize(data["params_by_dtype"], data["bytes_by_dtype"], data["files"])
        if _sane(size):
            return size  # else a tampered or truncated summary: asked again
    except (HubError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        pass
    if offline():
        return None
    check_endpoint()
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import NotASafetensorsRepoError, SafetensorsParsingError

    tok = _token(token)
    _configure()
    api = HfApi(endpoint=endpoint(), token=tok)
    try:
        if api.file_exists(repo_id, "model.safetensors", revision=commit, token=tok):
            files = ["model.safetensors"]
        elif api.file_exists(repo_id, "model.safetensors.index.json", revision=commit,
                             token=tok):
            index = Path(hf_hub_download(repo_id, "model.safetensors.index.json",
                                         revision=commit, token=tok, endpoint=endpoint(),
                                         cache_dir=cache_dir(), etag_timeout=timeout_s()))
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}
            files = sorted(set(weight_map.values()))
        else:
            return None
        params: dict[str, int] = {}
        for name in files:
            meta = api.parse_safetensors_file_metadata(repo_id, name, revision=commit,
                                                       token=tok, timeout=timeout_s())
            for dtype, count in meta.parameter_count.items():
                params[dtype] = params.get(dtype, 0) + count
    except (NotASafetensorsRepoError, SafetensorsParsingError, ValueError, RecursionError):
        return None
    except Exception as e:
        raise _translate(e, repo_id, commit[:12], "safetensors headers") from None
    unknown = [d for d in params if d not in ST_DTYPE_BYTES]
    if unknown:
        return None
    size = CheckpointSize(dict(sorted(params.items())),
                          {d: n * ST_DTYPE_BYTES[d] for d, n in sorted(params.items())}, len(files))
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"params_by_dtype": size.params_by_dtype,
                                     "bytes_by_dtype": size.bytes_by_dtype, "files": size.files}),
                         encoding="utf-8")
    except OSError:
        pass  # a read-only cache only costs a refetch
    return size
