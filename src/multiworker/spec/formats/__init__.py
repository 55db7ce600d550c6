"""Job spec formats: native YAML, Vertex AI CustomJob, AI Platform trainingInput, Kubeflow TFJob and JobSet.

``load_job`` reads any of them into a validated native spec that runs here (``LoadOptions`` says
how); ``parse_job`` reads one without making it local (for conversions); ``convert.convert`` writes
a spec in another format. Each format is a package (``vertex``, ``aiplatform``, ``tfjob``,
``jobset``) with its reader, its writer and, where gcloud has one, its command line.
"""

from multiworker.spec.formats.common import Parsed
from multiworker.spec.formats.detect import FORMATS, detect
from multiworker.spec.formats.load import load_job, load_parsed
from multiworker.spec.formats.options import LoadOptions
from multiworker.spec.formats.parse import parse_job

__all__ = ["FORMATS", "detect", "load_job", "load_parsed", "parse_job", "LoadOptions", "Parsed"]
