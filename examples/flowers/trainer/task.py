"""Train the flower-photos CNN on every replica; the chief saves the model with its class names.

Run by hand: ``cd examples/flowers && python -m trainer.task --epochs 2``. ``--data`` is a
class-folder tree (decoded every epoch) or the output of ``multiworker data tfrecords``.
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

from . import model as flowers  # noqa: E402

log = logging.getLogger(__name__)
DEFAULT_DATA = Path(__file__).resolve().parents[1] / "data"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(DEFAULT_DATA), help="class-folder tree or TFRecords folder")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=16, help="per replica")
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--learning-rate", type=float, default=0.002)
    p.add_argument("--val-split", type=float, default=0.2, help="held-out fraction (class-folder input)")
    p.add_argument("--seed", type=int, default=0, help="split and shuffle seed")
    p.add_argument("--steps-per-epoch", type=int, default=None, help="shorter epochs for quick tests")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    args = parse_args(argv)
    ctx = trainer.context()
    strategy = trainer.strategy()

    import tensorflow as tf

    global_batch = args.batch_size * strategy.num_replicas_in_sync
    split = dict(size=args.image_size, val_split=args.val_split, seed=args.seed)
    train_ds, classes = flowers.load_dataset(args.data, split="train", **split)
    val_ds, _ = flowers.load_dataset(args.data, split="val", **split)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train_ds = (train_ds.shuffle(1024, seed=args.seed).map(flowers.augment, num_parallel_calls=tf.data.AUTOTUNE)
                .batch(global_batch).prefetch(tf.data.AUTOTUNE).with_options(options))
    val_ds = val_ds.batch(global_batch).prefetch(tf.data.AUTOTUNE).with_options(options)

    with strategy.scope():
        net = flowers.build_model(args.image_size, len(classes), lr=args.learning_rate)
    started = time.time()
    history = trainer.fit(net, train_ds, epochs=args.epochs, global_batch_size=global_batch,
                          steps_per_epoch=args.steps_per_epoch, eval_data=val_ds, validation_data=val_ds)
    train_seconds = time.time() - started
    val_loss, val_accuracy = net.evaluate(val_ds, verbose=0)
    with strategy.scope():
        exported = flowers.with_class_names(net, classes)
    model_dir = trainer.save_model(exported)
    metrics = {
        "val_accuracy": float(val_accuracy),
        "val_loss": float(val_loss),
        "classes": classes,
        "epochs_run": len(history.epoch),
        "workers": ctx.num_workers,
        "global_batch_size": global_batch,
        "image_size": args.image_size,
        "train_seconds": round(train_seconds, 3),
        "model_dir": model_dir,
        **flowers.baselines(flowers.class_counts(args.data, "train", val_split=args.val_split, seed=args.seed),
                            flowers.class_counts(args.data, "val", val_split=args.val_split, seed=args.seed)),
    }
    trainer.write_metrics_json(metrics)
    log.info("held-out accuracy %.3f (chance %s, majority %s)", val_accuracy,
             metrics.get("chance_accuracy"), metrics.get("majority_accuracy"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
