"""``TrajectoryStore``: a database of trajectories, deduplicated by content and ranked by GDI.

One API over two engines:

* **SQLite** (the default, embedded, nothing to run): a file path or ``sqlite:///path``. The
  database is in WAL mode, so readers never block the writer and several processes can add
  at once (each write waits up to 60 s for the lock instead of failing).
* **PostgreSQL** for many concurrent writers: ``postgresql://user@host:port/db`` (extra
  ``postgres``, psycopg 3).

``add`` stores trajectories in one transaction and skips those whose content hash
(``trajectoryhub.dedup.content_hash``: same task and same calls and observations) is already
there; when it returns, the batch is committed — nothing acknowledged is lost if the process
dies afterwards, and a process killed mid-batch leaves none of that batch behind. Text either
engine cannot hold is refused before anything is written, the same on both (``text_problem``):
a NUL character in a field the store keeps as its own column (id, task.id, task.domain, agent,
model — PostgreSQL text cannot hold NUL; elsewhere the trajectory's JSON escapes it as
``\\u0000``), and a lone UTF-16 surrogate anywhere (it is not Unicode text).

Only a store opened to be written to (``create=True``, the default; ``knowlyr-hub store add``)
is created; one opened with ``create=False`` must exist already — an SQLite file that is not
there, or a database without the ``trajectories`` table, is ``NoStoreError``, and no file is
made. A stored trajectory is named by its hash or by any prefix of it at least
``MIN_HASH_PREFIX`` (8) hex digits long that no other stored hash shares (``resolve``), such as
the 12 digits ``store list`` prints.

Several processes may open a new PostgreSQL store at once: the schema is created under a
transaction-scoped advisory lock, and a creation that still collides with another is retried.
A store file that is damaged, not SQLite, or holds a foreign ``trajectories`` table is refused
with one line naming the file.

**GDI** (seed 004): a weighted sum of four signals, each in [0, 1]:

=============  ======  ===================================================================
signal         weight  value
=============  ======  ===================================================================
intrinsic      0.35    the trajectory's reward (clipped to [0, 1]; 0 when unscored)
utility        0.30    ``ln(1 + exports) / ln(1 + max exports in the store)``: how often it
                       went into a training set, log-normalised (0 when nothing was exported)
feedback       0.20    the training effect on similar tasks, set with ``mark_feedback``
                       (default 0.5: unknown)
freshness      0.15    ``1 / (1 + 0.05 · age in days)`` since it was stored
=============  ======  ===================================================================

Weights are configurable (``GDIWeights``), must be finite and non-negative with a positive
sum, and are normalised to sum to 1. Ordering by GDI is computed by the database.

Examples:
    >>> round(gdi_score(reward=0.8, exports=3, max_exports=7, feedback=0.5, age_days=10), 4)
    0.68
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypedDict

from pydantic import ValidationError
from typing_extensions import Unpack

from knowlyrcore import Trajectory
from knowlyrcore.errors import InputError, KnowlyrError, require_extra
from trajectoryhub.dedup import content_hash

FRESHNESS_DECAY = 0.05  # per day, as in seed 004's GDI
DEFAULT_FEEDBACK = 0.5
ORDERS = ("gdi", "reward", "time")
MIN_HASH_PREFIX = 8  # hex digits of a hash that name a stored trajectory (store list prints 12)
_HEX = re.compile(r"[0-9a-f]+")
_SECONDS_PER_DAY = 86400.0


class StoreError(InputError):
    """A bad store URL, query or weight, a hash that is not in the store, a damaged or foreign
    store file, or text no store can hold."""


class NoStoreError(StoreError):
    """A store opened with ``create=False`` is not there: no SQLite file, or no ``trajectories``
    table in the file or database. ``where`` names it (a PostgreSQL URL without its password)."""

    def __init__(self, where: str, why: str):
        super().__init__(f"{where}: no trajectory store there ({why})")
        self.where = where


class StoreBusyError(KnowlyrError):
    """Another writer held the SQLite write lock past the 60 s wait (a failure, not bad input)."""


@dataclass(frozen=True)
class GDIWeights:
    """GDI weights (seed 004's by default); validated and normalised to sum to 1."""

    intrinsic: float = 0.35
    utility: float = 0.30
    feedback: float = 0.20
    freshness: float = 0.15

    def __post_init__(self) -> None:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise StoreError(f"GDI weight {name}: must be a finite number, got {value!r}")
            if value < 0:
                raise StoreError(f"GDI weight {name}: must be >= 0, got {value}")
        total = sum(values.values())
        if total <= 0:
            raise StoreError("GDI weights: at least one must be positive")
        for name, value in values.items():
            object.__setattr__(self, name, value / total)

    @classmethod
    def parse(cls, text: str) -> GDIWeights:
        """``intrinsic=0.5,utility=0.2,...`` (names not given keep their default)."""
        given: dict[str, float] = {}
        names = {f.name for f in fields(cls)}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            if not sep or name.strip() not in names:
                raise StoreError(f"GDI weights: expected name=value with a name in {sorted(names)}, got {part!r}")
            try:
                given[name.strip()] = float(value)
            except ValueError:
                raise StoreError(f"GDI weight {name.strip()}: not a number: {value!r}") from None
        return cls(**given)


def gdi_score(
    *,
    reward: float | None,
    exports: int,
    max_exports: int,
    feedback: float,
    age_days: float,
    weights: GDIWeights | None = None,
) -> float:
    """The GDI of one trajectory (the same formula the database evaluates)."""
    w = weights or GDIWeights()
    intrinsic = _clip01(reward or 0.0)
    utility = math.log1p(exports) / math.log1p(max_exports) if max_exports > 0 else 0.0
    freshness = 1.0 / (1.0 + FRESHNESS_DECAY * max(0.0, age_days))
    return w.intrinsic * intrinsic + w.utility * utility + w.feedback * feedback + w.freshness * freshness


class QueryFilters(TypedDict, total=False):
    """The filters of ``TrajectoryStore.query``: a trajectory is returned when it matches every one
    given (None: no filter)."""

    task: str | None  # this task id
    domain: str | None
    agent: str | None
    success: bool | None  # True: successful episodes, False: failed ones
    min_reward: float | None
    max_reward: float | None
    since: float | None  # stored at or after this time (unix seconds)
    until: float | None  # stored at or before this time (unix seconds)


@dataclass(frozen=True)
class StoredTrajectory:
    """One row of the store: the trajectory and its ranking signals."""

    hash: str
    trajectory: Trajectory
    reward: float | None
    exports: int
    feedback: float
    created_at: float
    gdi: float


@dataclass(frozen=True)
class AddReport:
    added: int
    duplicates: int
    hashes: list[str]


_COLUMNS = (
    "hash",
    "id",
    "task_id",
    "domain",
    "agent",
    "model",
    "success",
    "reward",
    "intrinsic",
    "created_at",
    "exports",
    "feedback",
    "record",
)
_TABLE = """CREATE TABLE IF NOT EXISTS trajectories (
        hash TEXT PRIMARY KEY,
        id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        domain TEXT NOT NULL,
        agent TEXT NOT NULL,
        model TEXT NOT NULL,
        success SMALLINT,
        reward DOUBLE PRECISION,
        intrinsic DOUBLE PRECISION NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        exports INTEGER NOT NULL DEFAULT 0,
        feedback DOUBLE PRECISION NOT NULL DEFAULT 0.5,
        record TEXT NOT NULL)"""
_INDEXES = [
    f"CREATE INDEX IF NOT EXISTS trajectories_{c} ON trajectories ({c})"
    for c in ("task_id", "domain", "agent", "reward", "created_at")
]
# Any constant shared by every process creating the schema; pg_advisory_xact_lock takes a bigint.
_SCHEMA_LOCK = 0x6B6E6F776C7972  # "knowlyr"
_SCHEMA_ATTEMPTS = 5
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def text_problem(trajectory: Trajectory) -> tuple[str, str] | None:
    """``(field, problem)`` for the first text of ``trajectory`` that no store can hold, or None.

    Checked before anything reaches a database so SQLite and PostgreSQL accept exactly the same
    trajectories: PostgreSQL text refuses NUL (SQLite would store it), and a lone surrogate cannot
    be encoded as UTF-8 at all."""
    # the fields kept as their own columns; the rest lives only in the JSON record, which escapes NUL
    columns = {
        "id": trajectory.id,
        "task.id": trajectory.task.id,
        "task.domain": trajectory.task.domain,
        "agent": trajectory.agent,
        "model": trajectory.model,
    }
    for field, value in columns.items():
        if value and "\x00" in value:
            return field, "contains a NUL character (\\x00), which a store column cannot hold"
    stack: list[tuple[Any, str]] = [(trajectory.model_dump(), "")]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str) and _SURROGATE.search(item):
            return at, "contains a lone UTF-16 surrogate, which is not Unicode text"
        if isinstance(item, dict):
            for key, value in reversed(list(item.items())):
                # the path is printed in the error: a key that is not printable is shown by repr()
                name = (f"{at}.{key}" if at else key) if key.isprintable() else f"{at}[{key!r}]"
                if _SURROGATE.search(key):
                    return name, "the key contains a lone UTF-16 surrogate, which is not Unicode text"
                stack.append((value, name))
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{at}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


class TrajectoryStore:
    """Trajectories in SQLite (default) or PostgreSQL, deduplicated and ranked by GDI.

    ``url``: a file path or ``sqlite:///path`` (SQLite), or ``postgresql://...``. ``create``:
    make the store (file, table, indexes) when it is not there; with False a store that is not
    there is ``NoStoreError`` and nothing is created or written while opening.
    """

    def __init__(
        self,
        url: str | os.PathLike = "trajectories.db",
        *,
        weights: GDIWeights | None = None,
        create: bool = True,
    ):
        self.url = str(url)
        self.weights = weights or GDIWeights()
        self._transient: tuple[type[Exception], ...] = ()  # schema-creation errors worth another try
        if self.url.startswith(("postgresql://", "postgres://")):
            self.name = _redact(self.url)
            self._connect_postgres()
        else:
            self.name = self.url.removeprefix("sqlite:///").removeprefix("sqlite://")
            if not create and self.name != ":memory:" and not Path(self.name).exists():
                raise NoStoreError(self.name, "no such file")
            self._connect_sqlite(self.name, create=create)
        try:
            if create:
                self._create_schema()
            elif self.dialect == "postgres":  # SQLite checked it on connecting, before setting WAL mode
                self._require_schema()
        except BaseException:
            self._conn.close()
            raise

    def _create_schema(self) -> None:
        for attempt in range(1, _SCHEMA_ATTEMPTS + 1):
            try:
                with self._transaction() as cur:
                    if self.dialect == "postgres":
                        # without it, two first writers both find no table and one dies on a
                        # duplicate key in pg_type; the lock is released at commit
                        cur.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
                    cur.execute(_TABLE)
                    cur.execute(self._columns_query())
                    self._check_columns(cur.fetchall())
                    for statement in _INDEXES:
                        cur.execute(statement)
                return
            except self._transient:
                # a creator that took no lock (an older version) committed first: it is there now
                if attempt == _SCHEMA_ATTEMPTS:
                    raise

    def _require_schema(self) -> None:
        """A store opened without ``create``: its table must be there (nothing is created)."""
        if self.dialect == "sqlite":
            found = self._select("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'trajectories'", ())
        else:
            found = self._select("SELECT 1 WHERE to_regclass('trajectories') IS NOT NULL", ())
        if not found:
            raise NoStoreError(self.name, "no table 'trajectories': nothing was ever added to it")
        self._check_columns(self._select(self._columns_query(), ()))

    def _columns_query(self) -> str:
        if self.dialect == "sqlite":
            return "SELECT name FROM pragma_table_info('trajectories')"
        return (
            "SELECT attname FROM pg_attribute WHERE attrelid = 'trajectories'::regclass "
            "AND attnum > 0 AND NOT attisdropped"
        )

    def _check_columns(self, rows: Sequence[tuple]) -> None:
        """Refuse a ``trajectories`` table someone else made: CREATE ... IF NOT EXISTS kept it."""
        missing = sorted(set(_COLUMNS) - {row[0] for row in rows})
        if missing:
            raise StoreError(
                f"{self.name}: its table 'trajectories' is not a trajectory store's (no column {', '.join(missing)})"
            )

    # --- connections ---------------------------------------------------------------------------

    def _connect_sqlite(self, path: str, *, create: bool) -> None:
        self.dialect = "sqlite"
        if create and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        try:
            # autocommit off by hand (isolation_level=None): transactions are explicit BEGIN IMMEDIATE
            self._conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path}: not a usable SQLite database ({exc})") from None
        try:
            if not create:  # before the journal mode is set: a file that holds no store is left as it was
                self._require_schema()
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable at each commit's checkpoint
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise StoreError(f"{path}: not a usable SQLite database ({exc})") from None
        except BaseException:
            self._conn.close()
            raise
        # SQLite builds without the math functions exist; GDI needs the natural log
        self._conn.create_function("ln", 1, math.log, deterministic=True)

    def _connect_postgres(self) -> None:
        self.dialect = "postgres"
        psycopg = require_extra("psycopg", "knowlyr-hub", "postgres", "a PostgreSQL store")
        try:
            self._conn = psycopg.connect(self.url, autocommit=False, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {_redact(self.url)}: {str(exc).strip().splitlines()[0]}") from None
        errors = psycopg.errors
        self._transient = (
            errors.UniqueViolation,
            errors.DuplicateTable,
            errors.SerializationFailure,
            errors.DeadlockDetected,
        )

    def _sql(self, statement: str) -> str:
        return statement.replace("?", "%s") if self.dialect == "postgres" else statement

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """SQLite's errors as one line naming the file: a damaged page surfaces at whichever
        statement first reads it, so every statement goes through here."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreBusyError(f"{self.name}: {exc}") from None
            raise StoreError(f"{self.name}: {exc}") from None
        except sqlite3.DatabaseError as exc:  # malformed pages, not a database
            raise StoreError(f"{self.name}: not a usable SQLite database ({exc})") from None

    def _load(self, key: str, record: str) -> Trajectory:
        try:
            return Trajectory.model_validate_json(record)
        except ValidationError as err:
            problem = err.errors()[0]["msg"]
            raise StoreError(f"{self.name}: stored trajectory {key[:12]} is damaged ({problem})") from None

    class _Tx:
        def __init__(self, store: TrajectoryStore):
            self.store = store

        def __enter__(self) -> Any:
            conn = self.store._conn
            self.cursor = conn.cursor()
            if self.store.dialect == "sqlite":
                with self.store._errors():
                    self.cursor.execute("BEGIN IMMEDIATE")  # take the write lock now, not at the first write
            return _Cursor(self.cursor, self.store._sql, self.store._errors)

        def __exit__(self, exc_type, exc, tb) -> None:
            conn = self.store._conn
            try:
                with self.store._errors():
                    if exc_type is None:
                        conn.commit() if self.store.dialect == "postgres" else self.cursor.execute("COMMIT")
                    elif self.store.dialect == "postgres":
                        conn.rollback()
                    elif conn.in_transaction:  # SQLite may have rolled back already (a damaged page)
                        self.cursor.execute("ROLLBACK")
            finally:
                self.cursor.close()

    def _transaction(self) -> TrajectoryStore._Tx:
        return TrajectoryStore._Tx(self)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> TrajectoryStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- writing -------------------------------------------------------------------------------

    def add(self, trajectories: Trajectory | Iterable[Trajectory], *, now: float | None = None) -> AddReport:
        """Store trajectories in one transaction; those already stored (same content hash, also
        within the batch) are skipped. Returns how many were new and every trajectory's hash."""
        batch = [trajectories] if isinstance(trajectories, Trajectory) else list(trajectories)
        stamp = time.time() if now is None else float(now)
        insert = (
            f"INSERT INTO trajectories ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))}) "
            "ON CONFLICT (hash) DO NOTHING"
        )
        for position, t in enumerate(batch, start=1):  # the whole batch, before the transaction
            problem = text_problem(t)
            if problem:
                raise StoreError(f"trajectory {position} of the batch: {problem[0]}: {problem[1]}")
        added, hashes = 0, []
        with self._transaction() as cur:
            for t in batch:
                key = content_hash(t)
                hashes.append(key)
                success = t.outcome.success if t.outcome is not None else None
                row = (
                    key,
                    t.id,
                    t.task.id,
                    t.task.domain or "",
                    t.agent or "",
                    t.model or "",
                    None if success is None else int(success),
                    t.reward,
                    _clip01(t.reward or 0.0),
                    stamp,
                    0,
                    DEFAULT_FEEDBACK,
                    t.model_dump_json(),
                )
                cur.execute(insert, row)
                added += max(cur.rowcount, 0)
        return AddReport(added=added, duplicates=len(batch) - added, hashes=hashes)

    def record_exports(self, hashes: Sequence[str]) -> None:
        """Count one more export into a training set for each hash (the GDI's utility)."""
        with self._transaction() as cur:
            for key in hashes:
                cur.execute("UPDATE trajectories SET exports = exports + 1 WHERE hash = ?", (key,))

    def mark_feedback(self, key: str, value: float) -> str:
        """Set the training-effect feedback of a trajectory (0 harmful .. 1 helpful). ``key``: its
        hash or a unique prefix of it (``resolve``). Returns the full hash."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise StoreError(f"feedback must be a number in [0, 1], got {value!r}")
        full = self.resolve(key)
        with self._transaction() as cur:
            cur.execute("UPDATE trajectories SET feedback = ? WHERE hash = ?", (float(value), full))
            if cur.rowcount == 0:
                raise StoreError(f"no trajectory with hash {key[:80]!r} in the store")
        return full

    # --- reading -------------------------------------------------------------------------------

    def resolve(self, key: str) -> str:
        """The full hash of the one stored trajectory whose hash starts with ``key``: the whole hash,
        or a prefix of at least ``MIN_HASH_PREFIX`` hex digits (the 12 ``store list`` prints).
        Not found, too short and shared by several trajectories are each a one-line ``StoreError``."""
        prefix = str(key).strip().lower()
        if not (MIN_HASH_PREFIX <= len(prefix) <= 64 and _HEX.fullmatch(prefix)):
            raise StoreError(
                f"{str(key)[:80]!r} is not a trajectory hash: give its 64 hex digits or at least "
                f"its first {MIN_HASH_PREFIX} (store list prints 12)"
            )
        if len(prefix) == 64:
            rows = self._select("SELECT COUNT(*), MIN(hash) FROM trajectories WHERE hash = ?", (prefix,))
        else:
            # the prefix is hex digits only, so it holds no pattern characters; SQLite's GLOB is
            # case-sensitive and answered from the hash index, PostgreSQL's LIKE is case-sensitive
            match = "hash GLOB ?" if self.dialect == "sqlite" else "hash LIKE ?"
            pattern = prefix + ("*" if self.dialect == "sqlite" else "%")
            rows = self._select(f"SELECT COUNT(*), MIN(hash) FROM trajectories WHERE {match}", (pattern,))
        count, full = int(rows[0][0]), rows[0][1]
        if count == 0:
            raise StoreError(f"no trajectory with hash {str(key)[:80]!r} in the store")
        if count > 1:
            raise StoreError(
                f"hash {prefix!r} is ambiguous: {count} stored trajectories start with it; give more of its digits"
            )
        return str(full)

    def get(self, key: str) -> Trajectory:
        """The stored trajectory of a hash or a unique prefix of it (``resolve``)."""
        full = self.resolve(key)
        rows = self._select("SELECT record FROM trajectories WHERE hash = ?", (full,))
        if not rows:
            raise StoreError(f"no trajectory with hash {key[:80]!r} in the store")
        return self._load(full, rows[0][0])

    def __len__(self) -> int:
        return int(self._select("SELECT COUNT(*) FROM trajectories", ())[0][0])

    def __contains__(self, key: object) -> bool:
        return bool(self._select("SELECT 1 FROM trajectories WHERE hash = ?", (str(key),)))

    def query(
        self,
        *,
        order_by: str = "gdi",
        limit: int | None = None,
        now: float | None = None,
        **filters: Unpack[QueryFilters],
    ) -> list[StoredTrajectory]:
        """Trajectories matching every given filter (``QueryFilters``), best first (``order_by``:
        gdi, reward or time — newest first)."""
        return list(self.iter_query(order_by=order_by, limit=limit, now=now, **filters))

    def iter_query(
        self,
        *,
        order_by: str = "gdi",
        limit: int | None = None,
        now: float | None = None,
        **filters: Unpack[QueryFilters],
    ) -> Iterator[StoredTrajectory]:
        if order_by not in ORDERS:
            raise StoreError(f"order_by must be one of {', '.join(ORDERS)}, got {order_by!r}")
        if limit is not None and limit < 1:
            raise StoreError(f"limit must be >= 1, got {limit}")
        where, params = self._where(dict(filters))
        stamp = time.time() if now is None else float(now)
        max_exports = int(self._select("SELECT COALESCE(MAX(exports), 0) FROM trajectories", ())[0][0])
        w = self.weights
        utility = (
            "ln(CAST(1 + exports AS DOUBLE PRECISION)) / ln(CAST(1 + ? AS DOUBLE PRECISION))"
            if max_exports > 0
            else "0"
        )
        gdi = (
            f"(? * intrinsic + ? * {utility} + ? * feedback "
            f"+ ? / (1 + {FRESHNESS_DECAY} * (CASE WHEN ? > created_at THEN ? - created_at ELSE 0 END) / "
            f"{_SECONDS_PER_DAY}))"
        )
        gdi_params: list[Any] = [
            w.intrinsic,
            w.utility,
            *([max_exports] if max_exports > 0 else []),
            w.feedback,
            w.freshness,
            stamp,
            stamp,
        ]
        order = {
            "gdi": "gdi DESC",
            "reward": "reward DESC NULLS LAST" if self.dialect == "postgres" else "reward IS NULL, reward DESC",
            "time": "created_at DESC",
        }[order_by]
        statement = (
            f"SELECT hash, record, reward, exports, feedback, created_at, {gdi} AS gdi FROM trajectories"
            f"{where} ORDER BY {order}, hash{' LIMIT ?' if limit else ''}"
        )
        rows = self._select(statement, (*gdi_params, *params, *([limit] if limit else [])))
        for key, record, reward, exports, feedback, created_at, score in rows:
            yield StoredTrajectory(
                hash=key,
                trajectory=self._load(key, record),
                reward=reward,
                exports=int(exports),
                feedback=float(feedback),
                created_at=float(created_at),
                gdi=float(score),
            )

    def stats(self) -> dict[str, Any]:
        """Counts by domain and agent, success rate, mean reward, exports."""
        total, successes, labelled, mean_reward, exports = self._select(
            "SELECT COUNT(*), COALESCE(SUM(success), 0), COUNT(success), AVG(reward), COALESCE(SUM(exports), 0) "
            "FROM trajectories",
            (),
        )[0]
        by = {}
        for column in ("domain", "agent"):
            by[column] = {
                name or "(none)": int(n)
                for name, n in self._select(
                    f"SELECT {column}, COUNT(*) FROM trajectories GROUP BY {column} ORDER BY COUNT(*) DESC, {column}",
                    (),
                )
            }
        return {
            "trajectories": int(total),
            "success_rate": round(int(successes) / labelled, 4) if labelled else None,
            "mean_reward": None if mean_reward is None else round(float(mean_reward), 6),
            "exports": int(exports),
            "by_domain": by["domain"],
            "by_agent": by["agent"],
            "engine": self.dialect,
        }

    # --- exports -------------------------------------------------------------------------------

    def export_jsonl(self, path: str | os.PathLike, **query: Any) -> int:
        """Write the matching trajectories (best first) as trajectory JSONL, atomically, and count
        the export for each."""
        from knowlyrcore import write_trajectories

        rows = self.query(**query)
        write_trajectories(path, [r.trajectory for r in rows])
        self.record_exports([r.hash for r in rows])
        return len(rows)

    def export_parquet(self, path: str | os.PathLike, **query: Any) -> int:
        """Write the matching trajectories as Parquet (one row each: the ranking columns and the
        trajectory as JSON text), loadable with ``datasets.load_dataset("parquet", ...)``."""
        pa = require_extra("pyarrow", "knowlyr-hub", "parquet", "Parquet export")
        pq = require_extra("pyarrow.parquet", "knowlyr-hub", "parquet", "Parquet export")
        rows = self.query(**query)
        table = pa.table(
            {
                "hash": [r.hash for r in rows],
                "id": [r.trajectory.id for r in rows],
                "task_id": [r.trajectory.task.id for r in rows],
                "domain": [r.trajectory.task.domain or "" for r in rows],
                "agent": [r.trajectory.agent or "" for r in rows],
                "success": [None if r.trajectory.outcome is None else r.trajectory.outcome.success for r in rows],
                "reward": pa.array([r.reward for r in rows], type=pa.float64()),
                "gdi": pa.array([r.gdi for r in rows], type=pa.float64()),
                "exports": pa.array([r.exports for r in rows], type=pa.int64()),
                "trajectory": [r.trajectory.model_dump_json() for r in rows],
            }
        )
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            pq.write_table(table, tmp)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        self.record_exports([r.hash for r in rows])
        return len(rows)

    # --- helpers -------------------------------------------------------------------------------

    def _select(self, statement: str, params: Sequence[Any]) -> list[tuple]:
        cursor = self._conn.cursor()
        try:
            with self._errors():
                cursor.execute(self._sql(statement), tuple(params))
                rows = cursor.fetchall()
        finally:
            cursor.close()
        if self.dialect == "postgres":
            self._conn.commit()  # end the read transaction: a long-lived reader must not hold a snapshot
        return rows

    def _where(self, filters: dict[str, Any]) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for key, column in (("task", "task_id"), ("domain", "domain"), ("agent", "agent")):
            if filters.get(key) is not None:
                clauses.append(f"{column} = ?")
                params.append(str(filters[key]))
        if filters.get("success") is not None:
            clauses.append("success = ?")
            params.append(int(bool(filters["success"])))
        for key, clause in (
            ("min_reward", "reward >= ?"),
            ("max_reward", "reward <= ?"),
            ("since", "created_at >= ?"),
            ("until", "created_at <= ?"),
        ):
            value = filters.get(key)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise StoreError(f"{key} must be a finite number, got {value!r}")
                clauses.append(clause)
                params.append(float(value))
        unknown = set(filters) - set(QueryFilters.__annotations__)
        if unknown:
            raise StoreError(f"unknown filter(s) {sorted(unknown)}")
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


class _Cursor:
    """A cursor that writes ``?`` placeholders in the engine's own style."""

    def __init__(self, cursor: Any, translate: Any, errors: Any):
        self._cursor, self._translate, self._errors = cursor, translate, errors

    def execute(self, statement: str, params: Sequence[Any] = ()) -> None:
        with self._errors():
            self._cursor.execute(self._translate(statement), tuple(params))

    def fetchall(self) -> list[tuple]:
        with self._errors():
            return self._cursor.fetchall()

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount


def _clip01(value: float) -> float:
    return min(1.0, max(0.0, float(value)))


def _redact(url: str) -> str:
    """The URL without its password."""
    head, at, tail = url.rpartition("@")
    if not at:
        return url
    scheme, _, credentials = head.partition("://")
    return f"{scheme}://{credentials.split(':', 1)[0]}:***@{tail}" if ":" in credentials else url
