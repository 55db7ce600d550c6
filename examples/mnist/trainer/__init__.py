"""MNIST CNN trainer: `python -m trainer.task` from examples/mnist, by hand or as a job replica."""
