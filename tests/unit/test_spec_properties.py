"""Property tests: whatever document a user writes, the spec readers answer with a spec or one SpecError."""

from __future__ import annotations

import json

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from multiworker.errors import SpecError
from multiworker.spec.formats import load_job
from multiworker.spec.load import parse_yaml_text

KEYS = ["name", "module", "command", "args", "env", "pools", "worker", "chief", "ps", "evaluator", "replicas",
        "run_policy", "grace_period", "active_deadline", "restart_policy", "output_dir", "workerPoolSpecs",
        "replicaCount", "containerSpec", "imageUri", "trainingInput", "masterType", "workerCount", "apiVersion",
        "kind", "spec", "tfReplicaSpecs", "Worker", "template", "containers", "metadata", "packageUris"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=20), st.sampled_from(["kubeflow.org/v1", "TFJob", "trainer.task", "gs://b/x",
                                                           "OnFailure", "30m", "python", "n1-standard-4"]))
DOCS = st.recursive(SCALARS, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                    st.dictionaries(st.sampled_from(KEYS), kids, max_size=5)),
                    max_leaves=30)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(doc=st.dictionaries(st.sampled_from(KEYS), DOCS, max_size=6))
def test_any_document_is_a_spec_or_one_spec_error(tmp_path, doc):
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(doc, allow_nan=True))
    try:
        load_job(path)
    except SpecError as exc:
        assert "\n" not in str(exc) and str(exc)


@SETTINGS
@given(text=st.text(max_size=300))
def test_any_text_parses_or_is_one_spec_error(text):
    try:
        parse_yaml_text(text, source="t.yaml")
    except SpecError as exc:
        assert str(exc).startswith("t.yaml: ") and "\n" not in str(exc)


@SETTINGS
@given(doc=DOCS)
def test_yaml_round_trip_of_plain_documents(doc):
    """The hardened loader reads what PyYAML's safe loader reads, for documents without duplicate keys."""
    text = yaml.safe_dump(doc)
    assert parse_yaml_text(text, source="t.yaml") == yaml.safe_load(text)
