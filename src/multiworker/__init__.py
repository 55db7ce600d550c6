"""multiworker: one job spec for distributed multi-worker TensorFlow training.

Run it locally as supervised processes with the cloud's exact environment, or
submit it to Kubeflow TFJob or Vertex AI. Importing this package stays light:
replicas import :mod:`multiworker.trainer` without pulling the launcher in.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
