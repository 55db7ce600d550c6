"""The chief's SIGTERM guard (trainer/_stop_guard.py), in real processes sent real signals: a stop
outside a failure acts at once, a stop during a failure waits for the save in the block, and a
block that never ends is killed."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

PROGRAM = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from multiworker.trainer._stop_guard import sigterm_waits_for_call

    mark, case = Path(sys.argv[1]), sys.argv[2]
    holds = lambda exc: "peer" in str(exc)  # noqa: E731 - the trainer passes peer_lost_in_flight
    with sigterm_waits_for_call(True, holds=holds, call_limit=1.0, save_limit=1.0):
        if case == "healthy":
            os.kill(os.getpid(), signal.SIGTERM)
            mark.write_text("still running after SIGTERM")
        elif case == "other error":
            try:
                raise KeyError("an error handled inside training")
            except KeyError:
                os.kill(os.getpid(), signal.SIGTERM)
                mark.write_text("still running after SIGTERM")
        elif case == "constructing":
            class PeerGone(Exception):
                def __init__(self, message):
                    os.kill(os.getpid(), signal.SIGTERM)  # as TensorFlow's error is built: nothing raised yet
                    super().__init__(message)
            try:
                raise PeerGone("a peer was lost")
            except PeerGone:
                time.sleep(0.3)
                mark.write_text("saved")
        elif case in ("failing", "stuck"):
            try:
                raise RuntimeError("a peer was lost")
            except RuntimeError:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.3 if case == "failing" else 30)  # the save after the peer loss
                mark.write_text("saved")
        elif case == "notice":
            from multiworker.trainer._stop_guard import PreemptionNotice
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(60)  # training: the notice interrupts it here (else the 30 s timeout fails the test)
            except PreemptionNotice:
                time.sleep(0.3)  # the chief backs up the step reached
                mark.write_text("saved")
                raise
        elif case == "quiet":
            pass
    mark.with_suffix(".after").write_text("after the block")
""")


def _run(tmp_path: Path, case: str) -> tuple[int, float, Path]:
    script = tmp_path / "guarded.py"
    script.write_text(PROGRAM)
    mark = tmp_path / "mark"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(script), str(mark), case], timeout=30, capture_output=True, text=True)
    return proc.returncode, time.monotonic() - start, mark


def test_a_sigterm_outside_a_failure_ends_the_process_at_once(tmp_path):
    code, _, mark = _run(tmp_path, "healthy")
    assert code == -signal.SIGTERM
    assert not mark.exists()


def test_a_sigterm_while_training_stops_it_for_a_backup_then_ends_the_process(tmp_path):
    """A preemption notice: training stops where the SIGTERM found it, the backup is written, then
    the process ends by SIGTERM (nothing after the block runs)."""
    code, _, mark = _run(tmp_path, "notice")
    assert code == -signal.SIGTERM and mark.read_text() == "saved" and not mark.with_suffix(".after").exists()


def test_a_sigterm_while_another_error_is_handled_ends_the_process_at_once(tmp_path):
    code, _, mark = _run(tmp_path, "other error")
    assert code == -signal.SIGTERM
    assert not mark.exists()


def test_a_sigterm_during_a_failure_waits_for_the_block_then_ends_the_process(tmp_path):
    code, _, mark = _run(tmp_path, "failing")
    assert code == -signal.SIGTERM
    assert mark.read_text() == "saved"
    assert not mark.with_suffix(".after").exists()


def test_a_sigterm_while_the_error_is_being_built_waits_too(tmp_path):
    code, _, mark = _run(tmp_path, "constructing")
    assert code == -signal.SIGTERM
    assert mark.read_text() == "saved"


def test_a_held_sigterm_is_enforced_when_the_block_does_not_end(tmp_path):
    code, _, _ = _run(tmp_path, "stuck")  # a watcher that never acted would run into _run's timeout
    assert code == -signal.SIGKILL


def test_without_a_sigterm_the_block_leaves_no_trace(tmp_path):
    code, _, mark = _run(tmp_path, "quiet")
    assert code == 0 and mark.with_suffix(".after").exists()


def test_a_handler_of_the_users_own_is_left_alone():
    from multiworker.trainer._stop_guard import sigterm_waits_for_call

    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        with sigterm_waits_for_call(True, holds=lambda exc: True):
            assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_inactive_changes_nothing():
    from multiworker.trainer._stop_guard import sigterm_waits_for_call

    before = signal.getsignal(signal.SIGTERM)  # another test's library may have installed one
    with sigterm_waits_for_call(False, holds=lambda exc: True):
        assert signal.getsignal(signal.SIGTERM) is before


def test_peer_loss_is_read_from_the_raw_status_and_from_the_chain():
    tf = __import__("tensorflow")
    from tensorflow.python.eager import core

    from multiworker.trainer._peer_loss import peer_lost_in_flight

    assert peer_lost_in_flight(core._NotOkStatusException("recvmsg: reset", tf.errors.UNAVAILABLE, None))
    assert not peer_lost_in_flight(core._NotOkStatusException("End of sequence", tf.errors.OUT_OF_RANGE, None))
    assert peer_lost_in_flight(tf.errors.AbortedError(None, None, "aborted"))
    try:
        try:
            raise tf.errors.UnavailableError(None, None, "peer gone")
        except tf.errors.UnavailableError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert peer_lost_in_flight(outer)
    assert not peer_lost_in_flight(KeyError("x")) and not peer_lost_in_flight(None)
