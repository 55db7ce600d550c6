"""Recording a new job, whatever backend runs it: the resolved spec, the options its driver needs,
and the backend's name, so any process can run, read or cancel it later."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from multiworker.backends.base import get_backend
from multiworker.faults import check_injections, parse_injection
from multiworker.job import LogLayout, RunOptions, Store, new_job_id
from multiworker.private_files import write_private_text
from multiworker.spec.load import LoadedSpec

__all__ = ["create_job"]

log = logging.getLogger(__name__)


def create_job(
    store: Store,
    loaded: LoadedSpec,
    *,
    backend: str = "local",
    backend_options: Mapping[str, Any] | None = None,
    trainer_args: Sequence[str] = (),
    inject_failures: Sequence[str] = (),
) -> str:
    """Record a new Pending job for ``backend`` and return its id.

    The backend validates its options and checks the spec first (a ``UserError`` before anything is
    written); its notes join the spec's in the record's run options.
    """
    runner = get_backend(backend)
    options = runner.options(dict(backend_options or {}))
    notes = runner.check(loaded, options)
    injections = [parse_injection(t) for t in inject_failures]
    check_injections(loaded.spec, injections)
    job_id = new_job_id()
    while store.has_job(job_id):
        job_id = new_job_id()
    layout = LogLayout(store.home / "jobs" / job_id)
    layout.job_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    spec = loaded.spec
    if spec.output_dir and "://" in spec.output_dir:  # a cloud backend's gs:// output stays a URI
        output_dir = spec.output_dir
    else:
        output_dir = loaded.resolve(spec.output_dir) if spec.output_dir else layout.job_dir / "output"
    write_private_text(layout.spec_file, spec.model_dump_json(indent=2, exclude_none=True))
    run = RunOptions(trainer_args=tuple(trainer_args), inject_failures=tuple(str(i) for i in injections),
                     notes=(*loaded.notes, *notes), map_paths=loaded.map_paths)
    store.create_job(
        job_id=job_id,
        name=spec.name,
        backend=backend,
        spec_json=spec.model_dump_json(),
        format=loaded.format,
        spec_path=str(loaded.path.resolve()) if loaded.path else None,
        base_dir=str(loaded.base_dir),
        output_dir=str(output_dir),
        job_dir=str(layout.job_dir),
        run=run,
        backend_options=options.model_dump(exclude_defaults=True),
    )
    log.debug("created job %s (%s backend)", job_id, backend)
    return job_id
