"""The fork server ("zygote") of the local backend: one interpreter that imports TensorFlow once,
then forks a replica for each request, so a replica (and every restart of one) starts without
importing TensorFlow again (1.7 s of a 2.3 s start-up on the measured host).

``python -m multiworker.zygote [LABEL...]`` (the label only names it in ``ps``),
started by :mod:`multiworker.backends.local.forkserver` with the replicas' own interpreter and
environment (their per-replica identity aside). It speaks JSON lines: requests on stdin, one
``{"forked": pid}`` or ``{"error": ...}`` per request and an ``{"exit": pid, "code": n}`` (raw,
negative for a signal) per child that ended, on stdout; first ``{"ready": true}`` or
``{"ready": false, "why": ...}``.

A forked child becomes what ``python -m MODULE ARGS`` would be: its own session, killed if the
zygote dies, stdin from /dev/null, stdout and stderr appended to its log (0600), the request's
working directory, environment, ``sys.argv`` and ``sys.path[0]``, fresh random seeds, and the
module run as ``__main__`` with the interpreter's usual exit (atexit handlers, exit code,
traceback). What differs: the preloaded modules are already imported, so a variable TensorFlow
reads at import (``TF_CPP_MIN_LOG_LEVEL``, ``TF_ENABLE_ONEDNN_OPTS``) must come from the spec's
``env``, not from the trainer's own code before its ``import tensorflow``.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import runpy
import selectors
import signal
import sys
import threading

from multiworker.procs import die_with_parent

#: Imported before the first fork: what every TensorFlow replica imports first, and slowest.
PRELOAD = ("tensorflow", "multiworker.trainer")
_LEGACY_KERAS = "tf_keras"  # also preloaded where TF_USE_LEGACY_KERAS=1 (tf.keras itself stays lazy)


def _send(fd: int, message: dict) -> None:
    os.write(fd, json.dumps(message).encode() + b"\n")


def _preload() -> str | None:
    """Import the preloads; the reason it cannot serve, or None."""
    names = list(PRELOAD) + ([_LEGACY_KERAS] if os.environ.get("TF_USE_LEGACY_KERAS") == "1" else [])
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure means: start replicas the usual way
            return f"import {name} failed: {type(exc).__name__}: {exc}"
    if threading.active_count() > 1:  # forking a process with Python threads is unsafe
        return f"{threading.active_count() - 1} thread(s) running after the preloads"
    return None


def _reap(replies: int) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(replies, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _serve(requests: int, replies: int) -> dict | None:
    """Fork a child per request and report exits; returns a request in each child, None in the
    zygote once the launcher closes its end."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    selector = selectors.DefaultSelector()
    selector.register(requests, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    pending = b""
    while True:
        for key, _ in selector.select():
            if key.fd == wake_r:
                while True:
                    try:
                        if not os.read(wake_r, 4096):
                            break
                    except BlockingIOError:
                        break
                continue
            data = os.read(requests, 1 << 16)
            if not data:
                return None
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                try:
                    pid = os.fork()
                except OSError as exc:
                    _send(replies, {"error": f"fork failed: {exc}"})
                    continue
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    for fd in (wake_r, wake_w, requests, replies):
                        os.close(fd)
                    return request
                _send(replies, {"forked": pid})
        _reap(replies)


def _become(request: dict) -> None:
    """Turn this freshly forked child into the requested replica (everything but running it)."""
    os.setsid()
    zygote = os.getppid()
    die_with_parent()
    if os.getppid() != zygote:  # the zygote died before the death signal was armed
        os._exit(128 + signal.SIGKILL)
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # the launcher made it 0600
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["module"], *request["args"]]
    sys.path[0] = request["cwd"]
    importlib.invalidate_caches()
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # its global generator was seeded once, in the zygote (Python's random reseeds itself)
        numpy.random.seed()


def main(argv: list[str]) -> int:
    del argv  # a label for ps only
    requests, replies = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # a stray print of a preloaded module must not reach the launcher as a reply
    why = _preload()
    _send(replies, {"ready": why is None, **({"why": why} if why else {})})
    if why is not None:
        return 0
    # The preloads' objects live as long as any replica: kept out of every replica's collections, a
    # collection neither walks them nor writes to (and so copies) the pages they share with this process.
    gc.collect()
    gc.freeze()
    request = _serve(requests, replies)
    if request is None:
        return 0
    _become(request)
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
