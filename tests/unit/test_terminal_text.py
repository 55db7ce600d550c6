"""Text a replica wrote reaches the terminal without its escape sequences: failure summaries (run),
and the message and events that `status` and `describe` print."""

from __future__ import annotations

import pytest
from test_monitor_views import record_job

from multiworker.backends.failures import ReplicaFailure, summarize
from multiworker.job import Store
from multiworker.status import describe_job, job_status
from multiworker.terminal import printable

HOSTILE = ("\x1b]0;owned\x07\x1b[2J\x1b[31mValueError: bad\x1b[0m \x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\"
           "\x9b1;1H\x1bPq#0\x1b\\\x07\x08\x00 end")


@pytest.mark.parametrize("text, expected", [
    ("plain\ttext", "plain\ttext"),
    (HOSTILE, "ValueError: bad link end"),
    ("\x1b[1;32m  ok\x1b[m", "  ok"),
], ids=["plain", "hostile", "colour"])
def test_printable(text, expected):
    assert printable(text) == expected


def test_failure_summary_has_no_escape_sequences(tmp_path):
    log = tmp_path / "worker-0.log"
    log.write_text(f"Traceback (most recent call last):\n  File \"x.py\", line 1\n{HOSTILE}\n")
    text = summarize(ReplicaFailure("worker-0", 1, 1, log), [ReplicaFailure("worker-1", 2, 1, log)])
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    assert "ValueError: bad link end" in text


def test_status_and_describe_show_stored_text_without_escape_sequences(mw_home):
    store = Store(mw_home)
    record_job(store, "feed0001", state="Failed")
    store.update_job("feed0001", message=f"root cause: worker-0\n  | {HOSTILE}")
    store.add_event("feed0001", "Failed", HOSTILE, warning=True)
    for doc in (job_status(store, "feed0001"), describe_job(store, "feed0001")["status"]):
        assert "\x1b" not in str(doc) and "ValueError: bad link end" in doc["message"]
    assert all("\x1b" not in (e["message"] or "") for e in describe_job(store, "feed0001")["events"])
