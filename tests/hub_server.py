"""A Hugging Face hub on loopback, for huggingface_hub (the real client) to download from.

It serves repositories the tests make, the way huggingface.co does for huggingface_hub 0.3x and
2.x (``file_download.py``, ``hf_api.py``, ``_snapshot_download.py``):

- ``GET /api/{models,datasets}/REPO[/revision/REV][?blobs=1]``: the repo's info (``sha`` = the
  commit REV points at, ``siblings`` with ``size``, ``blobId`` and ``lfs.sha256``);
- ``GET /api/{models,datasets}/REPO/tree/REV[?recursive=...]``: every file of that commit (``path``,
  ``size``, ``oid`` = its git blob id, ``lfs.oid`` = its sha256), one page: what snapshot_download
  lists from 1.x on;
- ``HEAD|GET /[datasets/]REPO/resolve/REV/FILE``: a plain file answers 200 with ``ETag`` (its git
  blob id), ``X-Repo-Commit`` and ``Content-Length``; an LFS file (weights, parquet) answers 302 to
  ``/cdn/SHA256`` on another host name (``localhost``) with ``X-Linked-Etag`` (its sha256), ``X-Linked-Size`` and ``X-Repo-Commit``, as
  the hub redirects to its CDN;
- ``GET /cdn/SHA256``: the bytes, honouring ``Range: bytes=N-`` (206) so a cut download resumes;
- errors as the hub sends them: ``X-Error-Code`` ``RepoNotFound`` (401), ``RevisionNotFound`` and
  ``EntryNotFound`` (404), ``GatedRepo`` (403 on files; the info stays public, as on the hub).

Faults a test turns on: ``cut`` (the next GET of a file stops after N bytes, the connection
closed), ``corrupt`` (a file served with bytes that do not match its sha256), ``gated`` (repos),
``delay`` (seconds before every answer). ``requests`` lists what was asked, for assertions.

A thread of the test process, bound to 127.0.0.1 on a free port: nothing leaves the machine.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".parquet", ".model")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    kind: str  # models | datasets
    id: str
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None


class Hub:
    """``with Hub() as hub: hub.add("org/name", {"config.json": b"..."}); os.environ["HF_ENDPOINT"] = hub.url``"""

    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], Repo] = {}
        self.cut: dict[str, int] = {}  # file name -> bytes sent before the next GET of it is cut (once)
        self.corrupt: set[str] = set()  # file names served with their last byte changed
        self.gated: set[str] = set()  # repo ids whose files need a token
        self.delay = 0.0
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="test-hub", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def cdn_url(self) -> str:
        """Where LFS files are redirected: the same server under another name (``localhost``), as the
        hub's CDN is another host; huggingface_hub 1.x and later follow a redirect to the same host
        and would read the file's metadata from the CDN's answer instead of the hub's."""
        return f"http://localhost:{self._server.server_address[1]}"

    def __enter__(self) -> Hub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def add(self, repo_id: str, files: dict[str, bytes] | Path, *, kind: str = "models", branch: str = "main") -> str:
        """A new commit on ``branch`` holding ``files`` (a dict, or every file of a folder); its sha."""
        if isinstance(files, Path):
            files = {str(p.relative_to(files)): p.read_bytes() for p in sorted(files.rglob("*")) if p.is_file()}
        repo = self.repos.setdefault((kind, repo_id), Repo(kind, repo_id))
        digest = hashlib.sha1(json.dumps([repo_id, branch, len(repo.commits)]).encode())
        for name in sorted(files):
            digest.update(name.encode() + hashlib.sha256(files[name]).digest())
        commit = digest.hexdigest()
        repo.commits[commit] = dict(files)
        repo.refs[branch] = commit
        return commit

    def commit_of(self, repo: Repo, revision: str) -> str | None:
        return repo.refs.get(revision) or (revision if revision in repo.commits else None)

    def blob(self, sha256: str) -> bytes | None:
        for repo in self.repos.values():
            for files in repo.commits.values():
                for data in files.values():
                    if hashlib.sha256(data).hexdigest() == sha256:
                        return data
        return None

    def log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def gets(self, name: str) -> list[Request]:
        """The GETs that sent bytes of file ``name`` (resolve or CDN)."""
        return [r for r in self.requests if r.method == "GET" and r.path.endswith(("/" + name, "name=" + name))]


def is_lfs(name: str) -> bool:
    return name.endswith(LFS_SUFFIXES)


def _sibling(name: str, data: bytes) -> dict[str, object]:
    entry: dict[str, object] = {"rfilename": name, "size": len(data), "blobId": git_blob_id(data)}
    if is_lfs(name):
        entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
    return entry


def _tree_entry(name: str, data: bytes) -> dict[str, object]:
    entry: dict[str, object] = {"type": "file", "path": name, "size": len(data), "oid": git_blob_id(data)}
    if is_lfs(name):
        entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
    return entry


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet: pytest shows failures
            pass

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _send(self, status: int, headers: dict[str, str], body: bytes = b"", head: bool = False) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            if "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head and body:
                self.wfile.write(body)

        def _error(self, status: int, code: str, message: str, head: bool) -> None:
            body = json.dumps({"error": message}).encode()
            self._send(status, {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"},
                       body, head)

        def _answer(self, head: bool) -> None:
            path = urlsplit(self.path).path
            hub.log(Request(self.command, unquote(self.path), self.headers.get("Range")))
            if hub.delay:
                time.sleep(hub.delay)
            parts = [unquote(p) for p in path.strip("/").split("/")]
            if parts[:1] == ["api"] and parts[4:5] == ["tree"] and len(parts) >= 6:
                return self._tree(parts[1], parts[2] + "/" + parts[3], parts[5], head)
            if parts[:1] == ["api"] and len(parts) >= 4:
                return self._info(parts[1], parts[2] + "/" + parts[3], parts[5] if parts[4:5] == ["revision"] else "main", head)
            if parts[:1] == ["cdn"] and len(parts) == 2:
                return self._cdn(parts[1], head)
            kind = "models"
            if parts[:1] == ["datasets"]:
                kind, parts = "datasets", parts[1:]
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve(kind, parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]), head)
            self._error(404, "EntryNotFound", f"no route for {path}", head)

        def _commit(self, kind: str, repo_id: str, revision: str, head: bool, *, files: bool = False) -> tuple[str, dict[str, bytes]] | None:
            """The commit ``revision`` names and its files, or None with the hub's error sent: the
            repo missing (401), gated (403, for its ``files`` only: the info stays public), the
            revision unknown (404)."""
            repo = hub.repos.get((kind, repo_id))
            if repo is None:
                self._error(401, "RepoNotFound", "Repository not found", head)
                return None
            if files and repo_id in hub.gated:
                self._error(403, "GatedRepo", f"Access to model {repo_id} is restricted.", head)
                return None
            commit = hub.commit_of(repo, revision)
            if commit is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
                return None
            return commit, repo.commits[commit]

        def _info(self, kind: str, repo_id: str, revision: str, head: bool) -> None:
            found = self._commit(kind, repo_id, revision, head)
            if found is None:
                return
            commit, files = found
            body = json.dumps({"id": repo_id, "sha": commit, "private": False,
                               "gated": "manual" if repo_id in hub.gated else False,
                               "siblings": [_sibling(n, d) for n, d in sorted(files.items())]}).encode()
            self._send(200, {"Content-Type": "application/json"}, body, head)

        def _tree(self, kind: str, repo_id: str, revision: str, head: bool) -> None:
            found = self._commit(kind, repo_id, revision, head)
            if found is None:
                return
            body = json.dumps([_tree_entry(n, d) for n, d in sorted(found[1].items())]).encode()
            self._send(200, {"Content-Type": "application/json"}, body, head)

        def _resolve(self, kind: str, repo_id: str, revision: str, name: str, head: bool) -> None:
            found = self._commit(kind, repo_id, revision, head, files=True)
            if found is None:
                return
            commit, files = found
            data = files.get(name)
            if data is None:
                return self._error(404, "EntryNotFound", f"{name} does not exist at {commit}", head)
            common = {"X-Repo-Commit": commit}
            if is_lfs(name):
                sha = hashlib.sha256(data).hexdigest()
                return self._send(302, {**common, "Location": f"{hub.cdn_url}/cdn/{sha}?name={name}",
                                        "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data)),
                                        "ETag": f'"{git_blob_id(data)}"'}, b"", head)
            self._send(200, {**common, "ETag": f'"{git_blob_id(data)}"', "Content-Type": "application/octet-stream"},
                       data, head)

        def _cdn(self, sha: str, head: bool) -> None:
            data = hub.blob(sha)
            if data is None:
                return self._error(404, "EntryNotFound", "no such blob", head)
            name = urlsplit(self.path).query.partition("name=")[2]
            if name in hub.corrupt:
                data = data[:-1] + bytes([data[-1] ^ 0xFF])
            start = 0
            wanted = self.headers.get("Range")
            if wanted and wanted.startswith("bytes=") and wanted.endswith("-"):
                start = int(wanted[len("bytes="):-1])
            headers = {"Content-Type": "application/octet-stream", "ETag": f'"{sha}"', "Accept-Ranges": "bytes",
                       "Content-Length": str(len(data) - start)}
            if start:
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            cut = None if head else hub.cut.pop(name, None)
            self.send_response(206 if start else 200)
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            if head:
                return
            body = data[start:]
            if cut is not None:  # a connection lost half-way: fewer bytes than Content-Length, then closed
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler
