"""The dashboard over HTTP (Starlette's TestClient, no server process): every page and API endpoint,
404 for unknown jobs, the token and cross-site rules, 20,000 samples, a job deleted mid-stream."""

from __future__ import annotations

import json
import sys
import time
import warnings

import pytest

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

with warnings.catch_warnings():  # starlette asks for httpx2 here; httpx is what is installed
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient  # noqa: E402

from test_monitor_views import record_job  # noqa: E402

from multiworker.job import Store  # noqa: E402
from multiworker.ui.app import create_app  # noqa: E402
from multiworker.ui.logstream import LogStream, parse_resume  # noqa: E402
from multiworker.ui.views import downsample, failure_summary, pick_headline  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

TOKEN = "s3cret-token"
LOCAL = "http://127.0.0.1:8265"


@pytest.fixture
def store(mw_home) -> Store:
    return Store(mw_home)


@pytest.fixture
def client(mw_home):
    with TestClient(create_app(mw_home, token=TOKEN), base_url=LOCAL) as c:
        yield c


def events_of(text: str) -> list[tuple[str | None, str, dict]]:
    """(id, event, data) of each server-sent event in a response body."""
    out = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in fields:
            out.append((fields.get("id"), fields["event"], json.loads(fields["data"])))
    return out


# -- pages ------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/", "/compare?ids=feed0001,feed0002", "/jobs/feed0001"], ids=["jobs", "compare", "job"])
def test_pages_render_with_the_action_token_and_vendored_charts(client, store, path):
    record_job(store, "feed0001")
    record_job(store, "feed0002")
    r = client.get(path)
    assert r.status_code == 200
    assert f'<meta name="mw-token" content="{TOKEN}">' in r.text
    assert "/static/vendor/uplot/uPlot.iife.min.js" in r.text and "cdn" not in r.text.lower()


def test_static_files_are_served_from_the_package(client):
    for path in ("/static/vendor/uplot/uPlot.iife.min.js", "/static/vendor/uplot/uPlot.min.css",
                 "/static/vendor/uplot/LICENSE", "/static/common.js", "/static/job.js", "/static/app.css"):
        r = client.get(path)
        assert r.status_code == 200 and len(r.content) > 500, path
    assert "uPlot" in client.get("/static/vendor/uplot/uPlot.iife.min.js").text


@pytest.mark.parametrize("path", ["/jobs/nope", "/jobs/nope/files/", "/api/jobs/nope", "/api/jobs/nope/series",
                                  "/api/jobs/nope/logs", "/api/jobs/nope/logs/raw", "/api/jobs/nope/logs/stream",
                                  "/api/jobs/nope/tensorboard", "/api/compare?ids=nope,feed0001"])
def test_unknown_job_is_404(client, store, path):
    record_job(store, "feed0001")
    r = client.get(path)
    assert r.status_code == 404
    if path.startswith("/api/"):
        assert "nope" in r.json()["error"]
    else:
        assert "nope" in r.text and "<html" in r.text


@pytest.mark.parametrize("path", ["/api/jobs/nope/cancel", "/api/jobs/nope/delete"])
def test_unknown_job_actions_are_404(client, path):
    assert client.post(path, headers={"x-multiworker-token": TOKEN}).status_code == 404


def test_output_files_listing_file_and_no_way_out(client, store):
    record_job(store, "feed0001")
    out = store.home / "jobs" / "feed0001" / "output"
    (out / "model").mkdir()
    (out / "metrics.json").write_text('{"accuracy": 0.99}')
    (out / "escape").symlink_to("/etc")
    listing = client.get("/jobs/feed0001/files/")
    assert listing.status_code == 200
    assert 'href="/jobs/feed0001/files/model/"' in listing.text
    assert 'href="/jobs/feed0001/files/metrics.json"' in listing.text
    assert "outside the output directory" in listing.text  # the symlink is listed, not linked
    assert client.get("/jobs/feed0001/files/metrics.json").json() == {"accuracy": 0.99}
    assert client.get("/jobs/feed0001/files/model", follow_redirects=False).status_code == 307
    for bad in ("escape/passwd", "../../../jobs.db", "%2e%2e/%2e%2e/jobs.db"):
        r = client.get(f"/jobs/feed0001/files/{bad}")
        assert r.status_code in (400, 404), bad
        assert "root:" not in r.text


@pytest.mark.parametrize("name", ["page.html", "pic.svg", "feed.xml", "app.js", "x.xhtml", "noext"])
def test_job_files_that_a_browser_would_run_are_served_as_sandboxed_text(client, store, name):
    record_job(store, "feed0001")
    out = store.home / "jobs" / "feed0001" / "output"
    (out / name).write_text("<script>fetch('/api/jobs/feed0001/delete', {method: 'POST'})</script>")
    r = client.get(f"/jobs/feed0001/files/{name}")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert r.headers["content-security-policy"].startswith("sandbox")
    assert r.headers["x-content-type-options"] == "nosniff"


def test_passive_job_files_keep_their_type_under_the_sandbox(client, store):
    record_job(store, "feed0001")
    out = store.home / "jobs" / "feed0001" / "output"
    (out / "curve.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    r = client.get("/jobs/feed0001/files/curve.png")
    assert r.headers["content-type"] == "image/png" and "sandbox" in r.headers["content-security-policy"]


@pytest.mark.parametrize("path", ["/", "/jobs/feed0001", "/jobs/feed0001/files/", "/api/jobs", "/jobs/nope",
                                  "/static/job.js"])
def test_every_response_has_a_content_security_policy(client, store, path):
    record_job(store, "feed0001")
    csp = client.get(path).headers["content-security-policy"]
    assert "script-src 'self'" in csp and "object-src 'none'" in csp and "frame-ancestors 'none'" in csp


def test_nul_in_a_file_path_and_a_fifo_are_clean_400s(client, store):
    import os

    record_job(store, "feed0001")
    out = store.home / "jobs" / "feed0001" / "output"
    os.mkfifo(out / "pipe")
    assert client.get("/jobs/feed0001/files/").status_code == 200  # listed
    for bad in ("pipe", "a%00b", "model%00/x"):
        r = client.get(f"/jobs/feed0001/files/{bad}")
        assert r.status_code == 400, bad
        assert "Traceback" not in r.text


def test_loopback_addresses_other_than_127_0_0_1_are_loopback_hosts(client):
    assert client.get("/api/jobs", headers={"host": "127.0.0.2:8265"}).status_code == 200
    assert client.get("/api/jobs", headers={"host": "[::1]:8265"}).status_code == 200
    assert client.get("/api/jobs", headers={"host": "127.0.0.2.evil.example:8265"}).status_code == 400


def test_token_redirect_never_leaves_the_site(mw_home):
    app = create_app(mw_home, token=TOKEN, remote=True)
    with TestClient(app, base_url="http://192.0.2.10:8265") as c:
        for path in ("//evil.com/", "///evil.com/x", "/\\evil.com/"):
            r = c.get(f"{path}?token={TOKEN}", follow_redirects=False)
            location = r.headers.get("location", "")
            assert r.status_code == 303 and location.startswith("/") and location[1:2] not in ("/", "\\"), path


# -- JSON API ---------------------------------------------------------------------------------
def test_api_jobs_lists_every_job_with_headline(client, store):
    record_job(store, "feed0001", state="Succeeded")
    record_job(store, "feed0002", state="Failed")
    doc = client.get("/api/jobs").json()
    rows = {j["id"]: j for j in doc["jobs"]}
    assert set(rows) == {"feed0001", "feed0002"}
    assert rows["feed0002"]["state"] == "Failed"
    assert rows["feed0001"]["backend"] == "local" and rows["feed0001"]["replicas"] == 3
    assert rows["feed0001"]["headline"] == {"name": "accuracy", "value": pytest.approx(0.7)}
    assert abs(doc["now"] - time.time()) < 5
    assert client.get("/api/jobs?limit=1").json()["jobs"].__len__() == 1
    assert client.get("/api/jobs?limit=x").status_code == 400


def test_api_job_detail_has_replicas_events_spec_and_failure(client, store):
    record_job(store, "feed0001", attempts=2, state="Failed")
    store.update_job("feed0001", message="root cause: worker-1 (pid 7) failed with exit code 1\n  log: /x/worker-1.log\n"
                                         "  | Traceback (most recent call last):\n  | RuntimeError: boom\n"
                                         "also failed [worker-0]: exit code 1: RuntimeError: boom")
    doc = client.get("/api/jobs/feed0001").json()
    assert doc["status"]["state"] == "Failed" and doc["status"]["restarts"] == 1
    assert [r["name"] for r in doc["replicas"]] == ["chief-0", "worker-0", "worker-1"]
    assert {"role", "index", "host", "state", "exit_code", "cpu_percent", "rss_bytes", "progress"} <= set(doc["replicas"][0])
    assert any(e["reason"] == "Restarting" for e in doc["events"])
    assert "worker:" in doc["spec_yaml"] and doc["primary"] == "chief-0"
    assert doc["failure"]["root_cause"] == "worker-1"
    assert doc["failure"]["traceback"] == ["Traceback (most recent call last):", "RuntimeError: boom"]
    assert doc["tensorboard"] == {"state": "stopped", "url": None}
    assert doc["output_exists"] is True


def test_api_series_matches_the_store(client, store):
    record_job(store, "feed0001")
    s = client.get("/api/jobs/feed0001/series").json()
    assert s["epoch_metrics"]["loss"]["chief-0"] == [[1, 1.0], [2, 0.5]]
    assert s["epoch_metrics"]["accuracy"]["chief-0"] == [[1, pytest.approx(0.6)], [2, pytest.approx(0.7)]]
    assert set(s["cpu_percent"]) == {"chief-0", "worker-0", "worker-1"}
    assert s["memory_mib"]["worker-0"][0][1] == 64.0


def test_series_of_20000_samples_is_cut_for_the_browser_and_keeps_the_peak(client, store):
    record_job(store, "feed0001")
    t0 = store.get_job("feed0001").started_at
    rows = [("feed0001", t0 + i * 0.5, name, 10.0 + (i % 7), 100 << 20) for i in range(10_000)
            for name in ("worker-0", "worker-1")]
    rows[12_345] = ("feed0001", rows[12_345][1], rows[12_345][2], 999.0, 100 << 20)  # one spike
    with store.transaction() as conn:
        conn.executemany("INSERT INTO samples (job_id, ts, replica, cpu_percent, rss_bytes) VALUES (?, ?, ?, ?, ?)", rows)
    s = client.get("/api/jobs/feed0001/series?points=800").json()
    assert s["samples_total"] >= 20_000
    for replica in ("worker-0", "worker-1"):
        assert 400 <= len(s["cpu_percent"][replica]) <= 800
    assert max(y for _, y in s["cpu_percent"][rows[12_345][2]]) == 999.0
    assert client.get("/api/jobs/feed0001/series?points=999999").status_code == 400


def test_api_compare_takes_each_jobs_primary_curve(client, store):
    record_job(store, "feed0001")
    record_job(store, "feed0002")
    doc = client.get("/api/compare?ids=feed0001,feed0002").json()
    assert [j["id"] for j in doc["jobs"]] == ["feed0001", "feed0002"]
    assert doc["metrics"] == ["accuracy", "loss"]
    assert doc["jobs"][1]["metrics"]["loss"] == [[1, 1.0], [2, 0.5]]
    assert client.get("/api/compare").status_code == 400


def test_api_logs_tail_attempt_replica_and_raw(client, store):
    record_job(store, "feed0001", attempts=2)
    doc = client.get("/api/jobs/feed0001/logs?replica=worker-1&attempt=0&tail=2").json()
    assert doc == {"replica": "worker-1", "attempt": 0, "lines": ["worker-1 attempt 0 line 3", "worker-1 attempt 0 line 4"]}
    assert client.get("/api/jobs/feed0001/logs").json()["replica"] == "chief-0"  # the primary by default
    assert client.get("/api/jobs/feed0001/logs?replica=worker-9").status_code == 400
    assert client.get("/api/jobs/feed0001/logs?attempt=5").status_code == 400
    log = store.home / "jobs" / "feed0001" / "attempt_1" / "worker-0.log"
    with open(log, "a") as f:
        f.write("x" * 3_000_000 + "\nshort\n" + "y" * 20_000)
    tail = client.get("/api/jobs/feed0001/logs?replica=worker-0&tail=3").json()["lines"]
    assert [len(line) for line in tail] == [10_006, 5, 10_006] and tail[0].endswith(" [...]")
    raw = client.get("/api/jobs/feed0001/logs/raw?replica=worker-0")
    assert raw.headers["content-type"].startswith("text/plain")
    assert raw.text.splitlines()[0] == "worker-0 attempt 1 line 0"


def test_log_stream_sends_the_tail_then_ends_and_resumes_without_repeats(client, store):
    record_job(store, "feed0001", attempts=2)
    with client.stream("GET", "/api/jobs/feed0001/logs/stream?replica=worker-0&tail=3") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = events_of(r.read().decode())
    kinds = [e[1] for e in events]
    assert kinds == ["attempt", "lines", "end"], kinds
    assert events[1][2]["lines"] == [f"worker-0 attempt 1 line {i}" for i in (2, 3, 4)]
    assert events[2][2] == {"state": "Succeeded", "attempt": 1}
    # more lines written later: a reconnect with Last-Event-ID gets only those
    log = store.home / "jobs" / "feed0001" / "attempt_1" / "worker-0.log"
    with open(log, "a") as f:
        f.write("late line\n")
    with client.stream("GET", "/api/jobs/feed0001/logs/stream?replica=worker-0",
                       headers={"last-event-id": events[1][0]}) as r:
        lines = [line for e in events_of(r.read().decode()) if e[1] == "lines" for line in e[2]["lines"]]
    assert lines == ["late line"]


def test_log_stream_pinned_attempt_and_supervisor(client, store):
    record_job(store, "feed0001", attempts=2)
    with client.stream("GET", "/api/jobs/feed0001/logs/stream?replica=worker-1&attempt=0") as r:
        events = events_of(r.read().decode())
    assert events[1][2]["lines"][0] == "worker-1 attempt 0 line 0" and events[-1][1] == "end"
    (store.home / "jobs" / "feed0001" / "supervisor.log").write_text("supervisor says hi\n")
    with client.stream("GET", "/api/jobs/feed0001/logs/stream?replica=supervisor") as r:
        assert "supervisor says hi" in r.read().decode()


def test_log_stream_of_a_job_deleted_meanwhile_says_gone(store):
    record_job(store, "feed0001", state="Running", pid=None)
    stream = LogStream("feed0001", "worker-0", tail=10)
    events, done = stream.poll(store)
    assert [e["event"] for e in events] == ["attempt", "lines"] and not done
    store.delete_job("feed0001")
    events, done = stream.poll(store)
    assert events == [{"event": "gone", "data": {"job": "feed0001"}}] and done


def test_cancel_and_delete_of_finished_jobs(client, store):
    record_job(store, "feed0001")
    h = {"x-multiworker-token": TOKEN}
    r = client.post("/api/jobs/feed0001/cancel", headers=h)
    assert r.status_code == 200 and r.json()["state"] == "Succeeded"  # already ended: unchanged
    r = client.post("/api/jobs/feed0001/delete", headers=h)
    assert r.status_code == 200 and r.json()["deleted"] is True
    assert not store.has_job("feed0001") and not (store.home / "jobs" / "feed0001").exists()
    assert client.get("/api/jobs/feed0001").status_code == 404
    assert client.get("/api/jobs").json()["jobs"] == []


def test_tensorboard_starts_on_demand_once_and_stops_with_the_app(mw_home, store, monkeypatch):
    record_job(store, "feed0001")
    (store.home / "jobs" / "feed0001" / "output" / "logs").mkdir()
    from multiworker.monitor import tensorboard

    # a real process over real HTTP standing in for TensorBoard (which takes long to import)
    monkeypatch.setattr(tensorboard, "tensorboard_command",
                        lambda logdir, host, port: [sys.executable, "-m", "http.server", str(port), "--bind", host,
                                                    "--directory", str(logdir)])
    app = create_app(mw_home, token=TOKEN)
    with TestClient(app, base_url=LOCAL) as c:
        r = c.post("/api/jobs/feed0001/tensorboard", headers={"x-multiworker-token": TOKEN})
        assert r.status_code == 200 and r.json()["state"] == "running", r.text
        url = r.json()["url"]
        import urllib.request

        assert urllib.request.urlopen(url, timeout=5).status == 200
        again = c.post("/api/jobs/feed0001/tensorboard", headers={"x-multiworker-token": TOKEN}).json()
        assert again["url"] == url
        assert c.get("/api/jobs/feed0001/tensorboard").json() == {"state": "running", "url": url}
        proc = app.state.tensorboards._running["feed0001"].proc
    assert proc.poll() is not None  # stopped with the app


# -- the token rule -----------------------------------------------------------------------------
def test_actions_need_the_token_header_and_same_origin(client, store):
    record_job(store, "feed0001")
    assert client.post("/api/jobs/feed0001/delete").status_code == 403
    assert client.post("/api/jobs/feed0001/delete", headers={"x-multiworker-token": "wrong"}).status_code == 403
    # a form posted from another site cannot set the header; even with it, a foreign Origin is refused
    evil = {"x-multiworker-token": TOKEN, "origin": "http://evil.example"}
    assert client.post("/api/jobs/feed0001/delete", headers=evil).status_code == 403
    assert client.get("/api/jobs/feed0001/cancel").status_code == 405
    assert store.has_job("feed0001")
    ok = {"x-multiworker-token": TOKEN, "origin": LOCAL}
    assert client.post("/api/jobs/feed0001/cancel", headers=ok).status_code == 200


def test_loopback_server_refuses_foreign_host_headers(client):
    assert client.get("/api/jobs").status_code == 200
    r = client.get("/api/jobs", headers={"host": "attacker.example:8265"})  # DNS rebinding
    assert r.status_code == 400 and "Host" in r.json()["error"]
    assert client.get("/api/jobs", headers={"host": "localhost:8265"}).status_code == 200


def test_remote_server_needs_the_token_for_every_read(mw_home, store):
    record_job(store, "feed0001")
    app = create_app(mw_home, token=TOKEN, remote=True)
    with TestClient(app, base_url="http://192.0.2.10:8265") as c:
        for path in ("/", "/jobs/feed0001", "/api/jobs", "/api/jobs/feed0001/series"):
            assert c.get(path).status_code == 401, path
        assert c.get("/api/jobs", headers={"x-multiworker-token": TOKEN}).status_code == 200
        assert c.get(f"/api/jobs?token={TOKEN}").status_code == 200
        assert c.get("/api/jobs?token=nope").status_code == 401
        assert c.get("/static/app.css").status_code == 200  # no job data there
        r = c.get(f"/jobs/feed0001?token={TOKEN}", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/jobs/feed0001"
        assert "HttpOnly" in r.headers["set-cookie"] and "SameSite=Strict" in r.headers["set-cookie"]
        assert c.get("/jobs/feed0001").status_code == 200  # the cookie now
        # the cookie alone does not make an action: that needs the header
        assert c.post("/api/jobs/feed0001/delete").status_code == 403
    assert store.has_job("feed0001")


# -- pure helpers ------------------------------------------------------------------------------
def test_downsample_keeps_ends_and_extremes():
    points = [[i, float(i % 10)] for i in range(10_000)]
    points[5000][1] = -50.0
    out = downsample(points, 200)
    assert len(out) <= 200 and out[0] == points[0] and out[-1] == points[-1]
    assert [5000, -50.0] in out
    assert [p[0] for p in out] == sorted(p[0] for p in out)
    assert downsample(points[:10], 200) == points[:10]


def test_pick_headline_and_failure_summary():
    assert pick_headline({"kind": "final", "test_loss": 0.1, "test_accuracy": 0.99}) == {"name": "test_accuracy", "value": 0.99}
    assert pick_headline({"kind": "epoch", "epoch": 2, "loss": 0.3, "images_per_sec": 10.0}) == {"name": "loss", "value": 0.3}
    assert pick_headline(None) is None
    assert failure_summary({"state": "Succeeded", "message": "x"}) is None
    lost = failure_summary({"state": "Lost", "message": "the supervisor (pid 1) is gone"})
    assert lost == {"message": "the supervisor (pid 1) is gone", "root_cause": None, "traceback": [], "details": []}


def test_parse_resume():
    assert parse_resume("2:4096") == (2, 4096)
    assert parse_resume(None) is None and parse_resume("x:1") is None and parse_resume("-1:0") is None


def test_every_page_asset_is_in_the_wheel_package_data():
    import fnmatch
    import tomllib
    from pathlib import Path

    import multiworker

    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["multiworker"]
    package = Path(multiworker.__file__).parent
    assets = [p.relative_to(package).as_posix() for d in ("ui/static", "ui/templates")
              for p in (package / d).rglob("*") if p.is_file()]
    assert len(assets) > 10
    assert [a for a in assets if not any(fnmatch.fnmatch(a, g) for g in globs)] == []


def test_cli_without_the_web_stack_names_the_extra(monkeypatch):
    import typer
    from typer.testing import CliRunner

    import multiworker.ui
    from multiworker.cli import ui_cmd

    monkeypatch.setattr(multiworker.ui, "missing_dependencies", lambda: ["uvicorn"])
    app = typer.Typer()
    ui_cmd.register(app)
    app.command("noop", hidden=True)(lambda: None)  # a typer app with one command would take no name
    result = CliRunner().invoke(app, ["ui"])
    assert result.exit_code == 1 and "pip install 'multiworker[ui]'" in str(result.exception)


def test_cli_bad_host_is_one_line_error(mw_home):
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "multiworker", "ui", "--host", "no-such-host.invalid"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --host no-such-host.invalid: ") and proc.stderr.count("\n") == 1
