"""A real HTTP server that answers the Hub endpoints huggingface_hub calls for kvplan:
``HEAD``/``GET /{org}/{name}/resolve/{revision}/{path}`` with ``X-Repo-Commit`` and ``ETag``
headers, ``Range`` requests for safetensors headers (206), and the Hub's error answers
(``X-Error-Code``: ``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``, ``GatedRepo``).
It runs on 127.0.0.1 on a free port in a thread; tests point ``HF_ENDPOINT`` at it.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")


@dataclass
class Repo:
    revisions: dict[str, str]  # branch/tag -> commit
    files: dict[str, dict[str, bytes]]  # commit -> path -> content
    gated_token: str | None = None  # gated: only this token may read


@dataclass
class HubState:
    repos: dict[str, Repo] = field(default_factory=dict)
    delay_s: float = 0.0
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)


def safetensors_header(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    """A safetensors file's first bytes: little-endian u64 header size, then the JSON header
    (no tensor data: kvplan only ever asks for the header)."""
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1}
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    body = json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body


def commit_of(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    state: HubState

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _error(self, status: int, code: str, message: str) -> None:
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        body = json.dumps({"error": message}).encode()
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    def _serve(self) -> None:
        st = self.state
        auth = self.headers.get("Authorization")
        st.requests.append((self.command, self.path, auth))
        if st.delay_s:
            time.sleep(st.delay_s)
        m = RESOLVE.match(unquote(self.path.split("?", 1)[0]))
        if not m:
            return self._error(404, "EntryNotFound", "unknown endpoint")
        repo = st.repos.get(m["repo"])
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        if repo.gated_token is not None and auth != f"Bearer {repo.gated_token}":
            return self._error(401 if auth is None else 403, "GatedRepo",
                               "Access to this gated repo is restricted")
        rev = m["rev"]
        commit = repo.revisions.get(rev, rev if rev in repo.files else None)
        if commit is None:
            return self._error(404, "RevisionNotFound", "Invalid rev id")
        content = repo.files[commit].get(m["path"])
        if content is None:
            return self._error(404, "EntryNotFound", "Entry not found")
        start, end, status = 0, len(content) - 1, 200
        rng = self.headers.get("Range") or self.headers.get("range")
        if rng:
            a, _, b = rng.removeprefix("bytes=").partition("-")
            start, end, status = int(a), min(int(b or end), len(content) - 1), 206
        part = content[start:end + 1]
        self.send_response(status)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{hashlib.sha256(content).hexdigest()}"')
        self.send_header("Content-Length", str(len(part)))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(content)}")
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(part)

    do_GET = _serve
    do_HEAD = _serve


class HubServer:
    def __init__(self, state: HubState):
        handler = type("Handler", (_Handler,), {"state": state})
        self.state = state
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
