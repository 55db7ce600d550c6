"""Checks of the trainer's source, on its syntax tree (nothing is imported or run)."""

from __future__ import annotations

import ast
import glob
from collections.abc import Iterator
from pathlib import Path

from multiworker.doctor._findings import Finding, SourceFile, TrainerSource

__all__ = ["check_source"]

# Names that show a batch size was derived from the number of replicas or workers.
_SCALED = ("num_replicas_in_sync", "num_workers", "num_replicas", "get_per_replica_batch_size", "replicas_in_sync")
# Words in an `if` test or a save path that show only the chief writes there, or each worker its own path.
_CHIEF_ONLY = ("chief", "task_type", "task_id", "task_index", "should_checkpoint", "is_primary", "write_filepath",
               "tempfile", "mkdtemp", "temp_dir", "tmp_dir")
_NOT_MODELS = ("np", "numpy", "pickle", "joblib", "json", "torch", "plt", "fig", "df")


def check_source(src: TrainerSource, *, workers: int, chief_type: str, legacy_keras_env: bool,
                 tf_distribute: bool = True) -> list[Finding]:
    """Every finding in the trainer's files. ``workers``: chief and worker replicas together;
    ``chief_type``: the chief's task type in the job's TF_CONFIG (chief or master); ``tf_distribute``:
    the job is a TensorFlow one (a JAX or PyTorch job's processes are not under MultiWorkerMirroredStrategy)."""
    text = src.text
    mwms = tf_distribute and (workers > 1 or "MultiWorkerMirroredStrategy" in text)
    findings: list[Finding] = []
    for f in src.files:
        parents = _parents(f.tree)
        findings += _master_or_chief(f, chief_type)
        findings += _evaluator_in_cluster(f)
        if mwms and not legacy_keras_env and "TF_USE_LEGACY_KERAS" not in text:
            findings += _keras3(f)
        if mwms:
            findings += _shared_save_path(f, parents)
        findings += _file_sharding(f, src.root, workers)
    if mwms and not any(name in text for name in _SCALED):
        findings += _unscaled_batch(src)
    return findings


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _master_or_chief(f: SourceFile, chief_type: str) -> Iterator[Finding]:
    """TF_CONFIG's chief looked up under the other name than the one the job's platform gives."""
    if "TF_CONFIG" not in f.text and "task_type" not in f.text:
        return
    other = "master" if chief_type == "chief" else "chief"
    for node in ast.walk(f.tree):
        if isinstance(node, ast.Compare):
            found = _strings(node)
            hit = other in found and chief_type not in found
        elif isinstance(node, ast.Subscript):
            hit = isinstance(node.slice, ast.Constant) and node.slice.value == other
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            hit = bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == other
        else:
            continue
        if hit:
            yield Finding("master-vs-chief", f.name, node.lineno,
                          f"TF_CONFIG's chief is read as {other!r}, but this job's TF_CONFIG calls it {chief_type!r} "
                          f"({'Vertex AI, TFJob and tf.distribute' if chief_type == 'chief' else 'AI Platform TF 1 jobs'} "
                          "say so), so this code never finds its chief",
                          f"accept both: task_type in ('chief', 'master'), or use {chief_type!r}")


def _evaluator_in_cluster(f: SourceFile) -> Iterator[Finding]:
    for node in ast.walk(f.tree):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            if "evaluator" in keys and keys & {"chief", "worker", "ps", "master"}:
                yield Finding("evaluator-in-cluster", f.name, node.lineno,
                              "the evaluator is inside the cluster map: TensorFlow then waits for it in every "
                              "collective and the job hangs (the evaluator is never part of the cluster)",
                              "leave 'evaluator' out of 'cluster'; an evaluator gets only its 'task' "
                              "({'type': 'evaluator', 'index': 0}) in TF_CONFIG")


def _keras3(f: SourceFile) -> Iterator[Finding]:
    """Keras 3 (``import keras``, or ``tf.keras`` on TF >= 2.16) under MultiWorkerMirroredStrategy."""
    for node in ast.walk(f.tree):
        line = None
        if isinstance(node, ast.Import) and any(a.name == "keras" or a.name.startswith("keras.") for a in node.names):
            line = node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and (node.module == "keras" or node.module.startswith("keras.")):
            line = node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module == "tensorflow" and any(a.name == "keras" for a in node.names):
            line = node.lineno
        elif (isinstance(node, ast.Attribute) and node.attr == "keras" and isinstance(node.value, ast.Name)
              and node.value.id in ("tf", "tensorflow")):
            line = node.lineno
        if line is not None:
            yield Finding("keras3-mwms", f.name, line,
                          "Keras 3 under MultiWorkerMirroredStrategy: since TensorFlow 2.16 this is Keras 3, which "
                          "does not support the strategy (keras-team/keras#20585); multiworker sets "
                          "TF_USE_LEGACY_KERAS=1 locally, the cloud platforms do not",
                          "set TF_USE_LEGACY_KERAS=1 in the spec's env (or os.environ before importing TensorFlow) "
                          "and install tf-keras; or import tf_keras")
            return  # one per file: the first use says it


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If | ast.IfExp) and any(w in ast.unparse(node.test) for w in _CHIEF_ONLY):
            return True
    return False


def _shared_save_path(f: SourceFile, parents: dict[ast.AST, ast.AST]) -> Iterator[Finding]:
    """A model saved by every worker to one path: the workers overwrite the chief's files."""
    for node in ast.walk(f.tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
            continue
        func = ast.unparse(node.func)
        receiver = ast.unparse(node.func.value)
        if node.func.attr in ("save", "save_weights") and receiver.split(".")[0] not in _NOT_MODELS:
            path_arg = node.args[0]
        elif func in ("tf.saved_model.save", "tf.keras.models.save_model", "keras.models.save_model"):
            path_arg = node.args[1] if len(node.args) > 1 else node.args[0]
        else:
            continue
        if receiver in ("trainer", "multiworker.trainer") or _guarded(node, parents):
            continue
        if any(w in ast.unparse(path_arg) for w in _CHIEF_ONLY):
            continue
        yield Finding("shared-save-path", f.name, node.lineno,
                      f"every worker runs {ast.unparse(node)[:80]} to the same path: under MultiWorkerMirroredStrategy "
                      "all workers must save, and the non-chief ones overwrite the chief's files",
                      "save the chief's copy to the path and each other worker's to a temporary one (the tutorial's "
                      "write_filepath(path, task_type, task_id)), or call multiworker.trainer.save_model(model)")


def _file_sharding(f: SourceFile, root: Path, workers: int) -> Iterator[Finding]:
    """AutoShardPolicy.FILE over fewer input files than workers: TensorFlow refuses to start."""
    policy = [n for n in ast.walk(f.tree) if isinstance(n, ast.Attribute) and n.attr == "FILE"
              and "AutoShardPolicy" in ast.unparse(n.value)]
    if not policy or workers < 2:
        return
    files: set[str] = set()
    for node in ast.walk(f.tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = ast.unparse(node.func).rsplit(".", 1)[-1]
        if name not in ("list_files", "TFRecordDataset", "TextLineDataset", "FixedLengthRecordDataset", "glob"):
            continue
        arg = node.args[0]
        patterns = [e.value for e in (arg.elts if isinstance(arg, ast.List | ast.Tuple) else [arg])
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        for pattern in patterns:
            if "://" in pattern:
                return  # remote files: their number is unknown here
            matched = glob.glob(str(root / pattern)) if any(c in pattern for c in "*?[") else [pattern]
            files.update(matched)
    if files and len(files) < workers:
        yield Finding("file-sharding", f.name, policy[0].lineno,
                      f"the dataset is sharded by file (AutoShardPolicy.FILE) over {len(files)} file(s) for {workers} "
                      "workers: TensorFlow fails (or a worker gets no data and the others wait for it)",
                      f"split the data into at least {workers} files (a multiple of the workers is best), or shard "
                      "by element: AutoShardPolicy.DATA")


def _unscaled_batch(src: TrainerSource) -> Iterator[Finding]:
    for f in src.files:
        for node in ast.walk(f.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "batch" and node.args:
                yield Finding("unscaled-batch", f.name, node.lineno,
                              f"{ast.unparse(node.func.value)[:40]}.batch({ast.unparse(node.args[0])[:30]}) is the "
                              "global batch under MultiWorkerMirroredStrategy, and nothing here scales it by the "
                              "number of replicas: each replica trains on a fraction of the batch you meant",
                              "batch with per_replica_batch * strategy.num_replicas_in_sync (or "
                              "input_context.get_per_replica_batch_size(global_batch) in a dataset function)")
                return
