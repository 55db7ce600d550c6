"""A Kubernetes API server nobody answers at: one line naming the cluster, the cause and the fix
(not urllib3's retry warnings, not a message cut mid-string), printed once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

from multiworker.procs import free_ports  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}
  name: c
contexts:
- context: {{cluster: c, user: u}}
  name: nowhere
current-context: nowhere
users:
- name: u
  user: {{token: abc}}
"""


def test_unreachable_api_server_is_one_clean_line(tmp_path, mw_home):
    port = free_ports(1)[0]  # nothing listens there
    (tmp_path / "kubeconfig").write_text(KUBECONFIG.format(port=port))
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig"), "MULTIWORKER_HOME": str(mw_home),
           "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([sys.executable, "-m", "multiworker", "run", str(REPO / "examples" / "mnist" / "job.yaml"),
                           "--backend", "kubernetes", "--image", "gcr.io/p/trainer:1"],
                          capture_output=True, text=True, env=env, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    said = [line for line in out.splitlines() if "cannot reach the API server" in line]
    assert len(said) == 1, out
    assert f"context nowhere (https://127.0.0.1:{port})" in said[0]
    assert "([Errno 111] Connection refused); check the cluster is up" in said[0], said[0]
    assert "urllib3" not in out and "Retrying" not in out and "Traceback" not in out, out


def test_the_cause_is_taken_from_urllib3s_wrapped_error():
    from urllib3.exceptions import MaxRetryError, NewConnectionError

    from multiworker.backends.kubernetes.api import _unreachable

    refused = NewConnectionError(None, "HTTPSConnection(host='10.0.0.1', port=6443): Failed to establish a new "
                                 "connection: [Errno 111] Connection refused")
    assert _unreachable(MaxRetryError(None, "/apis/x", refused)) == "[Errno 111] Connection refused"
    dns = NewConnectionError(None, "Failed to resolve 'k8s.example' ([Errno -2] Name or service not known)")
    assert _unreachable(MaxRetryError(None, "/apis/x", dns)) == "[Errno -2] Name or service not known"
