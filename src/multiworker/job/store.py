"""Job records in SQLite (WAL) under MULTIWORKER_HOME: jobs, replicas, attempts, events,
per-epoch metrics and resource samples.

A job's driver (the group controller) is the only writer of its rows while it runs; any other
process may read, and record an end the driver can no longer record (Lost, Cancelled).
``PRAGMA user_version`` holds the schema version; :data:`MIGRATIONS` bring older stores forward.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from multiworker.errors import JobNotFound, UserError
from multiworker.home import home_dir
from multiworker.job import final_state
from multiworker.job.layout import LogLayout
from multiworker.job.record import JOB_COLUMNS, JobRecord, RunOptions
from multiworker.job.states import JobState, ReplicaState

log = logging.getLogger(__name__)
_TERMINAL_VALUES = {s.value for s in JobState if s.is_terminal and s is not JobState.LOST}

__all__ = ["Store", "SCHEMA_VERSION", "MIGRATIONS", "new_job_id"]

# jobs.state holds JobState values, replicas.state ReplicaState values (multiworker.job.states)
_TERMINAL = tuple(sorted(s.value for s in JobState if s.is_terminal))
MAX_SAMPLES_PER_JOB = 20_000

_V1 = """
CREATE TABLE jobs (
  id TEXT PRIMARY KEY, name TEXT NOT NULL, state TEXT NOT NULL, backend TEXT NOT NULL DEFAULT 'local',
  format TEXT, spec_path TEXT, base_dir TEXT, spec_json TEXT NOT NULL, output_dir TEXT, job_dir TEXT,
  created_at REAL NOT NULL, started_at REAL, finished_at REAL, restarts INTEGER NOT NULL DEFAULT 0,
  supervisor_pid INTEGER, message TEXT, options_json TEXT
);
CREATE TABLE replicas (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, role TEXT NOT NULL, idx INTEGER NOT NULL,
  state TEXT NOT NULL, pid INTEGER, port INTEGER, exit_code INTEGER, attempt INTEGER NOT NULL DEFAULT 0,
  started_at REAL, finished_at REAL, log_path TEXT,
  PRIMARY KEY (job_id, role, idx)
);
CREATE TABLE attempts (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, n INTEGER NOT NULL,
  started_at REAL NOT NULL, finished_at REAL, outcome TEXT, PRIMARY KEY (job_id, n)
);
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  ts REAL NOT NULL, type TEXT NOT NULL, reason TEXT NOT NULL, replica TEXT, message TEXT
);
CREATE INDEX events_job ON events(job_id, id);
"""

_V2 = """
ALTER TABLE jobs ADD COLUMN heartbeat_at REAL;
CREATE TABLE metrics (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt INTEGER NOT NULL, replica TEXT NOT NULL, ts REAL NOT NULL, kind TEXT NOT NULL,
  epoch INTEGER, step INTEGER, data TEXT NOT NULL
);
CREATE INDEX metrics_job ON metrics(job_id, kind, id);
CREATE TABLE samples (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  ts REAL NOT NULL, replica TEXT NOT NULL, cpu_percent REAL, rss_bytes INTEGER
);
CREATE INDEX samples_job ON samples(job_id, id);
"""

_V3 = """
CREATE TABLE progress (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, replica TEXT NOT NULL, attempt INTEGER NOT NULL,
  ts REAL NOT NULL, epoch INTEGER, epochs INTEGER, step INTEGER, steps INTEGER, steps_per_sec REAL,
  PRIMARY KEY (job_id, replica)
);
CREATE INDEX samples_replica ON samples(job_id, replica, id);
CREATE INDEX jobs_created ON jobs(created_at)
"""

# v4: the backend seam. A backend's own per-job handle (JSON), and where each replica runs.
_V4 = """
ALTER TABLE jobs ADD COLUMN handle_json TEXT;
ALTER TABLE replicas ADD COLUMN host TEXT;
ALTER TABLE replicas ADD COLUMN node TEXT
"""

# MIGRATIONS[i] brings a store from version i to version i+1. Append only: never edit a released one.
MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4)
SCHEMA_VERSION = len(MIGRATIONS)




def _prepare_home(home: Path) -> None:
    """Create the home private to its user (0700): it holds logs and env values such as API keys."""
    if home.exists() and not home.is_dir():
        raise UserError(f"MULTIWORKER_HOME {home}: is not a directory; point MULTIWORKER_HOME at a directory")
    try:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise UserError(f"MULTIWORKER_HOME {home}: cannot create it ({exc.strerror}); "
                        "point MULTIWORKER_HOME at a writable directory") from None
    _tighten(home)


def _tighten(home: Path) -> None:
    """An existing home readable by others (0755, say) is made 0700 when it is ours alone to change:
    not a shared (sticky) directory such as /tmp, nor the user's own home directory."""
    try:
        info = home.stat()
        if info.st_mode & 0o077 == 0 or info.st_uid != os.getuid() or info.st_mode & stat.S_ISVTX \
                or home.resolve() in (Path.home().resolve(), Path("/")):
            return
        home.chmod(0o700)
    except OSError as exc:  # a read-only file system: reading still works
        log.debug("could not make %s private: %s", home, exc)
        return
    log.warning("MULTIWORKER_HOME %s was readable by other users (%o); it is 0700 now", home, info.st_mode & 0o777)


def new_job_id() -> str:
    """Eight hex digits, docker-style, so a short unique prefix is easy to type."""
    return os.urandom(4).hex()


def _steps_between(prev: dict, cur: dict) -> int | None:
    """Steps run from one progress report to the next (across one epoch boundary too), if known."""
    if prev.get("step") is None or cur.get("step") is None or prev.get("epoch") is None:
        return None
    if cur.get("epoch") == prev["epoch"]:
        return max(0, cur["step"] - prev["step"])
    if cur.get("epoch") == prev["epoch"] + 1 and prev.get("steps"):
        return max(0, prev["steps"] - prev["step"]) + cur["step"]
    return None


class Store:
    """A handle on the job database. Cheap to open; one per process or thread."""

    def __init__(self, home: Path | str | None = None, *, migrate_to: int = SCHEMA_VERSION):
        self.home = Path(home).absolute() if home else home_dir()
        _prepare_home(self.home)
        self.path = self.home / "jobs.db"
        # A home this user cannot write (a read-only mount, another user's) is still readable: list,
        # status, logs work on a read-only snapshot; a command that must write says why it cannot.
        self.read_only = self.path.exists() and not (os.access(self.home, os.W_OK) and os.access(self.path, os.W_OK))
        old_umask = os.umask(0o077)  # the database, its WAL and everything written below: 0600
        try:
            if self.read_only:
                self._conn = sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True, timeout=30,
                                             isolation_level=None, check_same_thread=False)
            else:
                self._conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute("PRAGMA busy_timeout=30000")
            if self.read_only and self.schema_version < migrate_to:
                raise UserError(f"{self.path}: the store is read-only and older than this multiworker; "
                                "make MULTIWORKER_HOME writable once to upgrade it")
            self._migrate(migrate_to)
        except sqlite3.DatabaseError as exc:
            if "disk is full" in str(exc):  # the file is fine: there is no room to write
                raise UserError(f"{self.path}: cannot use the job store ({exc}); free space on the disk of "
                                f"{self.home} and retry") from None
            raise UserError(f"{self.path}: cannot use the job store ({exc}); move the file away to start a new "
                            "store, or point MULTIWORKER_HOME elsewhere") from None
        finally:
            os.umask(old_umask)

    # -- plumbing --------------------------------------------------------------------
    def _migrate(self, target: int) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise UserError(
                f"{self.path}: store schema version {version} is newer than this multiworker ({SCHEMA_VERSION}); upgrade multiworker"
            )
        if version >= target:
            return
        with self.transaction():
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            for n in range(version, target):
                for statement in filter(str.strip, MIGRATIONS[n].split(";")):
                    self._conn.execute(statement)
                self._conn.execute(f"PRAGMA user_version={n + 1}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    @property
    def schema_version(self) -> int:
        return self._conn.execute("PRAGMA user_version").fetchone()[0]

    def _one(self, sql: str, *args: Any) -> dict | None:
        row = self._conn.execute(sql, args).fetchone()
        return dict(row) if row else None

    def _all(self, sql: str, *args: Any) -> list[dict]:
        return [dict(r) for r in self._conn.execute(sql, args).fetchall()]

    # -- jobs ------------------------------------------------------------------------
    def create_job(self, *, job_id: str, name: str, spec_json: str, backend: str = "local",
                   run: RunOptions | None = None, backend_options: dict[str, Any] | None = None,
                   format: str | None = None, spec_path: str | None = None, base_dir: str | None = None,
                   output_dir: str | None = None, job_dir: str | None = None) -> JobRecord:
        now = time.time()
        options = {**(run or RunOptions()).to_dict(), "backend_options": dict(backend_options or {})}
        cols = {"id": job_id, "name": name, "state": JobState.PENDING.value, "spec_json": spec_json, "created_at": now,
                "backend": backend, "format": format, "spec_path": spec_path, "base_dir": base_dir,
                "output_dir": output_dir, "job_dir": job_dir, "options_json": json.dumps(options)}
        self._conn.execute(
            f"INSERT INTO jobs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", tuple(cols.values())
        )
        self.add_event(job_id, "Created", f"job {name} created")
        return self.get_job(job_id)

    def update_job(self, job_id: str, **fields: Any) -> None:
        """Set columns of the job's row: only those in ``JOB_COLUMNS`` (a typo is a bug, not a new column)."""
        unknown = set(fields) - JOB_COLUMNS
        if unknown:
            raise ValueError(f"update_job: not a settable job column: {', '.join(sorted(unknown))}")
        fields = {k: (v.value if isinstance(v, JobState) else v) for k, v in fields.items()}
        if fields:
            sets = ", ".join(f"{k} = ?" for k in fields)
            self._conn.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))

    def set_handle(self, job_id: str, handle: dict[str, Any]) -> None:
        """The backend's own per-job handle (a namespace and object name, a resource name...)."""
        self._conn.execute("UPDATE jobs SET handle_json = ? WHERE id = ?", (json.dumps(handle), job_id))

    def set_run_options(self, job_id: str, run: RunOptions) -> None:
        """Replace the run options (a tuning trial's study tag), keeping the backend's options."""
        row = self._one("SELECT options_json FROM jobs WHERE id = ?", job_id) or {}
        options = json.loads(row.get("options_json") or "{}")
        self._conn.execute("UPDATE jobs SET options_json = ? WHERE id = ?",
                           (json.dumps({**options, **run.to_dict()}), job_id))

    def end_job(self, job_id: str, state: JobState, message: str, *, replica_state: ReplicaState) -> bool:
        """For a process other than the job's driver: record a terminal ``state`` unless one is
        recorded already; Pending and Running replicas become ``replica_state``; a warning event
        says why. True if this call recorded it.

        Lost is what a gone driver leaves; but when that driver wrote its final state to the file it
        reserved (the store refused it: a full disk), that state is recorded instead."""
        now = time.time()
        with self.transaction() as conn:
            row = conn.execute("SELECT state, job_dir FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or JobState(row["state"]).is_terminal:
                return False
            if state is JobState.LOST and row["job_dir"]:
                last = final_state.read(LogLayout(Path(row["job_dir"])).final_state)
                if last is not None and last["state"] in _TERMINAL_VALUES:
                    state, now = JobState(last["state"]), float(last.get("finished_at") or now)
                    message = (f"{last.get('message') or ''} (recorded from {final_state.NAME}: the store could "
                               "not be written when the job ended)").strip()
                    replica_state = ReplicaState.STOPPED
            conn.execute("UPDATE jobs SET state = ?, finished_at = ?, message = ? WHERE id = ?",
                         (state.value, now, message, job_id))
            conn.execute("UPDATE replicas SET state = ?, finished_at = ? WHERE job_id = ? AND state IN (?, ?)",
                         (ReplicaState(replica_state).value, now, job_id, ReplicaState.PENDING.value,
                          ReplicaState.RUNNING.value))
            conn.execute("INSERT INTO events (job_id, ts, type, reason, replica, message) VALUES (?, ?, ?, ?, ?, ?)",
                         (job_id, now, "Warning", state.value, None, message))
        return True

    def get_job(self, job_id: str) -> JobRecord:
        row = self._one("SELECT * FROM jobs WHERE id = ?", job_id)
        if row is None:
            raise JobNotFound(f"no job {job_id!r}; `multiworker list` shows the jobs")
        return JobRecord.from_row(row)

    def has_job(self, job_id: str) -> bool:
        return self._one("SELECT 1 AS x FROM jobs WHERE id = ?", job_id) is not None

    def list_jobs(self, limit: int | None = None) -> list[JobRecord]:
        sql = "SELECT * FROM jobs ORDER BY created_at DESC"
        return [JobRecord.from_row(r) for r in self._all(sql + (f" LIMIT {int(limit)}" if limit else ""))]

    def finished_before(self, ts: float) -> list[JobRecord]:
        """Jobs in a terminal state that ended (or, never started, were created) before ``ts``."""
        marks = ", ".join("?" * len(_TERMINAL))
        return [JobRecord.from_row(r) for r in self._all(f"SELECT * FROM jobs WHERE state IN ({marks}) AND COALESCE(finished_at, created_at) < ? "
                         "ORDER BY created_at", *_TERMINAL, ts)]

    def replica_summary(self) -> dict[str, dict[str, int]]:
        """Per job: replica count by state (one query for ``multiworker list``)."""
        out: dict[str, dict[str, int]] = {}
        for row in self._all("SELECT job_id, state, COUNT(*) AS n FROM replicas GROUP BY job_id, state"):
            out.setdefault(row["job_id"], {})[row["state"]] = row["n"]
        return out

    def resolve(self, ref: str) -> str:
        """A job id from a full id, a unique prefix, or ``last``."""
        ref = (ref or "").strip()
        if not ref:
            raise JobNotFound("JOB is empty; give a job id, a unique prefix of one, or `last`")
        if ref in ("last", "latest"):
            row = self._one("SELECT id FROM jobs ORDER BY created_at DESC LIMIT 1")
            if row is None:
                raise JobNotFound("there are no jobs yet; start one with `multiworker run job.yaml`")
            return row["id"]
        rows = self._all("SELECT id FROM jobs WHERE id = ? OR id LIKE ? ESCAPE '\\' ORDER BY created_at", ref,
                         ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        exact = [r["id"] for r in rows if r["id"] == ref]
        if exact:
            return exact[0]
        if not rows:
            raise JobNotFound(f"no job matches {ref!r}; `multiworker list` shows the jobs")
        if len(rows) > 1:
            ids = ", ".join(r["id"] for r in rows[:5])
            raise JobNotFound(f"{ref!r} matches {len(rows)} jobs ({ids}); give more of the id")
        return rows[0]["id"]

    def delete_job(self, job_id: str) -> None:
        with self.transaction() as conn:
            for table in ("progress", "samples", "metrics", "events", "attempts", "replicas"):
                conn.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))
            conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))

    # -- replicas and attempts ---------------------------------------------------------
    def upsert_replica(self, job_id: str, role: str, index: int, **fields: Any) -> None:
        state = ReplicaState(fields.pop("state", ReplicaState.PENDING)).value
        cols = {"job_id": job_id, "role": role, "idx": index, "state": state, **fields}
        updates = ", ".join(f"{k} = excluded.{k}" for k in cols if k not in ("job_id", "role", "idx"))
        self._conn.execute(
            f"INSERT INTO replicas ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
            f"ON CONFLICT(job_id, role, idx) DO UPDATE SET {updates}",
            tuple(cols.values()),
        )

    def replicas(self, job_id: str) -> list[dict]:
        order = "CASE role WHEN 'chief' THEN 0 WHEN 'worker' THEN 1 WHEN 'ps' THEN 2 ELSE 3 END, idx"
        return self._all(f"SELECT * FROM replicas WHERE job_id = ? ORDER BY {order}", job_id)

    def start_attempt(self, job_id: str, n: int) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO attempts (job_id, n, started_at) VALUES (?, ?, ?)", (job_id, n, time.time())
        )

    def end_attempt(self, job_id: str, n: int, outcome: str) -> None:
        self._conn.execute(
            "UPDATE attempts SET finished_at = ?, outcome = ? WHERE job_id = ? AND n = ?", (time.time(), outcome, job_id, n)
        )

    def attempts(self, job_id: str) -> list[dict]:
        return self._all("SELECT * FROM attempts WHERE job_id = ? ORDER BY n", job_id)

    # -- events, metrics, samples ------------------------------------------------------
    def add_event(self, job_id: str, reason: str, message: str = "", *, replica: str | None = None,
                  warning: bool = False) -> None:
        self._conn.execute(
            "INSERT INTO events (job_id, ts, type, reason, replica, message) VALUES (?, ?, ?, ?, ?, ?)",
            (job_id, time.time(), "Warning" if warning else "Normal", reason, replica, message),
        )

    def events(self, job_id: str, after_id: int = 0) -> list[dict]:
        return self._all("SELECT * FROM events WHERE job_id = ? AND id > ? ORDER BY id", job_id, after_id)

    def recent_events(self, job_id: str, n: int) -> list[dict]:
        """The last ``n`` events, oldest first."""
        rows = self._all("SELECT * FROM events WHERE job_id = ? ORDER BY id DESC LIMIT ?", job_id, n)
        return rows[::-1]

    def add_metric(self, job_id: str, attempt: int, replica: str, data: dict) -> None:
        self._conn.execute(
            "INSERT INTO metrics (job_id, attempt, replica, ts, kind, epoch, step, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (job_id, attempt, replica, time.time(), data.get("kind", "epoch"), data.get("epoch"), data.get("step"),
             json.dumps(data)),
        )

    def metrics(self, job_id: str, kind: str | None = None) -> list[dict]:
        sql = "SELECT * FROM metrics WHERE job_id = ?" + (" AND kind = ?" if kind else "") + " ORDER BY id"
        rows = self._all(sql, job_id, *([kind] if kind else []))
        for row in rows:
            row["data"] = json.loads(row["data"])
        return rows

    def add_samples(self, job_id: str, samples: list[tuple[str, float, int]]) -> None:
        """Record (replica, cpu_percent, rss_bytes) taken now; thin the oldest half past the cap."""
        now = time.time()
        with self.transaction() as conn:
            conn.executemany(
                "INSERT INTO samples (job_id, ts, replica, cpu_percent, rss_bytes) VALUES (?, ?, ?, ?, ?)",
                [(job_id, now, r, cpu, rss) for r, cpu, rss in samples],
            )
            count = conn.execute("SELECT COUNT(*) FROM samples WHERE job_id = ?", (job_id,)).fetchone()[0]
            if count > MAX_SAMPLES_PER_JOB:
                cutoff = conn.execute(
                    "SELECT id FROM samples WHERE job_id = ? ORDER BY id LIMIT 1 OFFSET ?", (job_id, count // 2)
                ).fetchone()[0]
                conn.execute("DELETE FROM samples WHERE job_id = ? AND id < ? AND id % 2 = 0", (job_id, cutoff))

    def samples(self, job_id: str, since: float | None = None) -> list[dict]:
        sql = "SELECT ts, replica, cpu_percent, rss_bytes FROM samples WHERE job_id = ?"
        if since is not None:
            return self._all(sql + " AND ts >= ? ORDER BY id", job_id, since)
        return self._all(sql + " ORDER BY id", job_id)

    def latest_samples(self, job_id: str) -> dict[str, dict]:
        """The newest resource sample of each replica."""
        rows = self._all(
            "SELECT s.ts, s.replica, s.cpu_percent, s.rss_bytes FROM samples s JOIN "
            "(SELECT MAX(id) AS id FROM samples WHERE job_id = ? GROUP BY replica) m ON s.id = m.id", job_id)
        return {r["replica"]: r for r in rows}

    # -- progress (latest step per replica) -------------------------------------------------
    def set_progress(self, job_id: str, attempt: int, progress: dict[str, dict]) -> None:
        """Record the latest ``progress`` metric of each replica, with the step rate since the previous one."""
        now = time.time()
        with self.transaction() as conn:
            for replica, m in progress.items():
                prev = conn.execute("SELECT * FROM progress WHERE job_id = ? AND replica = ?", (job_id, replica)).fetchone()
                rate = None
                if prev is not None and prev["attempt"] == attempt and now > prev["ts"]:
                    steps = _steps_between(dict(prev), m)
                    rate = None if steps is None else steps / (now - prev["ts"])
                conn.execute(
                    "INSERT OR REPLACE INTO progress (job_id, replica, attempt, ts, epoch, epochs, step, steps, "
                    "steps_per_sec) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (job_id, replica, attempt, now, m.get("epoch"), m.get("epochs"), m.get("step"), m.get("steps"), rate),
                )

    def progress(self, job_id: str) -> dict[str, dict]:
        return {r["replica"]: r for r in self._all("SELECT * FROM progress WHERE job_id = ?", job_id)}
