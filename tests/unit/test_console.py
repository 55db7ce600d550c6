"""The foreground console: TensorFlow's log noise hidden unless --verbose, progress lines formatted."""

import io

from rich.console import Console

from multiworker.monitor.console import ConsoleObserver, format_progress

NOISE = [
    "I0000 00:00:1795240195.143475   11803 port.cc:153] oneDNN custom operations are on.",
    "W0000 00:00:1795240177.718172   11153 dataset.cc:997] Input of GeneratorDatasetOp::Dataset will not be optimized",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "E0000 00:00:1795240150.336481   10094 cuda_platform.cc:52] failed call to cuInit: INTERNAL",
]
KEEP = ["Traceback (most recent call last):", "E0000 00:00:1.0   1 collective_ops.cc:1] UnavailableError: peer gone",
        "2026-11-21 05:50:11,244 INFO trainer: hello"]


def render(verbose: bool) -> str:
    out = io.StringIO()
    obs = ConsoleObserver(verbose=verbose, console=Console(file=out, width=300, color_system=None))
    for line in NOISE + KEEP:
        obs.on_line("worker-0", line)
    return out.getvalue()


def test_noise_hidden_by_default():
    text = render(False)
    assert all(line[:40] not in text for line in NOISE)
    assert all(f"[worker-0] {line}" in text for line in KEEP)


def test_verbose_shows_everything():
    text = render(True)
    assert all(line[:40] in text for line in NOISE + KEEP)


def test_format_progress():
    assert format_progress({"kind": "epoch", "epoch": 2, "epochs": 4, "loss": 0.04321, "accuracy": 0.9912,
                            "images_per_sec": 2100.4}) == "epoch 2/4  loss 0.04321  accuracy 0.9912  2,100 images/s"
