"""Job specs: the native model, loading and validation, and cloud formats."""

from multiworker.spec.load import (
    LoadedSpec,
    apply_overrides,
    check_programs,
    load_spec,
    read_yaml,
    spec_from_dict,
)
from multiworker.spec.model import (
    ROLES,
    JobSpec,
    PoolSpec,
    Program,
    RunPolicy,
    format_duration,
    parse_duration,
)

__all__ = [
    "ROLES",
    "JobSpec",
    "PoolSpec",
    "Program",
    "RunPolicy",
    "LoadedSpec",
    "load_spec",
    "read_yaml",
    "spec_from_dict",
    "apply_overrides",
    "check_programs",
    "parse_duration",
    "format_duration",
]
