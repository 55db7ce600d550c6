"""Train the MNIST CNN with PyTorch DistributedDataParallel (gloo) across processes.

Each replica is one process of the group: ``init_process_group("gloo")`` reads MASTER_ADDR,
MASTER_PORT, WORLD_SIZE and RANK, which multiworker sets as Kubeflow's PyTorchJob and Vertex AI do.
Every process trains on its own half of the images (DistributedSampler); DDP averages the gradients.
Rank 0 saves a ``torch.save`` state dict (model, optimizer, schedule, epoch) after each epoch, and a
restarted group resumes from it.

Run by hand, alone: ``cd examples/mnist_torch && python -m trainer.task --epochs 1``.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

WALL_START = time.time()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

from multiworker import trainer  # noqa: E402  (context, metric lines, metrics.json: no TensorFlow)

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "mnist" / "data" / "mnist.npz"
log = logging.getLogger("mnist_torch")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="per process (replica)")
    parser.add_argument("--learning-rate", type=float, default=3e-3, help="one-cycle peak")
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="Keras-layout mnist.npz")
    parser.add_argument("--steps-per-epoch", type=int, default=None, help="shorter epochs for quick tests")
    parser.add_argument("--progress-every", type=int, default=20, help="a progress line every N steps")
    return parser.parse_args(argv)


class Net(nn.Module):
    """Conv32-Pool-Conv64-Pool-Conv64-Flatten-Dense64-Dense10: the TensorFlow example's CNN, with Keras's
    initialization (Glorot uniform weights, zero biases)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.c3 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3), nn.Conv2d(64, 64, 3)
        self.d1, self.d2 = nn.Linear(3 * 3 * 64, 64), nn.Linear(64, 10)
        for layer in (self.c1, self.c2, self.c3, self.d1, self.d2):  # Keras's initialization
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = torch.flatten(F.relu(self.c3(x)), 1)
        return self.d2(F.relu(self.d1(x)))


def load(path: str):
    with np.load(path) as data:
        def prep(x):
            return torch.from_numpy((x.astype("float32") / 255.0)[:, None])
        return (TensorDataset(prep(data["x_train"]), torch.from_numpy(data["y_train"].astype("int64"))),
                TensorDataset(prep(data["x_test"]), torch.from_numpy(data["y_test"].astype("int64"))))


def save_checkpoint(path: str, state: dict) -> None:
    """Write atomically: a kill mid-write leaves the previous checkpoint."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def evaluate(model: nn.Module, data: TensorDataset, rank: int, size: int) -> tuple[float, float]:
    """Loss and accuracy over the whole test set: each process its share, summed over the group."""
    loader = DataLoader(data, batch_size=500, sampler=DistributedSampler(data, size, rank, shuffle=False))
    totals = torch.zeros(3, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            logits = model(x)
            totals += torch.tensor([F.cross_entropy(logits, y, reduction="sum").item(),
                                    (logits.argmax(1) == y).sum().item(), len(y)], dtype=torch.float64)
    if size > 1:
        dist.all_reduce(totals)
    return float(totals[0] / totals[2]), float(totals[1] / totals[2])


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    torch.set_num_threads(int(os.environ.get("MULTIWORKER_THREADS", "0")) or torch.get_num_threads())
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size > 1:
        dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK from the environment
    rank = dist.get_rank() if size > 1 else 0
    ctx = trainer.context()
    train_data, test_data = load(args.data)
    torch.manual_seed(42)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    sampler = DistributedSampler(train_data, size, rank, shuffle=True, seed=42)
    loader = DataLoader(train_data, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    steps = min(args.steps_per_epoch or len(loader), len(loader))
    net = Net()
    model = DistributedDataParallel(net) if size > 1 else net
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate, eps=1e-7)  # Keras's epsilon
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, args.learning_rate, total_steps=steps * args.epochs,
                                                   pct_start=0.2, div_factor=10, final_div_factor=5)
    checkpoint = os.path.join(ctx.checkpoint_dir, "backup", "state.pt")
    first = 0
    if os.path.exists(checkpoint):
        state = torch.load(checkpoint, weights_only=True)
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        first = state["epoch"]
        log.info("resumed from %s after epoch %d", checkpoint, first)
    log.info("process %d of %d, %d steps per epoch of %d images each", rank, size, steps, args.batch_size * size)

    fit_start = time.time()
    for epoch in range(first, args.epochs):
        model.train()
        sampler.set_epoch(epoch)
        started, losses = time.time(), []
        for step, (x, y) in enumerate(loader):
            if step == steps:
                break
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
            if (step + 1) % args.progress_every == 0:
                trainer.emit("progress", epoch=epoch + 1, epochs=args.epochs, step=step + 1, steps=steps)
        seconds = time.time() - started
        if rank == 0:
            save_checkpoint(checkpoint, {"model": net.state_dict(), "optimizer": optimizer.state_dict(),
                                         "schedule": schedule.state_dict(), "epoch": epoch + 1})
        if size > 1:
            dist.barrier()  # the checkpoint is written before any process reports the epoch
        trainer.emit("epoch", epoch=epoch + 1, epochs=args.epochs, steps=steps, seconds=round(seconds, 3),
                     images_per_sec=round(args.batch_size * size * steps / seconds, 1),
                     loss=float(np.mean(losses)))
    train_seconds = time.time() - fit_start
    epochs_run = args.epochs - first
    test_loss, test_accuracy = evaluate(net, test_data, rank, size)
    model_dir = ctx.model_dir
    if ctx.is_chief:
        os.makedirs(model_dir, exist_ok=True)
        torch.save(net.state_dict(), os.path.join(model_dir, "model.pt"))
    trainer.write_metrics_json({
        "test_accuracy": test_accuracy, "test_loss": test_loss, "epochs": args.epochs, "epochs_run": epochs_run,
        "first_epoch": first + 1 if epochs_run else None, "processes": size,
        "global_batch_size": args.batch_size * size, "steps_per_epoch": steps,
        "train_seconds": round(train_seconds, 3), "wall_seconds": round(time.time() - WALL_START, 3),
        "attempt": ctx.attempt, "model_dir": model_dir, "framework": "pytorch",
    })
    if size > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
