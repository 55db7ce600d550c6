"""Train the taxi-fare DNN: the course trainer's command line, on any pool layout.

Run by hand: ``cd examples/taxifare && python -m trainer.task --num_examples_to_train_on 20000``.
The same code runs with 2 workers (MultiWorkerMirroredStrategy), with a chief, workers and a
ps (ParameterServerStrategy) and with an evaluator replica: only the job spec changes.
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

from . import hptune  # noqa: E402
from . import model as taxi  # noqa: E402

log = logging.getLogger(__name__)
DATA = Path(__file__).resolve().parents[1] / "data"


def _nnsize(values: list[str]) -> list[int]:
    try:
        sizes = [int(v) for value in values for v in value.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--nnsize {' '.join(values)!r}: give layer sizes, e.g. --nnsize \"32 8\"")
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("--nnsize: give at least one positive layer size")
    return sizes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train_data_path", default=str(DATA / "taxi-train*.csv"), help="CSV file or glob")
    p.add_argument("--eval_data_path", default=str(DATA / "taxi-valid*.csv"), help="CSV file or glob")
    p.add_argument("--output_dir", default=None,
                   help="base for model/, checkpoints/, logs/ (default: from AIP_MODEL_DIR or the launcher)")
    p.add_argument("--batch_size", type=int, default=32, help="global batch size")
    p.add_argument("--num_examples_to_train_on", type=int, default=60000)
    p.add_argument("--num_evals", type=int, default=5, help="evaluations (epochs) over the training")
    p.add_argument("--nbuckets", type=int, default=10, help="buckets per latitude/longitude axis")
    p.add_argument("--lr", type=float, default=0.001, help="Adam learning rate")
    p.add_argument("--nnsize", nargs="+", default=["32", "8"], help='hidden layer sizes, e.g. "32 8"')
    p.add_argument("--eval_steps", type=int, default=None, help="batches per evaluation (default: all)")
    p.add_argument("--hptune_metric", default="rmse", help="hypertune metric tag (the study's metric)")
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args(argv)
    try:
        args.nnsize = _nnsize(args.nnsize)
    except argparse.ArgumentTypeError as exc:
        p.error(str(exc))
    for name in ("batch_size", "num_examples_to_train_on", "num_evals", "nbuckets"):
        if getattr(args, name) < 1:
            p.error(f"--{name} is {getattr(args, name)}; give a positive number")
    return args


def _context(args: argparse.Namespace):
    if not args.output_dir:
        return trainer.context()
    trial = os.environ.get("CLOUD_ML_TRIAL_ID")
    base = args.output_dir.rstrip("/") + (f"/{trial}" if trial else "")
    return trainer.context(output_dir=base)


def strategy_name(strategy) -> str:
    """The strategy's public name (MultiWorkerMirroredStrategy's class is CollectiveAllReduceStrategy)."""
    name = type(strategy).__name__.replace("V2", "")
    return {"CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy", "_DefaultDistributionStrategy": "default"}.get(name, name)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    args = parse_args(argv)
    ctx = _context(args)
    strategy = trainer.strategy(ctx)  # ps, and workers under PSS, serve here and never return

    import tensorflow as tf

    steps_per_epoch = max(args.num_examples_to_train_on // (args.batch_size * args.num_evals), 1)

    def train_fn(input_context):
        batch = input_context.get_per_replica_batch_size(args.batch_size)
        ds = taxi.load_dataset(args.train_data_path, batch, training=True, seed=args.seed)
        return ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    try:
        eval_ds = taxi.load_dataset(args.eval_data_path, args.batch_size, training=False).with_options(options)
        if isinstance(strategy, tf.distribute.ParameterServerStrategy):
            taxi.load_dataset(args.train_data_path, 1, training=False)  # fail here, not on a worker
            train_data = train_fn  # each worker builds its own pipeline (a DatasetCreator)
        else:
            train_data = taxi.load_dataset(args.train_data_path, args.batch_size, training=True,
                                           seed=args.seed).with_options(options)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with strategy.scope():
        model = taxi.build_model(nbuckets=args.nbuckets, nnsize=args.nnsize, lr=args.lr)

    extra = [hptune.HypertuneReporter(args.hptune_metric, steps_per_epoch)] if ctx.is_chief else []
    started = time.time()
    history = trainer.fit(model, train_data, epochs=args.num_evals, global_batch_size=args.batch_size,
                          steps_per_epoch=steps_per_epoch, eval_data=eval_ds, eval_steps=args.eval_steps,
                          validation_data=eval_ds, validation_steps=args.eval_steps,
                          callbacks=extra, ctx=ctx)
    train_seconds = time.time() - started
    results = model.evaluate(eval_ds, steps=args.eval_steps, verbose=0, return_dict=True)
    model_dir = trainer.save_model(model, ctx=ctx)
    metrics = {
        "rmse": float(results["rmse"]),
        "loss": float(results["loss"]),
        "epochs_run": len(history.epoch),
        "steps_per_epoch": steps_per_epoch,
        "batch_size": args.batch_size,
        "workers": len(ctx.cluster.get("worker", [])) or 1,
        "strategy": strategy_name(strategy),
        "train_seconds": round(train_seconds, 3),
        "model_dir": model_dir,
    }
    if ctx.is_chief:
        metrics.update(hptune.mean_baseline(args.train_data_path, args.eval_data_path))
        if not history.epoch:  # resumed after the last epoch: report the final evaluation
            hptune.report(args.hptune_metric, metrics["rmse"], steps_per_epoch * args.num_evals)
    trainer.write_metrics_json(metrics, ctx=ctx)
    log.info("eval rmse %.3f (predicting the mean: %s)", metrics["rmse"], metrics.get("baseline_rmse"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
