"""Without root, a job's replicas still get a private network namespace where unprivileged user
namespaces are allowed: a holder process unshares one, replicas join it, keep their own uid, reach
each other on loopback, and their ports cannot be reached from the launcher's network."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

_SCRIPT = r"""
import json, os, socket, sys, tempfile, time
from pathlib import Path
from multiworker import procs
from multiworker.netns import open_job_network

REPLICA = '''
import json, os, socket, time
server = socket.create_server(("0.0.0.0", 0))
port = server.getsockname()[1]
socket.create_connection(("127.0.0.1", port), timeout=2).close()
print(json.dumps({"uid": os.getuid(), "netns": os.readlink("/proc/self/ns/net"), "port": port}), flush=True)
time.sleep(30)
'''
net, why = open_job_network("t", named=False)
if net is None:
    print(json.dumps({"unavailable": why}))
    sys.exit(0)
tmp = Path(tempfile.mkdtemp())
child = procs.spawn([sys.executable, "-c", REPLICA], cwd=tmp, env=dict(os.environ), log_path=tmp / "r.log",
                    enter=net.enter)
deadline = time.monotonic() + 30
while not (tmp / "r.log").read_text() and time.monotonic() < deadline:
    time.sleep(0.05)
seen = json.loads((tmp / "r.log").read_text())
try:
    socket.create_connection(("127.0.0.1", seen["port"]), timeout=2).close()
    reach = "connected"
except OSError as exc:
    reach = type(exc).__name__
procs.stop_groups([child], 0.0)
holder = net._holder
net.close()
print(json.dumps({**seen, "uid_here": os.getuid(), "netns_here": os.readlink("/proc/self/ns/net"),
                  "from_launcher": reach, "holder_gone": holder.poll() is not None}))
"""


def _as_unprivileged() -> list[str]:
    """The command prefix and interpreter that run the script as an unprivileged user."""
    if os.geteuid() != 0:
        return [sys.executable]
    if shutil.which("setpriv") is None:
        pytest.skip("as root, needs `setpriv` (util-linux) to run as an unprivileged user")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = "import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', 'pass']).returncode)"
    for python in (sys.executable, "/usr/bin/python3"):  # the first one user nobody may run (and start again)
        if subprocess.run([*nobody, python, "-c", probe], capture_output=True, cwd="/").returncode == 0:
            return [*nobody, python]
    pytest.skip("as root, needs a Python interpreter that user nobody may run")


def test_replicas_join_a_user_owned_network_namespace():
    env = {**os.environ, "PYTHONPATH": str(SRC), "MULTIWORKER_NETNS": "1", "HOME": "/tmp"}
    done = subprocess.run([*_as_unprivileged(), "-c", _SCRIPT], capture_output=True, text=True,
                          env=env, timeout=120, cwd="/")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    if "unavailable" in seen:
        pytest.skip(f"unprivileged user namespaces are not allowed here: {seen['unavailable']}")
    assert seen["netns"] != seen["netns_here"]  # its own namespace ...
    assert seen["uid"] == seen["uid_here"] != 0  # ... with the user's own uid
    assert seen["from_launcher"] == "ConnectionRefusedError"  # its port is not on the launcher's network
    assert seen["holder_gone"]
