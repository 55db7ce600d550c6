"""Train cats vs dogs from TFRecords, in float32 or mixed precision, on local devices or workers.

Prepare the data once: ``multiworker data tfrecords PHOTOS data/tfrecords --size 96 --augment 6``.
Run by hand: ``cd examples/cats_vs_dogs && python -m trainer.task --local-devices 2``
(MirroredStrategy over two logical CPUs); as a 2-worker job it uses MultiWorkerMirroredStrategy.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from multiworker import trainer  # noqa: E402

from . import model as cvd  # noqa: E402

log = logging.getLogger(__name__)
DEFAULT_DATA = Path(__file__).resolve().parents[1] / "data" / "tfrecords"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(DEFAULT_DATA), help="folder written by `multiworker data tfrecords`")
    p.add_argument("--precision", default="float32", help="float32 | mixed_bfloat16 | mixed_float16")
    p.add_argument("--local-devices", type=int, default=1,
                   help="logical CPU devices for MirroredStrategy in a single-replica run")
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--batch-size", type=int, default=16, help="per replica")
    p.add_argument("--image-size", type=int, default=None, help="default: the size in the manifest")
    p.add_argument("--learning-rate", type=float, default=0.001)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps-per-epoch", type=int, default=None, help="shorter epochs for quick tests")
    return p.parse_args(argv)


def strategy_name(strategy) -> str:
    """The strategy's public name (MultiWorkerMirroredStrategy's class is CollectiveAllReduceStrategy)."""
    name = type(strategy).__name__.replace("V2", "")
    return {"CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy", "_DefaultDistributionStrategy": "default"}.get(name, name)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    args = parse_args(argv)
    error = cvd.check_precision(args.precision)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    ctx = trainer.context()
    if ctx.num_workers > 1 and args.local_devices > 1:
        log.info("--local-devices ignored across workers: each worker mirrors over its own CPU")
    elif args.local_devices > 1:
        cvd.split_cpu(args.local_devices)
    strategy = trainer.strategy()
    cvd.set_precision(args.precision)

    import tensorflow as tf
    from multiworker.data import load_manifest, read_tfrecords, shard_pattern
    from multiworker.errors import UserError

    try:
        manifest = load_manifest(args.data)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    size = args.image_size or manifest["image_size"][0]
    classes = manifest["classes"]
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train_ds = (read_tfrecords(shard_pattern(args.data, "train"), size).cache()
                .shuffle(4096, seed=args.seed).map(cvd.augment, num_parallel_calls=tf.data.AUTOTUNE)
                .batch(global_batch).prefetch(tf.data.AUTOTUNE).with_options(options))
    val_ds = (read_tfrecords(shard_pattern(args.data, "val"), size).batch(global_batch)
              .cache().with_options(options))

    with strategy.scope():
        net = cvd.build_model(size, len(classes), lr=args.learning_rate)
    started = time.time()
    history = trainer.fit(net, train_ds, epochs=args.epochs, global_batch_size=global_batch,
                          steps_per_epoch=args.steps_per_epoch, eval_data=val_ds, validation_data=val_ds)
    train_seconds = time.time() - started
    val_loss, val_accuracy = net.evaluate(val_ds, verbose=0)
    with strategy.scope():
        exported = cvd.with_class_names(net, classes)
    model_dir = trainer.save_model(exported)

    counts = manifest.get("counts_per_class", {})
    val_counts = [counts.get("val", {}).get(c, 0) for c in classes]
    train_counts = [counts.get("train", {}).get(c, 0) for c in classes]
    majority = max(range(len(classes)), key=train_counts.__getitem__)
    trainer.write_metrics_json({
        "val_accuracy": float(val_accuracy),
        "val_loss": float(val_loss),
        "chance_accuracy": round(1 / len(classes), 4),
        "majority_accuracy": round(val_counts[majority] / max(sum(val_counts), 1), 4),
        "classes": classes,
        "precision": args.precision,
        "strategy": strategy_name(strategy),
        "replicas_in_sync": strategy.num_replicas_in_sync,
        "epochs_run": len(history.epoch),
        "global_batch_size": global_batch,
        "image_size": size,
        "train_seconds": round(train_seconds, 3),
        "model_dir": model_dir,
    })
    log.info("held-out accuracy %.3f (%s, %s)", val_accuracy, args.precision, strategy_name(strategy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
