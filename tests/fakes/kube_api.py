"""A small fake Kubernetes API server over real HTTP, for the real ``kubernetes`` client.

It serves what multiworker's Kubernetes backend calls: custom objects (JobSet, TFJob) create / get /
list / watch / delete, pods list / watch / deletecollection / log (with ``follow``), events list /
watch. Watches honour ``resourceVersion`` and ``timeoutSeconds``; ``compact()`` drops history and
closes open watches, so a client re-watching from an old version gets the ``ERROR`` event with a
410 ``Expired`` Status, as kube-apiserver sends it. Requests without the bearer token get 401.

Shapes follow the Kubernetes API reference (core/v1 Pod, PodStatus, ContainerStatus, Event, Status;
meta/v1 List metadata.resourceVersion; watch events {type, object}) so the client's own models
deserialize them. The tests' scenarios (``tests/fakes/kube_cluster.py``) play the controllers.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import yaml

__all__ = ["FakeKube", "now"]


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _status(code: int, reason: str, message: str) -> dict:
    """meta/v1 Status, as the API server returns for errors."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def _matches(obj: dict, label_selector: str | None, field_selector: str | None) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, (label_selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    for term in filter(None, (field_selector or "").split(",")):
        key, _, value = term.partition("=")
        if key == "metadata.name" and obj["metadata"]["name"] != value:
            return False
    return True


class FakeKube:
    """The fake server's state: objects by (resource, namespace, name), a change history, pod logs."""

    def __init__(self, token: str = "good-token"):
        self.token = token
        self.cond = threading.Condition()
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.history: list[tuple[int, str, str, dict]] = []  # (rv, resource, type, object)
        self.rv = 1000
        self.oldest = 0  # watches from a version below this get 410
        self.epoch = 0  # bumped by compact(): open watches end
        self.logs: dict[tuple[str, str], dict] = {}  # (namespace, pod) -> {"data": bytearray, "done": bool}
        self.requests: list[tuple[str, str, dict]] = []
        self.gone_sent = 0
        self.on_create = None  # callback(resource, obj) for scenarios
        self.crds = {"jobsets", "tfjobs"}  # custom resources installed (the others 404, as without the CRD)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # -- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> FakeKube:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self.cond:
            self.epoch += 1
            for log in self.logs.values():
                log["done"] = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def kubeconfig(self, path: Path, *, token: str | None = None, namespace: str = "default") -> Path:
        """A kubeconfig whose context ``fake`` points at this server with a bearer token."""
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
               "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
               "users": [{"name": "fake", "user": {"token": token or self.token}}],
               "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}]}
        path.write_text(yaml.safe_dump(doc))
        return path

    # -- state changes (scenarios call these) ---------------------------------------------------
    def put(self, resource: str, obj: dict) -> dict:
        """Create or replace an object; record ADDED or MODIFIED."""
        with self.cond:
            meta = obj.setdefault("metadata", {})
            key = (resource, meta.setdefault("namespace", "default"), meta["name"])
            kind = "MODIFIED" if key in self.objects else "ADDED"
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now())
            self.rv += 1
            meta["resourceVersion"] = str(self.rv)
            self.objects[key] = copy.deepcopy(obj)
            self.history.append((self.rv, resource, kind, copy.deepcopy(obj)))
            self.cond.notify_all()
            return copy.deepcopy(obj)

    def delete(self, resource: str, namespace: str, name: str) -> dict | None:
        with self.cond:
            obj = self.objects.pop((resource, namespace, name), None)
            if obj is None:
                return None
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.history.append((self.rv, resource, "DELETED", copy.deepcopy(obj)))
            if resource == "pods":
                self.logs.setdefault((namespace, name), {"data": bytearray(), "done": True})["done"] = True
            self.cond.notify_all()
            return obj

    def get(self, resource: str, namespace: str, name: str) -> dict | None:
        with self.cond:
            obj = self.objects.get((resource, namespace, name))
            return copy.deepcopy(obj) if obj else None

    def items(self, resource: str, namespace: str = "default", labels: str | None = None) -> list[dict]:
        with self.cond:
            return [copy.deepcopy(o) for (r, ns, _), o in self.objects.items()
                    if r == resource and ns == namespace and _matches(o, labels, None)]

    def write_log(self, namespace: str, pod: str, text: str, *, done: bool = False) -> None:
        with self.cond:
            log = self.logs.setdefault((namespace, pod), {"data": bytearray(), "done": False})
            log["data"] += text.encode()
            log["done"] = log["done"] or done
            self.cond.notify_all()

    def compact(self) -> None:
        """Forget history up to now and end open watches (like an etcd compaction plus a watch cache reset)."""
        with self.cond:
            self.oldest = self.rv + 1
            self.history.clear()
            self.epoch += 1
            self.cond.notify_all()

    def wait_for(self, predicate, timeout: float = 30.0):
        """Wait until ``predicate(self)`` is truthy; return its value."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                value = predicate(self)
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("fake kube: condition not met")
                self.cond.wait(min(left, 0.2))

    def calls(self, method: str, path_part: str) -> list[dict]:
        return [q for m, p, q in list(self.requests) if m == method and path_part in p]


def _handler(fake: FakeKube):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        # -- plumbing ---------------------------------------------------------------------------
        def _send(self, code: int, doc: dict) -> None:
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _start_stream(self, content_type: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _end_stream(self) -> None:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            self.close_connection = True

        def _route(self, method: str) -> None:
            url = urlparse(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            fake.requests.append((method, url.path, query))
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            if self.headers.get("Authorization") != f"Bearer {fake.token}":
                return self._send(401, _status(401, "Unauthorized", "Unauthorized"))
            parts = url.path.strip("/").split("/")
            # /api/v1/namespaces/NS/RES[/NAME[/log]]  or  /apis/GROUP/VERSION/namespaces/NS/RES[/NAME]
            start = 2 if parts[0] == "api" else 3
            if len(parts) < start + 3 or parts[start] != "namespaces":
                return self._send(404, _status(404, "NotFound", f"the server could not find {url.path}"))
            namespace, resource, rest = parts[start + 1], parts[start + 2], parts[start + 3:]
            if parts[0] == "apis" and resource not in fake.crds:
                return self._send(404, _status(404, "NotFound", "the server could not find the requested resource"))
            try:
                self._dispatch(method, namespace, resource, rest, query, body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _dispatch(self, method, namespace, resource, rest, query, body) -> None:
            if rest[1:] == ["log"] and method == "GET":
                return self._log(namespace, rest[0], query)
            if rest:
                name = rest[0]
                if method == "GET":
                    obj = fake.get(resource, namespace, name)
                    return self._send(200, obj) if obj else self._send(
                        404, _status(404, "NotFound", f'{resource} "{name}" not found'))
                if method == "DELETE":
                    obj = fake.delete(resource, namespace, name)
                    if obj is None:
                        return self._send(404, _status(404, "NotFound", f'{resource} "{name}" not found'))
                    if query.get("propagationPolicy") == "Foreground" or (body or {}).get("propagationPolicy"):
                        for pod in fake.items("pods", namespace):
                            if name in (pod["metadata"].get("labels") or {}).values():
                                fake.delete("pods", namespace, pod["metadata"]["name"])
                    return self._send(200, obj)
            elif method == "POST":
                if fake.get(resource, namespace, body["metadata"]["name"]):
                    return self._send(409, _status(409, "AlreadyExists",
                                                   f'{resource} "{body["metadata"]["name"]}" already exists'))
                body["metadata"]["namespace"] = namespace
                obj = fake.put(resource, body)
                if fake.on_create:
                    fake.on_create(resource, obj)
                return self._send(201, obj)
            elif method == "DELETE":
                for obj in fake.items(resource, namespace, query.get("labelSelector")):
                    fake.delete(resource, namespace, obj["metadata"]["name"])
                return self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}})
            elif method == "GET" and query.get("watch") in ("true", "1"):
                return self._watch(namespace, resource, query)
            elif method == "GET":
                with fake.cond:
                    items = [o for o in fake.items(resource, namespace)
                             if _matches(o, query.get("labelSelector"), query.get("fieldSelector"))]
                    version = str(fake.rv)
                return self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": version},
                                        "items": items})
            self._send(405, _status(405, "MethodNotAllowed", f"{method} is not supported here"))

        def _watch(self, namespace: str, resource: str, query: dict) -> None:
            since = int(query.get("resourceVersion") or 0)
            deadline = time.monotonic() + float(query.get("timeoutSeconds") or 30)
            self._start_stream("application/json")
            with fake.cond:
                epoch = fake.epoch
                if since < fake.oldest - 1:
                    fake.gone_sent += 1
                    status = _status(410, "Expired", f"too old resource version: {since} ({fake.oldest - 1})")
                    self._chunk(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
                    return self._end_stream()
            sent = since
            while time.monotonic() < deadline:
                with fake.cond:
                    if fake.epoch != epoch:
                        break
                    events = [(rv, t, o) for rv, r, t, o in fake.history if r == resource and rv > sent
                              and o["metadata"].get("namespace") == namespace
                              and _matches(o, query.get("labelSelector"), query.get("fieldSelector"))]
                    if not events:
                        fake.cond.wait(min(0.2, max(0.0, deadline - time.monotonic())))
                        continue
                for rv, kind, obj in events:
                    self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                    sent = rv
            self._end_stream()

        def _log(self, namespace: str, name: str, query: dict) -> None:
            pod = fake.get("pods", namespace, name)
            if pod is None:
                return self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))
            if pod["status"].get("phase") == "Pending":
                return self._send(400, _status(400, "BadRequest", f'container "tensorflow" in pod "{name}" is '
                                                                  "waiting to start: ContainerCreating"))
            follow = query.get("follow") == "true"
            self._start_stream("text/plain")
            offset = 0
            while True:
                with fake.cond:
                    log = fake.logs.setdefault((namespace, name), {"data": bytearray(), "done": False})
                    data, done = bytes(log["data"][offset:]), log["done"]
                    if not data and not done and follow:
                        fake.cond.wait(0.2)
                        continue
                if data:
                    self._chunk(data)
                    offset += len(data)
                if done or not follow:
                    break
            self._end_stream()

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def do_DELETE(self) -> None:
            self._route("DELETE")

    return Handler
