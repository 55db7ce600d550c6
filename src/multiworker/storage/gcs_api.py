"""The Cloud Storage JSON API subset that TensorFlow, google-cloud-storage and gcsfs use, over a BucketMap.

Buckets, objects (get, list with prefix/delimiter/pages, delete, rewrite/copy, compose), media reads
(``alt=media``, ``/download/...`` and ``storage.googleapis.com/BUCKET/OBJECT`` with ranges) and media,
multipart and resumable uploads. Names come from the raw path, so ``%2F`` in an object name is a slash
of the name, not of the route. Reference: https://cloud.google.com/storage/docs/json_api/v1
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
import re
import uuid
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from multiworker.storage.buckets import BadName, BucketMap, ObjectInfo

__all__ = ["make_app"]

log = logging.getLogger(__name__)

_JSON = re.compile(r"^/storage/v1/b(?:/(?P<bucket>[^/]+)(?:/o(?:/(?P<object>.+?))?)?)?/?$")
_ACTION = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>.+?)/(?P<action>rewriteTo|copyTo)"
                     r"/b/(?P<dbucket>[^/]+)/o/(?P<dobject>.+)$")
_COMPOSE = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>.+)/compose$")
_DOWNLOAD = re.compile(r"^/download/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>.+)$")
_UPLOAD = re.compile(r"^/upload/storage/v1/b/(?P<bucket>[^/]+)/o/?$")
_XML = re.compile(r"^/(?P<bucket>[^/]+)/(?P<object>.+)$")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
_CONTENT_RANGE = re.compile(r"bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)$")


def _error(code: int, message: str, reason: str = "") -> JSONResponse:
    reason = reason or {400: "invalid", 403: "forbidden", 404: "notFound", 409: "conflict"}.get(code, "error")
    return JSONResponse({"error": {"code": code, "message": message,
                                   "errors": [{"message": message, "domain": "global", "reason": reason}]}},
                        status_code=code)


def _cased(response: Response, headers: dict[str, str]) -> Response:
    """``response`` with ``headers`` spelled as given: Starlette lowercases names, and TensorFlow looks
    up ``Location`` and ``Range`` case-sensitively."""
    response.raw_headers.extend((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items())
    return response


def _rfc3339(ns: int) -> str:
    when = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


class _Api:
    def __init__(self, buckets: BucketMap):
        self.buckets = buckets
        self.uploads: dict[str, tuple[str, str, Path]] = {}  # upload id -> (bucket, name, partial file)

    def discard_uploads(self) -> None:
        """Remove the partial files of uploads never finished."""
        for _, _, partial in self.uploads.values():
            partial.unlink(missing_ok=True)
        self.uploads.clear()

    # -- helpers -----------------------------------------------------------------------
    def _unmapped(self, bucket: str) -> JSONResponse:
        mapped = ", ".join(f"gs://{b}" for b in self.buckets.buckets)
        return _error(404, f"bucket {bucket} is not mapped here (mapped: {mapped}); run with "
                           f"--map-path gs://{bucket}=./local-dir")

    def _resource(self, request: Request, bucket: str, info: ObjectInfo) -> dict:
        base = f"{request.url.scheme}://{request.url.netloc}"
        quoted = _quote(info.name)
        return {
            "kind": "storage#object", "id": f"{bucket}/{info.name}/{info.mtime_ns}", "name": info.name,
            "bucket": bucket, "generation": str(info.mtime_ns), "metageneration": "1",
            "contentType": "text/plain" if info.is_dir else "application/octet-stream", "storageClass": "STANDARD",
            "size": str(info.size), "timeCreated": _rfc3339(info.mtime_ns), "updated": _rfc3339(info.mtime_ns),
            "selfLink": f"{base}/storage/v1/b/{bucket}/o/{quoted}",
            "mediaLink": f"{base}/download/storage/v1/b/{bucket}/o/{quoted}?generation={info.mtime_ns}&alt=media",
            **(info.hashes or {}),
        }

    def _bucket(self, bucket: str) -> dict:
        return {"kind": "storage#bucket", "id": bucket, "name": bucket, "location": "US",
                "storageClass": "STANDARD", "metageneration": "1", "timeCreated": _rfc3339(0),
                "updated": _rfc3339(0), "projectNumber": "0"}

    # -- routes --------------------------------------------------------------------------
    async def dispatch(self, request: Request) -> Response:
        path = request.scope.get("raw_path", request.url.path.encode()).decode("latin-1").partition("?")[0]
        method = request.method
        try:
            if m := _ACTION.match(path):
                return await self.rewrite(request, *(unquote(m[k]) for k in ("bucket", "object", "dbucket", "dobject")))
            if m := _COMPOSE.match(path):
                return await self.compose(request, unquote(m["bucket"]), unquote(m["object"]))
            if m := _UPLOAD.match(path):
                return await self.upload(request, unquote(m["bucket"]))
            if m := _DOWNLOAD.match(path):
                return self.media(request, unquote(m["bucket"]), unquote(m["object"]))
            if m := _JSON.match(path):
                bucket, name = m["bucket"] and unquote(m["bucket"]), m["object"] and unquote(m["object"])
                if bucket is None and method == "POST":  # buckets.insert: the mapped buckets exist already
                    wanted = str(json.loads(await request.body() or b"{}").get("name", ""))
                    if self.buckets.has_bucket(wanted):
                        return _error(409, f"bucket {wanted} already exists (it is mapped to a local directory)")
                    return _error(403, f"bucket {wanted} cannot be created here; map a directory to it with "
                                       f"--map-path gs://{wanted}=./local-dir")
                if bucket is None:
                    return JSONResponse({"kind": "storage#buckets", "items": [self._bucket(b) for b in self.buckets.buckets]})
                if not self.buckets.has_bucket(bucket):
                    return self._unmapped(bucket)
                if name is None and path.rstrip("/").endswith("/o"):
                    if method == "POST":  # objects.insert without /upload: metadata only, an empty object
                        return await self.upload(request, bucket)
                    return self.list(request, bucket)
                if name is None:
                    return JSONResponse(self._bucket(bucket))
                if method == "DELETE":
                    return self.delete(bucket, name)
                if request.query_params.get("alt") == "media":
                    return self.media(request, bucket, name)
                return self.get(request, bucket, name)
            if m := _XML.match(path):
                return self.media(request, unquote(m["bucket"]), unquote(m["object"]))
        except BadName as exc:
            return _error(400, str(exc))
        return _error(404, f"{method} {path} is not part of the Cloud Storage API the stand-in serves")

    def get(self, request: Request, bucket: str, name: str) -> Response:
        info = self.buckets.stat(bucket, name, hashes=True)
        if info is None:
            return _error(404, f"No such object: {bucket}/{name}")
        return JSONResponse(self._resource(request, bucket, info))

    def delete(self, bucket: str, name: str) -> Response:
        if not self.buckets.delete(bucket, name):
            return _error(404, f"No such object: {bucket}/{name}")
        return Response(status_code=204)

    def list(self, request: Request, bucket: str) -> Response:
        q = request.query_params
        prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
        items, prefixes = self.buckets.list(bucket, prefix, delimiter)
        start, end = q.get("startOffset"), q.get("endOffset")
        if q.get("includeTrailingDelimiter") == "true" and delimiter:
            known = {i.name for i in items}
            items += [ObjectInfo(p, 0, 0, True) for p in prefixes if p not in known and self.buckets.stat(bucket, p)]
        entries = sorted([(i.name, i) for i in items] + [(p, None) for p in prefixes], key=lambda e: e[0])
        entries = [e for e in entries if (not start or e[0] >= start) and (not end or e[0] < end)]
        token = q.get("pageToken")
        if token:
            after = base64.urlsafe_b64decode(token.encode()).decode()
            entries = [e for e in entries if e[0] > after]
        try:
            page = max(1, min(int(q.get("maxResults") or 1000), 1000))
        except ValueError:
            return _error(400, "maxResults must be a number")
        out: dict = {"kind": "storage#objects"}
        if len(entries) > page:
            entries = entries[:page]
            out["nextPageToken"] = base64.urlsafe_b64encode(entries[-1][0].encode()).decode()
        out["items"] = [self._resource(request, bucket, i) for _, i in entries if i is not None]
        out["prefixes"] = [n for n, i in entries if i is None]
        return JSONResponse(out)

    def media(self, request: Request, bucket: str, name: str) -> Response:
        if not self.buckets.has_bucket(bucket):
            return self._unmapped(bucket)
        info = self.buckets.stat(bucket, name, hashes=not request.headers.get("range"))
        path = self.buckets.path(bucket, name)
        if info is None or path is None:
            return _error(404, f"No such object: {bucket}/{name}")
        headers = {"x-goog-generation": str(info.mtime_ns), "x-goog-metageneration": "1",
                   "x-goog-stored-content-length": str(info.size), "Accept-Ranges": "bytes"}
        if info.hashes:
            headers["x-goog-hash"] = ",".join(f"{k.removesuffix('Hash')}={v}" for k, v in info.hashes.items())
        size, first, last = info.size, 0, info.size - 1
        wanted = request.headers.get("range")
        status = 200
        if wanted and (m := _RANGE.match(wanted.strip())):
            if m[1]:
                first = int(m[1])
                last = min(int(m[2]), size - 1) if m[2] else size - 1
            elif m[2]:  # the last N bytes
                first = max(0, size - int(m[2]))
            if first >= size and size > 0:
                headers["Content-Range"] = f"bytes */{size}"
                return _cased(Response(status_code=416), headers)
            if size > 0:
                status = 206
                headers["Content-Range"] = f"bytes {first}-{last}/{size}"
        if request.method == "HEAD" or info.is_dir:
            return _cased(Response(b"", status_code=status), headers)
        with open(path, "rb") as f:
            f.seek(first)
            data = f.read(max(0, last - first + 1))
        return _cased(Response(data, status_code=status, media_type="application/octet-stream"), headers)

    async def rewrite(self, request: Request, bucket: str, name: str, dbucket: str, dname: str) -> Response:
        for b in (bucket, dbucket):
            if not self.buckets.has_bucket(b):
                return self._unmapped(b)
        src = self.buckets.path(bucket, name)
        if src is None or self.buckets.stat(bucket, name) is None:
            return _error(404, f"No such object: {bucket}/{name}")
        try:
            info = self.buckets.write(dbucket, dname, _chunks(src))
        except PermissionError as exc:
            return _error(403, str(exc))
        resource = self._resource(request, dbucket, info)
        if request.url.path.endswith("/copyTo") or "/copyTo/" in request.url.path:
            return JSONResponse(resource)
        return JSONResponse({"kind": "storage#rewriteResponse", "totalBytesRewritten": str(info.size),
                             "objectSize": str(info.size), "done": True, "resource": resource})

    async def compose(self, request: Request, bucket: str, name: str) -> Response:
        if not self.buckets.has_bucket(bucket):
            return self._unmapped(bucket)
        body = json.loads(await request.body() or b"{}")
        sources = []
        for s in body.get("sourceObjects") or []:
            path = self.buckets.path(bucket, s.get("name", ""))
            if path is None or not path.is_file():
                return _error(404, f"No such object: {bucket}/{s.get('name')}")
            sources.append(path.read_bytes())
        try:
            info = self.buckets.write(bucket, name, sources)
        except PermissionError as exc:
            return _error(403, str(exc))
        return JSONResponse(self._resource(request, bucket, info))

    async def upload(self, request: Request, bucket: str) -> Response:
        if not self.buckets.has_bucket(bucket):
            return self._unmapped(bucket)
        q = request.query_params
        kind = q.get("uploadType", "media")
        try:
            if kind == "resumable":
                return await self._resumable(request, bucket)
            if kind == "multipart":
                metadata, data = _multipart(request.headers.get("content-type", ""), await request.body())
                name = q.get("name") or metadata.get("name")
                chunks: Iterable[bytes] = [data]
            else:
                name = q.get("name")
                if name is None and request.headers.get("content-type", "").startswith("application/json"):
                    name = json.loads(await request.body() or b"{}").get("name")
                    chunks = []
                else:
                    chunks = [await request.body()]
            if not name:
                return _error(400, "the upload names no object (name=)")
            info = self.buckets.write(bucket, name, chunks)
        except PermissionError as exc:
            return _error(403, str(exc))
        except ValueError as exc:
            return _error(400, str(exc))
        return JSONResponse(self._resource(request, bucket, info))

    async def _resumable(self, request: Request, bucket: str) -> Response:
        q = request.query_params
        upload_id = q.get("upload_id")
        if upload_id is None:  # a new session: its name, then a Location to send the bytes to
            body = await request.body()
            name = q.get("name") or (json.loads(body).get("name") if body.strip() else None)
            if not name:
                return _error(400, "the upload names no object (name=)")
            target = self.buckets.path(bucket, name)
            if target is None:
                return _error(403, f"gs://{bucket}/{name} is outside every --map-path of bucket {bucket}")
            upload_id = uuid.uuid4().hex
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.parent / f".{target.name or 'dir'}.{upload_id}.upload"
            partial.write_bytes(b"")
            self.uploads[upload_id] = (bucket, name, partial)
            location = request.url.include_query_params(upload_id=upload_id)
            return _cased(Response(status_code=200), {"Location": str(location), "X-GUploader-UploadID": upload_id})
        if upload_id not in self.uploads:
            return _error(404, f"no upload session {upload_id}")
        bucket, name, partial = self.uploads[upload_id]
        if request.method == "DELETE":
            partial.unlink(missing_ok=True)
            del self.uploads[upload_id]
            return Response(status_code=499)
        data = await request.body()
        have = partial.stat().st_size
        total: int | None = None
        m = _CONTENT_RANGE.match(request.headers.get("content-range", "").strip())
        if m:
            if m[3] != "*":
                total = int(m[3])
            if m[1] is not None:
                first = int(m[1])
                if first > have:
                    return _error(400, f"upload {upload_id}: bytes {first}- sent but only {have} received")
                with open(partial, "r+b") as f:
                    f.seek(first)
                    f.write(data)
                    f.truncate(first + len(data))
                have = first + len(data)
        elif data or not request.headers.get("content-range"):
            partial.write_bytes(data)
            have, total = len(data), len(data)
        if total is None or have < total:
            return _cased(Response(status_code=308), {"Range": f"bytes=0-{have - 1}"} if have else {})
        try:
            info = self.buckets.write(bucket, name, _chunks(partial))
        finally:
            partial.unlink(missing_ok=True)
            del self.uploads[upload_id]
        return JSONResponse(self._resource(request, bucket, info))


def _chunks(path: Path, size: int = 1 << 20) -> Iterable[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(size):
            yield chunk


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


def _multipart(content_type: str, body: bytes) -> tuple[dict, bytes]:
    """(metadata, media) of a ``multipart/related`` upload."""
    m = re.search(r'boundary="?([^";]+)"?', content_type)
    if not m:
        raise ValueError("a multipart upload without a boundary")
    parts = body.split(b"--" + m[1].encode())
    found: list[bytes] = []
    for part in parts[1:]:
        if part.startswith(b"--"):
            break
        head, _, content = part.lstrip(b"\r\n").partition(b"\r\n\r\n")
        if content.endswith(b"\r\n"):
            content = content[:-2]
        found.append(content)
    if len(found) < 2:
        raise ValueError("a multipart upload has a metadata part and a media part")
    return json.loads(found[0] or b"{}"), found[1]


def make_app(buckets: BucketMap) -> Starlette:
    """The stand-in's app: every path goes to one dispatcher that reads the raw path."""
    api = _Api(buckets)
    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
    app = Starlette(routes=[Route("/{path:path}", api.dispatch, methods=methods)])
    app.state.discard_uploads = api.discard_uploads
    return app
