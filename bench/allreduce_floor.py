"""What one all-reduce costs between two MultiWorkerMirroredStrategy workers on this machine, with
nothing else to do: the floor under a two-worker step's overhead.

Starts ``--workers`` processes (TF_CONFIG by hand, localhost), each with ``--threads`` threads;
each runs ``--iterations`` all-reduces of ``--floats`` float32 values inside one tf.function
(a ``tf.range`` loop, as Keras runs several steps per execution: no Python per all-reduce), after
one warm-up call, and prints one JSON line per process: milliseconds per all-reduce (wall) and
CPU milliseconds the process spent per all-reduce. The MNIST CNN's gradients are 93,322 floats:

    python bench/allreduce_floor.py --floats 93322     # the CNN's gradients and metric states
    python bench/allreduce_floor.py --floats 1         # the fixed cost alone
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

from _procs import launch_workers


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="intra- and inter-op threads per process")
    p.add_argument("--floats", type=int, default=93322)
    p.add_argument("--iterations", type=int, default=1000)
    p.add_argument("--index", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def measure(args: argparse.Namespace) -> dict:
    os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "1"  # what multiworker gives each replica
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{args.port + i}" for i in range(args.workers)]},
        "task": {"type": "worker", "index": args.index}})
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    value = tf.ones([args.floats], tf.float32)

    def step(x: tf.Tensor) -> tf.Tensor:
        x = tf.identity(x)  # placed on this replica's device (an input from outside has none)
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, x) * 0.5

    @tf.function
    def loop(n: tf.Tensor) -> tf.Tensor:
        x = value
        for _ in tf.range(n):  # the loop outside strategy.run, as Keras's steps per execution
            x = strategy.experimental_local_results(strategy.run(step, args=(x,)))[0]
        return x

    loop(tf.constant(2)).numpy()  # trace and form the group
    usage0, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    loop(tf.constant(args.iterations)).numpy()
    wall, usage = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - usage0.ru_utime - usage0.ru_stime
    return {"index": args.index, "workers": args.workers, "threads": args.threads, "floats": args.floats,
            "ms_per_all_reduce": round(1000 * wall / args.iterations, 3),
            "cpu_ms_per_all_reduce": round(1000 * cpu / args.iterations, 3)}


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.index is None:
        return launch_workers(__file__, argv, args.workers)
    print(json.dumps(measure(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
