"""Google Cloud clients for the Vertex backend, and Google's errors mapped once, here, to one-line
errors that name what to fix.

Credentials are the Application Default Credentials gcloud sets. Endpoints are Google's; emulators
and tests point them elsewhere with MULTIWORKER_VERTEX_ENDPOINT, MULTIWORKER_GCS_ENDPOINT and
MULTIWORKER_LOGGING_ENDPOINT (full URLs such as http://127.0.0.1:8080). An emulator reached over
plain http:// gets anonymous credentials, never the user's tokens (as google-cloud-storage does for
STORAGE_EMULATOR_HOST).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from multiworker.errors import BackendError, UserError

__all__ = ["Cloud", "api_error", "split_gs"]

log = logging.getLogger(__name__)

SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
_HINT = "pip install 'multiworker[vertex]'"


def _import_error(exc: ImportError) -> UserError:
    return UserError(f"--backend vertex: needs {exc.name or 'google-cloud-aiplatform'}; {_HINT}")


def split_gs(uri: str, field: str) -> tuple[str, str]:
    """``gs://bucket/some/path`` -> (bucket, some/path); anything else is a one-line error on ``field``."""
    if not uri.startswith("gs://") or not uri[5:].split("/")[0]:
        raise UserError(f"{field}: {uri!r} is not a Cloud Storage path; write it like gs://BUCKET[/PATH]")
    bucket, _, path = uri[5:].partition("/")
    return bucket, path.strip("/")


def api_error(exc: Exception, *, project: str, region: str, what: str) -> Exception:
    """A Google API error as a one-line error naming what to fix (UserError) or BackendError."""
    from google.api_core import exceptions as gexc

    message = getattr(exc, "message", None) or str(exc)
    message = " ".join(str(message).split())[:300]
    if isinstance(exc, (gexc.Unauthenticated, gexc.Unauthorized)):
        return UserError(f"{what}: the credentials were refused ({message}); run "
                         "`gcloud auth application-default login`")
    if isinstance(exc, (gexc.PermissionDenied, gexc.Forbidden)):
        return UserError(f"--project {project}: {what} was refused ({message}); check the project id, that the "
                         "Vertex AI and Cloud Storage APIs are enabled in it, and that your account has the "
                         "Vertex AI User and Storage Object Admin roles")
    if isinstance(exc, (gexc.TooManyRequests, gexc.ResourceExhausted)):
        return UserError(f"--project {project} --region {region}: {what}: quota exceeded ({message}); request more "
                         "quota (IAM & Admin > Quotas), use smaller machines or another region")
    if isinstance(exc, gexc.NotFound):
        return UserError(f"--project {project} --region {region}: {what}: not found ({message}); check the "
                         "project id and that Vertex AI is offered in the region")
    if isinstance(exc, gexc.RetryError):  # retried to its deadline: the last error is the cause
        cause = exc.cause
        reason = " ".join(str(getattr(cause, "message", None) or cause).split())[:300] if cause else message
        return BackendError(f"{what}: no answer from Google Cloud after retrying ({reason}); check the network "
                            "connection (or set HTTPS_PROXY) and retry")
    if isinstance(exc, gexc.InvalidArgument):
        return UserError(f"{what}: Vertex AI rejected the job ({message}); fix the spec field it names")
    return BackendError(f"{what}: {message}")


class Cloud:
    """The three services one Vertex job uses: Vertex AI jobs, Cloud Storage, Cloud Logging."""

    def __init__(self, project: str, region: str):
        self.project = project
        self.region = region
        try:
            import google.auth
            from google.auth.exceptions import DefaultCredentialsError, RefreshError
        except ImportError as exc:
            raise _import_error(exc) from exc
        # urllib3 logs a warning for each connection retry; the one-line error below says what failed
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        if os.environ.get("MULTIWORKER_VERTEX_ENDPOINT", "").startswith("http://"):
            from google.auth.credentials import AnonymousCredentials

            self.credentials = AnonymousCredentials()
            self._refresh_error = RefreshError
            self._jobs = self._storage = self._session = None
            return
        quiet = logging.getLogger("google.auth._default")  # its "metadata server unavailable" warning
        level, quiet.level = quiet.level, logging.ERROR
        try:
            self.credentials, _ = google.auth.default(scopes=SCOPES)
        except DefaultCredentialsError as exc:
            raise UserError("--backend vertex: no Google Cloud credentials found; run "
                            "`gcloud auth application-default login`") from exc
        finally:
            quiet.setLevel(level)
        self._refresh_error = RefreshError
        self._jobs = self._storage = self._session = None

    def _endpoints(self, *, storage: bool) -> list[tuple[str, str]]:
        vertex = os.environ.get("MULTIWORKER_VERTEX_ENDPOINT") or f"{self.region}-aiplatform.googleapis.com"
        named = [("Vertex AI", vertex)]
        if storage:
            named.append(("Cloud Storage", os.environ.get("MULTIWORKER_GCS_ENDPOINT") or "storage.googleapis.com"))
        return named

    def probe(self, *, storage: bool = False, timeout: float = 10.0) -> None:
        """Fail fast, in one line, where Google Cloud cannot be reached at all (no network, DNS, a
        firewall): the clients would retry for two minutes and end with "Timeout of 120.0s exceeded".
        An endpoint reached through a proxy (HTTPS_PROXY) is left to the clients."""
        import socket
        import urllib.parse
        import urllib.request

        for what, endpoint in self._endpoints(storage=storage):
            url = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
            host, port = url.hostname or "", url.port or (80 if url.scheme == "http" else 443)
            proxies = urllib.request.getproxies()
            if proxies.get(url.scheme) and not urllib.request.proxy_bypass(host):
                continue
            try:
                socket.create_connection((host, port), timeout=timeout).close()
            except OSError as exc:
                reason = exc.strerror or str(exc) or type(exc).__name__
                raise BackendError(f"--backend vertex: cannot reach {what} at {host}:{port} ({reason}); check the "
                                   "network connection (or set HTTPS_PROXY) and retry") from exc

    # -- clients (lazy) ----------------------------------------------------------------------
    def jobs(self):
        if self._jobs is None:
            try:
                from google.cloud.aiplatform_v1.services.job_service import (
                    JobServiceClient,
                )
            except ImportError as exc:
                raise _import_error(exc) from exc
            endpoint = os.environ.get("MULTIWORKER_VERTEX_ENDPOINT") or f"{self.region}-aiplatform.googleapis.com"
            self._jobs = JobServiceClient(credentials=self.credentials, transport="rest",
                                          client_options={"api_endpoint": endpoint})
        return self._jobs

    def storage(self):
        if self._storage is None:
            try:
                from google.cloud import storage
            except ImportError as exc:
                raise _import_error(exc) from exc
            options = {}
            if os.environ.get("MULTIWORKER_GCS_ENDPOINT"):
                options["api_endpoint"] = os.environ["MULTIWORKER_GCS_ENDPOINT"]
            self._storage = storage.Client(project=self.project, credentials=self.credentials,
                                           client_options=options or None)
        return self._storage

    def session(self):
        if self._session is None:
            from google.auth.transport.requests import AuthorizedSession

            self._session = AuthorizedSession(self.credentials)
        return self._session

    def call(self, what: str, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` with Google's errors mapped to one-line errors."""
        from google.api_core import exceptions as gexc

        try:
            return fn(*args, **kwargs)
        except gexc.GoogleAPIError as exc:
            raise api_error(exc, project=self.project, region=self.region, what=what) from exc
        except self._refresh_error as exc:
            raise UserError(f"{what}: the credentials could not be refreshed ({exc}); run "
                            "`gcloud auth application-default login`") from exc
        except Exception as exc:
            import requests
            from google.auth.exceptions import TransportError

            if isinstance(exc, (requests.RequestException, TransportError)):
                raise BackendError(f"{what}: cannot reach Google Cloud ({exc}); check the network and retry") from exc
            raise

    # -- Vertex AI -----------------------------------------------------------------------------
    def create_job(self, body: dict) -> dict:
        from google.cloud.aiplatform_v1.types import CustomJob

        job = CustomJob.from_json(json.dumps(body))
        parent = f"projects/{self.project}/locations/{self.region}"
        created = self.call("creating the CustomJob", self.jobs().create_custom_job, parent=parent, custom_job=job)
        return _to_dict(created)

    def get_job(self, name: str) -> dict:
        return _to_dict(self.call("reading the CustomJob", self.jobs().get_custom_job, name=name))

    def cancel_job(self, name: str) -> None:
        self.call("cancelling the CustomJob", self.jobs().cancel_custom_job, name=name)

    # -- Cloud Storage -------------------------------------------------------------------------
    def check_bucket(self, bucket: str) -> None:
        from google.api_core import exceptions as gexc

        try:
            self.call("reading the staging bucket", self.storage().get_bucket, bucket)
        except UserError as exc:
            if isinstance(exc.__cause__, gexc.NotFound):
                raise UserError(f"--staging-bucket gs://{bucket}: the bucket does not exist; create it with "
                                f"`gcloud storage buckets create gs://{bucket} --location={self.region}`") from exc
            raise

    def upload(self, path: Path, bucket: str, name: str) -> str:
        blob = self.storage().bucket(bucket).blob(name)
        self.call(f"uploading {path.name} to gs://{bucket}", blob.upload_from_filename, str(path),
                  content_type="application/gzip")
        return f"gs://{bucket}/{name}"

    def delete(self, uri: str) -> None:
        bucket, name = split_gs(uri, "package")
        self.call(f"deleting {uri}", self.storage().bucket(bucket).blob(name).delete)

    # -- Cloud Logging (REST entries.list) -----------------------------------------------------
    def list_entries(self, filter_: str, page_token: str | None = None) -> dict:
        endpoint = os.environ.get("MULTIWORKER_LOGGING_ENDPOINT") or "https://logging.googleapis.com"
        body: dict[str, Any] = {"resourceNames": [f"projects/{self.project}"], "filter": filter_,
                                "orderBy": "timestamp asc", "pageSize": 1000}
        if page_token:
            body["pageToken"] = page_token
        try:
            response = self.session().post(f"{endpoint.rstrip('/')}/v2/entries:list", json=body, timeout=60)
        except Exception as exc:  # requests' and google.auth's transport errors alike
            raise BackendError(f"reading Cloud Logging: {exc}") from exc
        if response.status_code != 200:
            from google.api_core import exceptions as gexc

            raise api_error(gexc.from_http_response(response), project=self.project, region=self.region,
                            what="reading Cloud Logging")
        return response.json()


def _to_dict(message) -> dict:
    """A proto-plus message as its REST JSON (camelCase, enum names, unset fields left out)."""
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(type(message).pb(message))
