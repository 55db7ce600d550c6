"""A fake of the Google APIs the Vertex backend calls, over real HTTP on 127.0.0.1, for the real
clients (aiplatform's JobServiceClient with the REST transport, google-cloud-storage, google.auth).

Shapes, and where each comes from:
Clients reach it with anonymous credentials (the backend's rule for a plain-http emulator): real
ADC would make google-auth call Google itself (token endpoints, the regional access boundary
lookup at iamcredentials.googleapis.com), which a test must not.
- CustomJob: Vertex AI REST reference "REST Resource: projects.locations.customJobs" (name,
  displayName, jobSpec, state (JobState), createTime, startTime, endTime, updateTime, error
  (google.rpc.Status), labels); create is POST .../customJobs returning the CustomJob; get is GET;
  cancel is POST .../customJobs/ID:cancel returning an empty body (google.protobuf.Empty), after
  which the job goes CANCELLING then CANCELLED.
- Errors: Google's JSON error format (cloud.google.com/apis/design/errors, "HTTP mapping"):
  {"error": {"code": 403, "message": ..., "status": "PERMISSION_DENIED"}}; Cloud Storage's
  (cloud.google.com/storage/docs/json_api/v1/status-codes) adds "errors": [{"reason": ...}].
- Cloud Storage JSON API: buckets.get GET /storage/v1/b/BUCKET (a Bucket resource),
  objects.insert POST /upload/storage/v1/b/BUCKET/o?uploadType=multipart (multipart/related: JSON
  metadata then the bytes; returns an Object resource), objects.delete DELETE (204, empty).
- Cloud Logging: entries.list POST /v2/entries:list ({resourceNames, filter, orderBy, pageSize,
  pageToken} -> {entries, nextPageToken}); each LogEntry as Vertex AI writes training output:
  logName projects/P/logs/workerpool0-0, resource {type: ml_job, labels {job_id, project_id,
  task_name}}, jsonPayload {message, levelname, attrs {tag}}, timestamp, severity, insertId (the
  filter gcloud's `ai custom-jobs stream-logs` sends: googlecloudsdk/command_lib/ai/log_util.py).
"""

from __future__ import annotations

import base64
import datetime as dt
import email.parser
import email.policy
import hashlib
import itertools
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FakeGoogle", "canonical"]

_TERMINAL = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"}
_INT64 = {"replicaCount", "bootDiskSizeGb", "acceleratorCount"}


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def canonical(doc):
    """Proto JSON's int64-as-string fields back to ints, to compare with the dict the backend built."""
    if isinstance(doc, dict):
        return {k: (int(v) if k in _INT64 and isinstance(v, str) else canonical(v)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [canonical(v) for v in doc]
    return doc


def _decode_custom_job(raw: bytes) -> dict:
    """The request body as the server reads it: proto JSON (the client sends enums as numbers,
    `$alt=json;enum-encoding=int`) decoded into a CustomJob, shown with enum names."""
    from google.cloud.aiplatform_v1.types import CustomJob
    from google.protobuf.json_format import MessageToDict, Parse

    return MessageToDict(Parse(raw.decode(), CustomJob.pb(CustomJob()), ignore_unknown_fields=False))


class FakeGoogle:
    """One server for Vertex AI jobs, Cloud Storage and Cloud Logging."""

    def __init__(self, *, projects=("proj",), buckets=("bucket",)):
        self.projects = set(projects)
        self.buckets: dict[str, dict[str, bytes]] = {b: {} for b in buckets}
        self.jobs: dict[str, dict] = {}
        self.created: list[dict] = []  # decoded CustomJob bodies, in order
        self.requests: list[tuple[str, str]] = []
        self.entries: list[dict] = []
        self.script: list[str] = ["JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"]  # states the next GETs return
        self.failure_message = "The replica workerpool0-0 exited with a non-zero status of 1."
        self.task_output: dict[str, list[str]] = {}  # task -> lines written when the job runs
        self.create_error: tuple[int, str, str] | None = None
        self.cancels: list[str] = []
        self._ids = itertools.count(1000000000000000001)
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGoogle:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- what tests see --------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        return {"MULTIWORKER_VERTEX_ENDPOINT": self.url, "MULTIWORKER_GCS_ENDPOINT": self.url,
                "MULTIWORKER_LOGGING_ENDPOINT": self.url}

    # -- behaviour ---------------------------------------------------------------------------
    def _advance(self, job: dict) -> None:
        if job["state"] in _TERMINAL:
            return
        if job["state"] == "JOB_STATE_CANCELLING":
            state = "JOB_STATE_CANCELLED"
        elif self.script:
            state = self.script.pop(0)
        else:
            return
        job["state"] = state
        job["updateTime"] = _now()
        if state == "JOB_STATE_RUNNING" and "startTime" not in job:
            job["startTime"] = job["updateTime"]
            self._write_logs(job)
        if state in _TERMINAL:
            job["endTime"] = job["updateTime"]
        if state == "JOB_STATE_FAILED":
            job["error"] = {"code": 3, "message": self.failure_message}
        if state == "JOB_STATE_CANCELLED":
            job["error"] = {"code": 1, "message": "CANCELED"}

    def _write_logs(self, job: dict) -> None:
        project = job["name"].split("/")[1]
        number = job["name"].rsplit("/", 1)[-1]
        entries = [("service", "Waiting for job to be provisioned.")]
        entries += [(task, line) for task, lines in self.task_output.items() for line in lines]
        for task, line in entries:
            n = len(self.entries)
            self.entries.append({
                "insertId": f"{n:08x}",
                "logName": f"projects/{project}/logs/{task}",
                "resource": {"type": "ml_job", "labels": {"job_id": number, "project_id": project, "task_name": task}},
                "jsonPayload": {"message": line, "levelname": "INFO", "attrs": {"tag": task}},
                "timestamp": _now(), "receiveTimestamp": _now(), "severity": "INFO",
                "labels": {"ml.googleapis.com/trial_type": "", "compute.googleapis.com/resource_name": f"cmle-{n}"},
            })

    # -- HTTP --------------------------------------------------------------------------------
    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _send(self, code: int, doc=None):
                body = b"" if doc is None else json.dumps(doc).encode()
                self.send_response(code)
                if doc is not None:
                    self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _error(self, code: int, status: str, message: str, reason: str | None = None):
                error = {"code": code, "message": message, "status": status}
                if reason:
                    error["errors"] = [{"message": message, "domain": "global", "reason": reason}]
                self._send(code, {"error": error})

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _authorized(self) -> bool:
                """Anonymous (no Authorization header), or a bearer token; anything else is refused."""
                auth = self.headers.get("Authorization")
                if auth is None or auth.startswith("Bearer "):
                    return True
                self._error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
                return False

            def do_POST(self):
                path, _, query = self.path.partition("?")
                body = self._body()
                fake.requests.append(("POST", path))
                if not self._authorized():
                    return None
                if m := re.fullmatch(r"/v1/projects/([^/]+)/locations/([^/]+)/customJobs", path):
                    return self._create(m.group(1), m.group(2), body)
                if m := re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+/customJobs/\d+):cancel", path):
                    with fake._lock:
                        job = fake.jobs.get(m.group(1))
                        if job is None:
                            return self._error(404, "NOT_FOUND", f"CustomJob {m.group(1)} not found.")
                        fake.cancels.append(m.group(1))
                        if job["state"] not in _TERMINAL:
                            job["state"] = "JOB_STATE_CANCELLING"
                    return self._send(200, {})
                if m := re.fullmatch(r"/upload/storage/v1/b/([^/]+)/o", path):
                    return self._insert(m.group(1), query, body)
                if path == "/v2/entries:list":
                    return self._entries(json.loads(body))
                return self._error(404, "NOT_FOUND", f"no route {path}")

            def do_GET(self):
                path = self.path.partition("?")[0]
                fake.requests.append(("GET", path))
                if not self._authorized():
                    return None
                if m := re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+/customJobs/\d+)", path):
                    with fake._lock:
                        job = fake.jobs.get(m.group(1))
                        if job is None:
                            return self._error(404, "NOT_FOUND", f"CustomJob {m.group(1)} not found.")
                        fake._advance(job)
                        return self._send(200, job)
                if m := re.fullmatch(r"/storage/v1/b/([^/]+)", path):
                    name = m.group(1)
                    if name not in fake.buckets:
                        return self._error(404, "NOT_FOUND", "The specified bucket does not exist.", "notFound")
                    return self._send(200, {"kind": "storage#bucket", "id": name, "name": name,
                                            "selfLink": f"{fake.url}/storage/v1/b/{name}", "projectNumber": "123456789",
                                            "location": "US-CENTRAL1", "storageClass": "STANDARD",
                                            "timeCreated": _now(), "updated": _now(), "metageneration": "1", "etag": "CAE="})
                return self._error(404, "NOT_FOUND", f"no route {path}")

            def do_DELETE(self):
                path = self.path.partition("?")[0]
                fake.requests.append(("DELETE", path))
                if not self._authorized():
                    return None
                if m := re.fullmatch(r"/storage/v1/b/([^/]+)/o/(.+)", path):
                    objects = fake.buckets.get(m.group(1), {})
                    name = urllib.parse.unquote(m.group(2))
                    if objects.pop(name, None) is None:
                        return self._error(404, "NOT_FOUND", f"No such object: {m.group(1)}/{name}", "notFound")
                    return self._send(204)
                return self._error(404, "NOT_FOUND", f"no route {path}")

            # -- handlers ----------------------------------------------------------------------
            def _create(self, project: str, region: str, raw: bytes):
                if fake.create_error:
                    code, status, message = fake.create_error
                    return self._error(code, status, message)
                if project not in fake.projects:
                    return self._error(403, "PERMISSION_DENIED",
                                       f"Permission 'aiplatform.customJobs.create' denied on resource "
                                       f"'//aiplatform.googleapis.com/projects/{project}/locations/{region}' "
                                       "(or it may not exist).")
                try:
                    body = _decode_custom_job(raw)
                except Exception as exc:  # noqa: BLE001 - what the server says of a body it cannot parse
                    return self._error(400, "INVALID_ARGUMENT", f"Invalid JSON payload received. {exc}")
                with fake._lock:
                    fake.created.append(body)
                    name = f"projects/{project}/locations/{region}/customJobs/{next(fake._ids)}"
                    job = {**body, "name": name, "state": "JOB_STATE_PENDING", "createTime": _now(), "updateTime": _now()}
                    fake.jobs[name] = job
                    return self._send(200, job)

            def _insert(self, bucket: str, query: str, raw: bytes):
                if bucket not in fake.buckets:
                    return self._error(404, "NOT_FOUND", "The specified bucket does not exist.", "notFound")
                params = urllib.parse.parse_qs(query)
                if params.get("uploadType") != ["multipart"]:
                    return self._error(400, "INVALID_ARGUMENT", "this fake takes uploadType=multipart only", "invalid")
                message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                    b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + raw)
                meta_part, data_part = list(message.iter_parts())
                meta = json.loads(meta_part.get_content())
                data = data_part.get_payload(decode=True)
                name = meta.get("name") or params["name"][0]
                fake.buckets[bucket][name] = data
                import google_crc32c

                return self._send(200, {
                    "kind": "storage#object", "id": f"{bucket}/{name}/1", "name": name, "bucket": bucket,
                    "generation": "1", "metageneration": "1", "contentType": meta.get("contentType", "application/octet-stream"),
                    "size": str(len(data)), "md5Hash": base64.b64encode(hashlib.md5(data).digest()).decode(),
                    "crc32c": base64.b64encode(google_crc32c.Checksum(data).digest()).decode(),
                    "timeCreated": _now(), "updated": _now(), "storageClass": "STANDARD", "etag": "CAE="})

            def _entries(self, request: dict):
                job = re.search(r'resource\.labels\.job_id="(\d+)"', request.get("filter", ""))
                since = re.search(r'timestamp>="([^"]+)"', request.get("filter", ""))
                with fake._lock:
                    rows = [e for e in fake.entries
                            if (job is None or e["resource"]["labels"]["job_id"] == job.group(1))
                            and (since is None or e["timestamp"] >= since.group(1))]
                rows.sort(key=lambda e: e["timestamp"])
                start = int(request.get("pageToken") or 0)
                size = int(request.get("pageSize") or 50)
                page = {"entries": rows[start:start + size]} if rows[start:start + size] else {}
                if start + size < len(rows):
                    page["nextPageToken"] = str(start + size)
                return self._send(200, page)

        return Handler
