"""A replica that checks the launch contract of its framework without the framework: the variables
agree with TF_CONFIG (same process order, process 0's address), and the group really meets at the
rendezvous address (process 0 listens there, the others connect and say who they are).

Writes ``<output_dir>/probe-<replica>.json`` with the variables it was given."""

from __future__ import annotations

import json
import os
import socket
import time

FRAMEWORK = os.environ["PROBE_FRAMEWORK"]
tf_config = json.loads(os.environ["TF_CONFIG"])
order = [(role, i) for role in ("chief", "worker") for i in range(len(tf_config["cluster"].get(role, [])))]
me = (tf_config["task"]["type"], tf_config["task"]["index"])
rank, size = order.index(me), len(order)
first = tf_config["cluster"][order[0][0]][0]
if FRAMEWORK == "jax":
    assert os.environ["JAX_COORDINATOR_ADDRESS"] == first
    assert (int(os.environ["JAX_PROCESS_ID"]), int(os.environ["JAX_NUM_PROCESSES"])) == (rank, size)
    assert (int(os.environ["KERAS_DISTRIBUTION_PROCESS_ID"]), int(os.environ["KERAS_DISTRIBUTION_NUM_PROCESSES"])) == (rank, size)
    assert os.environ["KERAS_DISTRIBUTION_JOB_ADDRESSES"].split(",")[0] == first
    host, _, port = first.rpartition(":")
else:
    host, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    assert f"{host}:{port}" == first
    assert (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), os.environ["LOCAL_RANK"]) == (rank, size, "0")

if rank == 0:
    with socket.create_server((host, int(port))) as server:
        seen = set()
        while len(seen) < size - 1:
            conn, _ = server.accept()
            with conn:
                seen.add(int(conn.recv(16).decode()))
        assert seen == set(range(1, size)), seen
else:
    deadline = time.monotonic() + 120
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=5) as conn:
                conn.sendall(str(rank).encode())
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)

names = ("JAX_", "KERAS_DISTRIBUTION_", "MASTER_", "WORLD_SIZE", "RANK", "LOCAL_RANK", "PET_")
out = os.environ["MULTIWORKER_OUTPUT_DIR"]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, f"probe-{os.environ['MULTIWORKER_REPLICA']}.json"), "w") as f:
    json.dump({k: v for k, v in os.environ.items() if k.startswith(names)}, f)
