"""The foreground console: TensorFlow's log noise hidden unless --verbose, progress lines formatted."""

import io

from rich.console import Console

from multiworker.monitor.console import ConsoleObserver, format_progress

NOISE = [
    "I0000 00:00:1795240195.143475   11803 port.cc:153] oneDNN custom operations are on.",
    "W0000 00:00:1795240177.718172   11153 dataset.cc:997] Input of GeneratorDatasetOp::Dataset will not be optimized",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "E0000 00:00:1795240150.336481   10094 cuda_platform.cc:52] failed call to cuInit: INTERNAL",
    "2026-11-26 02:10:12,249 INFO multiworker.trainer._backup: backups every 127 steps (0.015 s/step, 0.026 s/save)",
    "2026-11-26 02:10:12,250 INFO multiworker.trainer._keras_callbacks: saved checkpoint /tmp/out/checkpoints/ckpt-1",
    "INFO:tensorflow:Assets written to: /tmp/out/model/assets",
    "2026-11-26 02:10:11,649 INFO absl: default session config: device_count {",
    '  key: "GPU"',
    "}",
    "intra_op_parallelism_threads: 1",
    "experimental {",
    '  collective_group_leader: "/job:ps/replica:0/task:0"',
    "}",
    "",
]
KEEP = ["Epoch 1/2", "Traceback (most recent call last):", "E0000 00:00:1.0   1 collective_ops.cc:1] UnavailableError: peer gone",
        "2026-11-21 05:50:11,244 INFO trainer: hello", "2026-11-21 05:50:11,244 WARNING multiworker.trainer: slow",
        "loss: 0.3"]


def render(verbose: bool) -> str:
    out = io.StringIO()
    obs = ConsoleObserver(verbose=verbose, console=Console(file=out, width=300, color_system=None))
    for line in NOISE + KEEP:
        obs.on_line("worker-0", line)
    return out.getvalue()


def test_noise_hidden_by_default():
    text = render(False)
    assert all(f"[worker-0] {line}\n" not in text for line in NOISE)
    assert all(f"[worker-0] {line}" in text for line in KEEP)


def test_verbose_shows_everything():
    text = render(True)
    assert all(f"[worker-0] {line}\n" in text for line in NOISE + KEEP)


def test_a_hidden_records_continuation_ends_at_the_next_record():
    out = io.StringIO()
    obs = ConsoleObserver(console=Console(file=out, width=300, color_system=None))
    obs.on_line("ps-0", "2026-11-26 02:10:11,649 INFO absl: default session config: device_count {")
    obs.on_line("worker-0", "mine: 1")  # another replica's line is not part of ps-0's record
    obs.on_line("ps-0", "  value: 0")
    obs.on_line("ps-0", "Epoch 1/2")
    obs.on_line("ps-0", "accuracy: 0.5")  # after a shown line: shown
    assert out.getvalue().splitlines() == ["[worker-0] mine: 1", "[ps-0] Epoch 1/2", "[ps-0] accuracy: 0.5"]


def test_format_progress():
    assert format_progress({"kind": "epoch", "epoch": 2, "epochs": 4, "loss": 0.04321, "accuracy": 0.9912,
                            "images_per_sec": 2100.4}) == "epoch 2/4  loss 0.04321  accuracy 0.9912  2,100 images/s"
