"""``multiworker ui`` as a process: prints its URL, serves real jobs to several clients at once
(SSE log streams and polls), the token rule off loopback, a taken port, and a clean exit on Ctrl-C."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from helpers import fake_spec, mw
from uihelpers import UiServer

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")


def get_json(url: str, headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ui_prints_url_serves_and_exits_cleanly(mw_home, sig):
    server = UiServer(mw_home)
    try:
        assert server.url.startswith("http://127.0.0.1:") and "token" not in server.url
        assert "Ctrl-C" in server.printed
        status, doc = get_json(server.base + "/api/jobs")
        assert status == 200 and doc["jobs"] == []
    finally:
        code = server.stop(sig)
    assert code == 0, server.proc.stderr.read()
    assert "Traceback" not in server.proc.stderr.read()


@pytest.mark.parametrize("host", ["127.0.0.2", "0.0.0.0"])
def test_the_printed_url_opens_the_dashboard(mw_home, host):
    server = UiServer(mw_home, "--host", host)
    try:
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())  # as a browser: keeps the cookie
        with opener.open(server.url, timeout=10) as resp:  # follows the token redirect
            assert resp.status == 200 and b"<title>" in resp.read()
    finally:
        assert server.stop() == 0


def test_ui_on_a_taken_port_is_a_one_line_error(mw_home):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = mw("ui", "--port", str(port), home=mw_home, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: --port {port}: cannot listen") and proc.stderr.count("\n") == 1


def test_ui_off_loopback_requires_the_printed_token(mw_home):
    server = UiServer(mw_home, "--host", "0.0.0.0")
    try:
        assert "?token=" in server.url
        token = server.url.split("?token=")[1]
        base = server.base
        assert get_json(base + "/api/jobs")[0] == 401
        assert get_json(base + "/api/jobs", {"X-Multiworker-Token": "guess"})[0] == 401
        assert get_json(base + "/api/jobs", {"X-Multiworker-Token": token})[0] == 200
        assert get_json(f"{base}/api/jobs?token={token}")[0] == 200
    finally:
        assert server.stop() == 0


def test_several_clients_follow_a_running_job_and_the_server_stays_responsive(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{worker: {replicas: 2}}")
    proc = mw("run", str(spec), "--detach", "--", "--epochs", "12", "--epoch-seconds", "0.4", home=mw_home, timeout=600)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().splitlines()[-1]
    server = UiServer(mw_home)
    results: dict[int, list] = {}

    def follow(i: int) -> None:
        url = f"{server.base}/api/jobs/{job_id}/logs/stream?replica=worker-{i % 2}"
        events = []
        with httpx.stream("GET", url, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("event: "):
                    events.append(line[7:])
                elif line.startswith("data: ") and events[-1] == "lines":
                    events.extend(json.loads(line[6:])["lines"])
        results[i] = events

    try:
        threads = [threading.Thread(target=follow, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        reads = 0
        deadline = time.monotonic() + 600  # the streams end with the job, however slow the machine
        while any(t.is_alive() for t in threads):
            for path in ("/api/jobs", f"/api/jobs/{job_id}", f"/api/jobs/{job_id}/series"):
                assert get_json(server.base + path)[0] == 200  # answered while 8 streams are open
            reads += 1
            time.sleep(0.2)
            assert time.monotonic() < deadline, "streams did not end with the job"
        for t in threads:
            t.join()
    finally:
        assert server.stop() == 0
    assert sorted(results) == list(range(8))
    for i, events in results.items():
        assert f"hello from worker-{i % 2} attempt 0" in events, events[:5]
        assert sum('"epoch": 12' in e for e in events) == 1, i  # every line once, the last one too
        assert events[-1] == "end"
    assert reads >= 1


def test_ctrl_c_with_a_log_stream_open_still_exits_promptly(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{worker: {replicas: 1}}")
    proc = mw("run", str(spec), "--detach", "--", "--epochs", "200", "--epoch-seconds", "0.2", home=mw_home, timeout=600)
    job_id = proc.stdout.strip().splitlines()[-1]
    server = UiServer(mw_home)
    got: list[str] = []

    def follow() -> None:
        with httpx.stream("GET", f"{server.base}/api/jobs/{job_id}/logs/stream", timeout=60) as r:
            for line in r.iter_lines():
                got.append(line)

    reader = threading.Thread(target=follow)
    try:
        reader.start()
        deadline = time.monotonic() + 30
        while not any("hello from worker-0" in line for line in got) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert any("hello from worker-0" in line for line in got), got[:5]
        assert server.stop(timeout=60) == 0  # the open stream does not hold the server
        reader.join(timeout=60)
        assert not reader.is_alive()
    finally:
        server.stop()
        assert mw("cancel", job_id, home=mw_home, timeout=600).returncode == 0
