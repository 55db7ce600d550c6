"""Steady-state step time of the MNIST example's model, without the launcher.

Starts ``--workers`` processes itself (1: the default strategy; more: MultiWorkerMirroredStrategy
over localhost, TF_CONFIG set by hand; ``--independent``: that many processes that do not talk),
runs ``--steps`` training steps in each and prints one JSON line per process: the steady step
time and rate, measured from the 20% mark to the end (first-step tracing excluded), and the CPU
milliseconds the process spent per step. It isolates what the strategy costs per step:

    python bench/step_probe.py --workers 1 --threads 2 --batch 128   # 1 process x 2 threads
    python bench/step_probe.py --workers 2 --threads 1 --batch 64    # 2 workers x 1 thread
    python bench/step_probe.py --workers 2 --independent --batch 64  # the same work, no talking
    python bench/step_probe.py --workers 2 --batch 2                 # only the per-step overhead

Options that switch one lever each: ``--reduction first|sum|auto`` (Keras's per-step log
reduction; unset: Keras's default, "sum" under MultiWorkerMirroredStrategy),
``--pipeline global|sharded`` (the global batch sharded by tf.distribute, or each worker its own
shard), ``--no-metrics`` (compile without accuracy), ``--sync keras|metrics|fused`` (Keras's
metric reads; the metrics in one all-reduce; gradients and metrics in one, what trainer.fit does),
``--steps-per-execution N``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

from _procs import launch_workers

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "examples" / "mnist" / "data" / "mnist.npz"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--independent", action="store_true", help="processes that do not form a cluster")
    p.add_argument("--mwms", action="store_true",
                   help="MultiWorkerMirroredStrategy even for one worker (its input and step path, no peer)")
    p.add_argument("--threads", type=int, default=1, help="intra- and inter-op threads per process")
    p.add_argument("--batch", type=int, default=64, help="per process")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--reduction", default=None, choices=["first", "sum", "auto"])
    p.add_argument("--pipeline", default="sharded", choices=["global", "sharded"])
    p.add_argument("--no-metrics", action="store_true")
    p.add_argument("--sync", default="keras", choices=["keras", "metrics", "fused"],
                   help="Keras's own; the metrics in one all-reduce a step; gradients and metrics in one "
                        "(what trainer.fit does)")
    p.add_argument("--steps-per-execution", type=int, default=1)
    p.add_argument("--no-spin", action="store_true", help="TensorFlow's thread pools sleep instead of spinning")
    p.add_argument("--inter", type=int, default=None, help="inter-op threads (default: --threads)")
    p.add_argument("--index", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def probe(args: argparse.Namespace) -> dict:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "1")  # what multiworker gives each replica
    cluster = (args.workers > 1 or args.mwms) and not args.independent
    if cluster:
        os.environ["TF_CONFIG"] = json.dumps({
            "cluster": {"worker": [f"127.0.0.1:{args.port + i}" for i in range(args.workers)]},
            "task": {"type": "worker", "index": args.index}})
    sys.path[:0] = [str(REPO / "examples" / "mnist"), str(REPO / "src")]
    import tensorflow as tf
    import tf_keras as keras

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter or args.threads)
    if args.no_spin:
        from tensorflow.python.eager import context as tf_context

        config = tf.compat.v1.ConfigProto()
        config.experimental.disable_thread_spinning = True
        tf_context.context()._config = config
    from trainer import model as mnist

    from multiworker.trainer._tf_workarounds import untuned_per_device_datasets

    untuned_per_device_datasets(tf)
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if cluster else tf.distribute.get_strategy()
    keras.utils.set_random_seed(7)
    global_batch = args.batch * strategy.num_replicas_in_sync
    train_fn, _, _ = mnist.datasets(str(DATA), global_batch)
    if args.pipeline == "sharded":
        data = strategy.distribute_datasets_from_function(train_fn) if cluster else train_fn(
            tf.distribute.InputContext())
    else:  # the global batch, sharded by tf.distribute (AutoShardPolicy.DATA)
        import numpy as np

        with np.load(DATA) as d:
            x, y = d["x_train"], d["y_train"]
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        options.autotune.enabled = False
        data = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=42).repeat().batch(global_batch)
                .map(mnist._prepare, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
                .with_options(options))
    with strategy.scope():
        net = mnist.build_model(3e-3, args.steps, schedule="onecycle")
        net.compile(optimizer=net.optimizer, loss=net.loss, metrics=[] if args.no_metrics else ["accuracy"],
                    steps_per_execution=args.steps_per_execution)
    if args.reduction:
        net.distribute_reduction_method = args.reduction
    if args.sync != "keras":
        from multiworker.trainer._metric_sync import sync_step_metrics

        sync_step_metrics(net)
        if args.sync == "metrics":
            vars(net).pop("train_step", None)
    marks: list[tuple[float, float]] = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            usage = resource.getrusage(resource.RUSAGE_SELF)
            marks.append((time.perf_counter(), usage.ru_utime + usage.ru_stime))

    start = time.perf_counter()
    history = net.fit(data, epochs=1, steps_per_epoch=args.steps, verbose=0, callbacks=[Clock()])
    k = len(marks) // 5
    steps = (len(marks) - 1 - k) * args.steps_per_execution
    step_s = (marks[-1][0] - marks[k][0]) / steps
    return {"index": args.index, "workers": args.workers, "cluster": cluster, "threads": args.threads,
            "batch": args.batch, "first_step_s": round(marks[0][0] - start, 2), "step_ms": round(1000 * step_s, 2),
            "images_per_s": round(global_batch / step_s, 1),
            "cpu_ms_per_step": round(1000 * (marks[-1][1] - marks[k][1]) / steps, 2),
            "loss": history.history["loss"][-1]}


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.index is None and (args.workers > 1 or args.mwms):
        return launch_workers(__file__, argv, args.workers)
    print(json.dumps(probe(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
