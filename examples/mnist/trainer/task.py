"""Train the MNIST CNN on every replica of the job; the chief saves the model and metrics.json.

Run by hand: ``cd examples/mnist && python -m trainer.task --epochs 1``. As a job replica the
launcher (or TFJob / Vertex AI) provides TF_CONFIG and the output directories.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import time
from pathlib import Path

WALL_START = time.time()
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from multiworker import trainer  # noqa: E402

from . import model as mnist  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[1] / "data" / "mnist.npz"


def _checked(parse):
    """An argparse type that keeps the text but refuses what ``parse`` refuses, with its message."""
    def check(text: str) -> str:
        try:
            parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    return check


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker (replica)")
    parser.add_argument("--schedule", default="onecycle", choices=["cosine", "onecycle"],
                        help="one-cycle (the demo: 2 epochs, >= 99%%; see BENCHMARKS.md) or cosine decay "
                             "(the earlier 4-epoch recipe)")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="initial (cosine, default 2e-3) or peak (onecycle, default 3e-3) rate")
    parser.add_argument("--precision", default="float32", choices=["auto", "float32", "mixed_bfloat16"],
                        help="auto: mixed_bfloat16 where the CPU has AVX512-BF16 or AMX, else float32")
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="Keras-layout mnist.npz")
    parser.add_argument("--steps-per-epoch", type=int, default=None,
                        help="shorter epochs for quick tests (default: one pass over the data)")
    parser.add_argument("--backup-every", default="auto", type=_checked(trainer.parse_backup_every),
                        help="back up training state every N steps, every 'Ns' of training, each 'epoch', "
                             "or 'auto' (about every 2 s); a restart resumes from the last backup")
    parser.add_argument("--steps-per-execution", default="auto", type=_checked(trainer.parse_steps_per_execution),
                        help="training steps in one call of the train function: 'auto' (as many as fit "
                             "in 0.5 s, at most 10) or a number; 1 runs Keras's one step per call")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("tensorflow", "absl"):  # per-step collective and sharding chatter
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args = parse_args(argv)
    ctx = trainer.context()
    strategy = trainer.strategy()  # before any other TensorFlow work
    precision = trainer.set_precision(args.precision)

    global_batch = args.batch_size * strategy.num_replicas_in_sync
    train_data, test_ds, n_train = mnist.datasets(args.data, global_batch)  # each worker its own shard
    steps = args.steps_per_epoch or math.ceil(n_train / global_batch)
    with strategy.scope():
        rate = args.learning_rate or (3e-3 if args.schedule == "onecycle" else 2e-3)
        net = mnist.build_model(rate, decay_steps=steps * args.epochs, schedule=args.schedule)

    fit_start = time.time()
    history = trainer.fit(net, train_data, epochs=args.epochs, global_batch_size=global_batch,
                          steps_per_epoch=steps, eval_data=test_ds,
                          backup_every=args.backup_every, steps_per_execution=args.steps_per_execution)
    train_seconds = time.time() - fit_start
    epochs_run = len(history.epoch)  # fewer than --epochs when resumed from a backup

    test_loss, test_accuracy = net.evaluate(test_ds, verbose=0)
    eval_done = time.time()
    model_dir = trainer.save_model(net)
    trainer.write_metrics_json({
        "test_accuracy": float(test_accuracy),
        "test_loss": float(test_loss),
        "epochs": args.epochs,
        "epochs_run": epochs_run,
        "first_epoch": history.epoch[0] + 1 if history.epoch else None,
        "workers": ctx.num_workers,
        "global_batch_size": global_batch,
        "steps_per_epoch": steps,
        "learning_rate": rate,
        "schedule": args.schedule,
        "precision": precision,
        "train_seconds": round(train_seconds, 3),
        "images_per_sec": round(global_batch * steps * epochs_run / train_seconds, 1) if epochs_run else None,
        "startup_seconds": round(fit_start - WALL_START, 3),
        "fit_start_unix": round(fit_start, 3),
        "test_eval_seconds": round(eval_done - fit_start - train_seconds, 3),
        "save_seconds": round(time.time() - eval_done, 3),
        "wall_seconds": round(time.time() - WALL_START, 3),
        "attempt": ctx.attempt,
        "model_dir": model_dir,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
