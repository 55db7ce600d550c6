"""Make a cloud job runnable here: images -> local programs, gs:// paths -> local dirs, packages -> a path.

Python packages are put on the path, not pip-installed: a source dir is used where it is; an sdist or
wheel is unpacked once into MULTIWORKER_HOME/packages/<sha256>/ (content-addressed, so every job and
restart reuses it). Replicas then run ``python -m MODULE`` with the launcher's interpreter, which
already has TensorFlow; nothing is downloaded and a run starts in milliseconds.
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import shlex
import shutil
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from multiworker.errors import SpecError
from multiworker.spec.formats.common import Parsed
from multiworker.spec.formats.dockerfile import Dockerfile, read_dockerfile
from multiworker.spec.formats.options import LoadOptions
from multiworker.spec.load import spec_from_dict
from multiworker.spec.model import Program

__all__ = ["PathMap", "localize", "parse_images"]

_GS = re.compile(r"(?:gs://|(?<![\w/.])/gcs/)([A-Za-z0-9._-]+)(/[^\s,;\"']*)?")
_PYTHON = re.compile(r"python(3(\.\d+)?)?")
_PYTHON_FLAGS = {"-u", "-B", "-O", "-OO", "-E", "-s", "-S", "-I"}


class PathMap:
    """``gs://bucket[/prefix]=LOCAL`` pairs; the longest prefix wins. ``/gcs/bucket`` (Vertex's mount) too."""

    def __init__(self, items: Iterable[str], *, cwd: Path):
        self.pairs: list[tuple[str, Path]] = []
        for item in items:
            cloud, sep, local = item.partition("=")
            cloud = cloud.strip().rstrip("/")
            if not sep or not local.strip() or not _GS.fullmatch(cloud) or not cloud.startswith("gs://"):
                raise SpecError(f"{item!r} is not gs://BUCKET[/PATH]=LOCAL_DIR; write it like gs://bucket=./data",
                                source="--map-path")
            self.pairs.append((cloud, (cwd / local.strip()).resolve()))
        self.pairs.sort(key=lambda p: -len(p[0]))

    def map(self, text: str, *, source: str, field: str, strict: bool) -> str:
        def local(match: re.Match) -> str:
            uri = f"gs://{match.group(1)}{match.group(2) or ''}"
            for cloud, path in self.pairs:
                if uri == cloud or uri.startswith(cloud + "/"):
                    rest = uri[len(cloud):].lstrip("/")
                    return str(path / rest) if rest else str(path)
            if strict:
                raise SpecError(
                    f"{match.group(0)} is a Cloud Storage path; map it to a local directory with "
                    f"--map-path gs://{match.group(1)}=./local-dir",
                    source=source,
                    field=field,
                )
            return match.group(0)

        return _GS.sub(local, text)


def parse_images(items: Iterable[str]) -> dict[str, list[str]]:
    """``IMAGE=COMMAND`` options -> {image: argv}."""
    out: dict[str, list[str]] = {}
    for item in items:
        image, sep, command = item.partition("=")
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise SpecError(f"{item!r}: {exc}", source="--image") from None
        if not sep or not image.strip() or not argv:
            raise SpecError(f"{item!r} is not IMAGE=COMMAND; write it like gcr.io/p/mnist='python -m trainer.task'",
                            source="--image")
        out[image.strip()] = argv
    return out


def localize(native: dict, parsed: Parsed, options: LoadOptions, *, source: str,
             home: Path) -> tuple[dict, list[str]]:
    """A copy of ``native`` (a well-formed native spec dict) that runs here, and notes about what changed.

    ``home``: where package archives are unpacked (MULTIWORKER_HOME).
    """
    cwd = options.directory()
    images = parse_images(options.images)
    paths = PathMap(options.map_paths, cwd=cwd)
    strict, unpack = options.check, options.unpack
    native = copy.deepcopy(native)
    notes: list[str] = []
    cloud = parsed.format != "native"
    _map_paths(native, parsed, paths, source=source, strict=strict)
    if options.containers:  # the images run as they are: nothing to make local but the paths
        return native, notes
    spec = spec_from_dict(native, source=source)  # for each pool's program, as the launcher resolves it
    df = read_dockerfile(options.dockerfile) if options.dockerfile else None
    if df is not None and df.env:
        notes.append(f"{df.path}: ENV is not applied locally ({', '.join(df.env)}); set `env` in the spec if needed")
    used: set[str] = set()
    pools = native.get("pools") or {}
    for role, pool in pools.items():
        if not isinstance(pool, dict) or not pool.get("replicas", 1):
            continue
        prog = spec.resolved(role)
        args = list(prog.args or [])
        where = f"pools.{role}"
        if role in parsed.packages:
            _use_packages(pool, prog, parsed.packages[role], paths, source=source, cwd=cwd, home=home, strict=strict,
                          unpack=unpack)
            continue
        image = prog.image
        entry = _entry_for(image, images, used)
        if prog.module is None and prog.command is None:
            if entry is not None:
                argv, wd = [*entry, *args], cwd
            elif df is not None:
                argv, ignored = df.argv(args)
                wd = _docker_workdir(df, parsed.workdirs.get(role), source=source)
                if ignored:
                    notes.append(f"{df.path}: ENTRYPOINT is in shell form, so Docker ignores the args of {where}; "
                                 "so does the local run")
            elif strict:
                raise SpecError(
                    f"runs the entry point of image {image or '(none)'}; map the image to a local program with "
                    f"--image {image or 'IMAGE'}='python -m trainer.task' or --dockerfile PATH",
                    source=source,
                    field=parsed.origins.get(f"{where}.image", where),
                )
            else:
                continue
            _set_program(pool, argv, df if entry is None else None, None if prog.working_dir else wd)
        elif cloud:
            wd = _docker_workdir(df, parsed.workdirs.get(role), source=source) if entry is None and df is not None else cwd
            argv = (["python", "-m", prog.module] if prog.module else list(prog.command or [])) + args
            _set_program(pool, argv, df if entry is None else None, None if prog.working_dir is not None else wd)
        elif entry is not None or df is not None:
            notes.append(f"{where} sets its own program, so --image/--dockerfile do not change it")
    unused = [i for i in images if i not in used]
    if unused and strict:
        images_of = (p.get("image") or native.get("image") for p in pools.values() if isinstance(p, dict))
        known = sorted({image for image in images_of if image is not None})
        raise SpecError(f"{unused[0]} is not an image of this job (its images: {', '.join(known) or 'none'})",
                        source="--image")
    return native, notes


def _entry_for(image: str | None, images: dict[str, list[str]], used: set[str]) -> list[str] | None:
    """The --image mapping for ``image``; a mapping without a tag matches every tag."""
    if not image:
        return None
    for key in (image, re.sub(r"(@sha256:[0-9a-f]+|:[\w.-]+)$", "", image)):
        if key in images:
            used.add(key)
            return images[key]
    return None


def _docker_workdir(df: Dockerfile, container_wd: tuple[str, str] | None, *, source: str) -> Path:
    workdir, field = container_wd if container_wd else (df.workdir, None)
    host = df.translate(workdir)
    if host is None:
        raise SpecError(
            f"working directory {workdir} is not copied from the build context by {df.path}; COPY the code "
            f"there (e.g. COPY trainer/ {workdir.rstrip('/')}/trainer/)",
            source=source if field else str(df.path),
            field=field or "WORKDIR",
        )
    return host


def _set_program(pool: dict, argv: list[str], df: Dockerfile | None, wd: Path | None) -> None:
    """Pool-level program fields from a container command line (``python`` is the launcher's)."""
    if df is not None:
        argv = [_translate_arg(a, df) for a in argv]
    pool.pop("module", None)
    pool.pop("command", None)
    head = argv[0] if argv else ""
    if _PYTHON.fullmatch(os.path.basename(head)):
        rest = argv[1:]
        while rest and rest[0] in _PYTHON_FLAGS:
            rest = rest[1:]
        if len(rest) >= 2 and rest[0] == "-m":
            pool["module"], pool["args"] = rest[1], rest[2:]
        else:
            script = 1 if rest and not rest[0].startswith("-") else 0
            pool["command"], pool["args"] = [sys.executable, *rest[:script]], rest[script:]
    else:
        pool["command"], pool["args"] = argv[:1], argv[1:]
    if wd is not None:
        pool["working_dir"] = str(wd)


def _translate_arg(arg: str, df: Dockerfile) -> str:
    """Container paths (``/app/x`` or ``--flag=/app/x``) -> build-context paths where they were copied."""
    prefix, sep, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
    if not value.startswith("/"):
        return arg
    host = df.translate(value)
    return f"{prefix}{sep}{host}" if host is not None else arg


def _map_paths(native: dict, parsed: Parsed, paths: PathMap, *, source: str, strict: bool) -> None:
    def map_in(node: dict, base: str) -> None:
        for key in ("args", "command"):
            items = node.get(key)
            if isinstance(items, list):
                field = parsed.origins.get(f"{base}{key}", f"{base}{key}")
                node[key] = [paths.map(str(a), source=source, field=field, strict=strict) for a in items]
        if isinstance(node.get("env"), dict):
            for name, value in node["env"].items():
                field = parsed.origins.get(f"{base}env.{name}", f"{base}env.{name}")
                node["env"][name] = paths.map(str(value), source=source, field=field, strict=strict)
        for key in ("output_dir", "working_dir"):
            if isinstance(node.get(key), str):
                field = parsed.origins.get(f"{base}{key}", f"{base}{key}")
                node[key] = paths.map(node[key], source=source, field=field, strict=strict)

    map_in(native, "")
    for role, pool in (native.get("pools") or {}).items():
        if isinstance(pool, dict):
            map_in(pool, f"pools.{role}.")


def _use_packages(pool: dict, prog: Program, packages: list[tuple[str, str]], paths: PathMap, *, source: str,
                  cwd: Path, home: Path, strict: bool, unpack: bool = True) -> None:
    """Run the pool's module from its packages. Without ``unpack`` (validate), an archive is checked
    from its index only (safe members, bounded size, the module inside), and nothing is written."""
    module = prog.module or ""
    args = list(prog.args or [])
    top = module.split(".")[0]
    roots: list[Path] = []
    for uri, field in packages:
        local = paths.map(uri, source=source, field=field, strict=strict)
        if local.startswith("gs://"):
            return
        path = (cwd / local).resolve()
        if not path.exists():
            raise SpecError(f"package {path} does not exist; fix the path or --map-path", source=source, field=field)
        if not path.is_dir() and not path.is_file():
            raise SpecError(f"package {path} is neither a source directory nor an sdist or wheel file",
                            source=source, field=field)
        if path.is_file() and not unpack:
            names = {name.strip("/") for name, _ in _archive_members(path)}
            if any(n.split("/")[i:i + 1] == [top] or n.split("/")[i:i + 1] == [f"{top}.py"]
                   for n in names for i in range(3)):
                pool["module"], pool["args"], pool["working_dir"] = module, args, str(path)
                pool.pop("command", None)
                return
            continue
        roots.append(_package_root(path, home) if path.is_file() else path)
    found = [(root, c) for root in roots for c in _candidates(root)
             if (c / top).is_dir() or (c / f"{top}.py").is_file()]
    if not found:
        raise SpecError(f"module {module!r} is in none of the packages ({', '.join(u for u, _ in packages)})",
                        source=source, field=packages[0][1])
    main_root, main = found[0]
    pool["module"], pool["args"], pool["working_dir"] = module, args, str(main)
    pool.pop("command", None)
    others = [str(c) for root in roots if root != main_root for c in _candidates(root)]
    if others:
        existing = os.environ.get("PYTHONPATH")
        pool.setdefault("env", {})["PYTHONPATH"] = os.pathsep.join(others + ([existing] if existing else []))


def _candidates(root: Path) -> list[Path]:
    """Import roots of an unpacked package: the root, an sdist's top dir, and their src/ dirs."""
    markers = ("setup.py", "pyproject.toml", "PKG-INFO")
    tops = [root] + sorted(p for p in root.iterdir() if p.is_dir() and any((p / m).exists() for m in markers))
    out: list[Path] = []
    for top in tops:
        out += [top] + ([top / "src"] if (top / "src").is_dir() else [])
    return out


# Bounds on a package archive, checked from its index before anything is written.
MAX_PACKAGE_MEMBERS = 20_000
MAX_UNPACKED_BYTES = 256 << 20


def _archive_members(path: Path) -> list[tuple[str, int]]:
    """(name, size) of every member of a wheel/zip or sdist, read from the index; one-line errors for a bad archive,
    an unsafe member (absolute, ``..``, a link out, a device) or one that unpacks beyond the bounds above."""
    source = str(path)
    try:
        if path.suffix in (".whl", ".zip") or zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                members = [(i.filename, i.file_size) for i in zf.infolist()]
        elif tarfile.is_tarfile(path):
            with tarfile.open(path) as tf:
                members = []
                for info in tf:
                    try:
                        tarfile.data_filter(info, "/nonexistent-root")
                    except tarfile.FilterError as exc:
                        raise SpecError(f"unsafe member {info.name!r} in the package ({exc}); rebuild it",
                                        source=source) from None
                    members.append((info.name, info.size))
        else:
            raise SpecError("is not a source dir, sdist (.tar.gz) or wheel (.whl)", source=source)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise SpecError(f"is not a readable package archive ({exc}); rebuild it (python -m build)", source=source) from None
    for name, _ in members:
        if name.startswith("/") or ".." in Path(name).parts:
            raise SpecError(f"unsafe path {name!r} in the package; rebuild it", source=source)
    if len(members) > MAX_PACKAGE_MEMBERS:
        raise SpecError(f"has {len(members):,} files, more than {MAX_PACKAGE_MEMBERS:,}; is it the right file?", source=source)
    total = sum(size for _, size in members)
    if total > MAX_UNPACKED_BYTES:
        raise SpecError(f"unpacks to {total >> 20:,} MiB, more than {MAX_UNPACKED_BYTES >> 20} MiB; "
                        "ship the trainer code only, not data", source=source)
    return members


def _package_root(path: Path, home: Path) -> Path:
    """Unpack an sdist or wheel once into home/packages/<sha256>/ and return that directory."""
    _archive_members(path)  # every check before a byte is written
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    target = home / "packages" / f"{digest}-{path.name}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=target.parent))
    try:
        if path.suffix in (".whl", ".zip") or zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                zf.extractall(tmp)
        else:
            with tarfile.open(path) as tf:
                tf.extractall(tmp, filter="data")
        try:
            tmp.rename(target)
        except OSError:  # another job unpacked it first
            shutil.rmtree(tmp, ignore_errors=True)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SpecError(f"cannot unpack it ({exc}); rebuild the package", source=str(path)) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
