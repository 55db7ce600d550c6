"""One worker of test_leader_wait: worker 1 calls ``trainer.strategy()`` first; worker 0, the
coordination leader, waits until it has, then 0.2 s more, then calls it too. Prints one JSON line:
how long ``trainer.strategy()`` took here, and the replicas in sync."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import tensorflow as tf  # noqa: E402,F401  (imported before the timing starts)

from multiworker import trainer  # noqa: E402

INDEX = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
MARKER = Path(os.environ["LEADER_TEST_MARKER"])

if INDEX == 0:
    deadline = time.monotonic() + 120
    while not MARKER.exists():
        if time.monotonic() > deadline:
            sys.exit("worker 1 never reached trainer.strategy()")
        time.sleep(0.01)
    time.sleep(0.2)  # worker 1 has been trying to connect for 0.2 s
else:
    MARKER.touch()
start = time.monotonic()
strategy = trainer.strategy()
print(json.dumps({"index": INDEX, "strategy_seconds": round(time.monotonic() - start, 3),
                  "replicas": strategy.num_replicas_in_sync}), flush=True)
