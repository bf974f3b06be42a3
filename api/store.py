"""Plans and profiles in SQL (SQLite by default, PostgreSQL for shared replicas).

Rows keep the response JSON as text (serialised once, when the plan is made), so a stored
plan is served byte-for-byte as it was acknowledged; the indexed columns are only what lookups need (request hash, creation time).
The schema is owned by the Alembic migrations in api/migrations; `migrate()` runs them.

Retention: each stored plan prunes, in its own transaction, the older rows of its request
hash beyond `plans_per_request` and (when set) every plan older than `plan_retention_s`, so
`?refresh=true` replaces rather than piles up."""

from __future__ import annotations

import base64
import binascii
import fcntl
import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from alembic import command
from alembic.config import Config
from sqlalchemy import (
    BigInteger,
    Index,
    String,
    Text,
    create_engine,
    delete,
    event,
    func,
    or_,
    select,
    text,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


class Base(DeclarativeBase):
    pass


class PlanRow(Base):
    __tablename__ = "plans"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    # not unique: `plans_per_request` may keep older plans of a request; lookups take the newest.
    request_hash: Mapped[str] = mapped_column(String(64))
    created_us: Mapped[int] = mapped_column(BigInteger)  # microseconds since the epoch
    status: Mapped[str] = mapped_column(String(16))
    body: Mapped[str] = mapped_column(Text)
    __table_args__ = (
        Index("ix_plans_created", "created_us", "id"),
        # the cached lookup (newest plan of a hash) and the per-hash pruning walk this index
        # alone, never the bodies
        Index("ix_plans_hash_created", "request_hash", "created_us", "id"),
    )


class ProfileRow(Base):
    __tablename__ = "profiles"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    created_us: Mapped[int] = mapped_column(BigInteger)
    device: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(Text)


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _):
            # WAL: readers never block the writer; synchronous=FULL: a committed plan
            # survives the process (and the machine) dying right after its 201.
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


@contextmanager
def _migration_lock(engine: Engine):
    """Serialise migrations of replicas that start together on one database."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(726354)"))
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(726354)"))
                conn.commit()
    elif engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
        with open(f"{engine.url.database}.migrate-lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield
    else:
        yield


def alembic_config(engine: Engine):
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return cfg


def migrate(engine: Engine, revision: str = "head") -> None:
    cfg = alembic_config(engine)
    with _migration_lock(engine), engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def now_us() -> int:
    return time.time_ns() // 1000


def encode_cursor(created_us: int, id_: str) -> str:
    return base64.urlsafe_b64encode(f"{created_us}:{id_}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    """Raises ValueError for anything that is not a cursor this service issued."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        ts, id_ = raw.split(":", 1)
        return int(ts), id_
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise ValueError("not a cursor returned by this service") from exc


class StoredPlan(NamedTuple):
    id: str
    body: str  # the plan's JSON text, served as is
    created_us: int


# Session-level advisory locks of PostgreSQL take a bigint; the first 16 hex digits of the
# request hash are as good a key as the whole sha256 (a collision only serialises two solves).
_SIGNED_BIAS = 1 << 63


def request_lock_key(request_hash: str) -> int:
    return int(request_hash[:16], 16) - _SIGNED_BIAS


class RequestLock:
    """A held cross-replica lock on one request hash (a PostgreSQL session advisory lock on a
    connection of its own); `release()` unlocks and returns the connection. On other
    databases it holds nothing: the in-process dedupe (api/dedupe.py) is all there is."""

    def __init__(self, conn=None, key: int = 0):
        self._conn = conn
        self._key = key

    def release(self) -> None:
        if self._conn is None:
            return
        try:
            self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self._key})
            self._conn.commit()
        finally:
            self._conn.close()  # a broken connection ends its session, and the lock with it
            self._conn = None


class Store:
    def __init__(self, engine: Engine, plans_per_request: int = 2, plan_retention_s: float | None = None):
        self.engine = engine
        self.plans_per_request = plans_per_request
        self.plan_retention_s = plan_retention_s

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    # plans: the body is the plan's one JSON text (Plan.to_json), stored and served as is
    def put_plan(self, plan_id: str, request_hash: str, status: str, body_json: str, created_us: int | None = None) -> None:
        """Store a plan and, in the same transaction, prune what retention no longer keeps."""
        created_us = created_us or now_us()
        with Session(self.engine) as s, s.begin():
            s.add(PlanRow(id=plan_id, request_hash=request_hash, created_us=created_us, status=status,
                          body=body_json))
            s.flush()
            kept = (select(PlanRow.id).where(PlanRow.request_hash == request_hash)
                    .order_by(PlanRow.created_us.desc(), PlanRow.id.desc()).limit(self.plans_per_request))
            s.execute(delete(PlanRow).where(PlanRow.request_hash == request_hash, PlanRow.id.not_in(kept)))
            if self.plan_retention_s is not None:
                cutoff_us = now_us() - int(self.plan_retention_s * 1e6)
                s.execute(delete(PlanRow).where(PlanRow.created_us < cutoff_us, PlanRow.id != plan_id))

    def get_plan_json(self, plan_id: str) -> str | None:
        with Session(self.engine) as s:
            row = s.get(PlanRow, plan_id)
            return row.body if row else None

    @staticmethod
    def newest_plan_query(request_hash: str, since_us: int = 0):
        """The newest plan of a hash stored at or after `since_us`: the inner query picks its id
        from ix_plans_hash_created alone (no body is read while choosing), the outer one reads
        that one row by primary key."""
        newest = (select(PlanRow.id)
                  .where(PlanRow.request_hash == request_hash, PlanRow.created_us >= since_us)
                  .order_by(PlanRow.created_us.desc(), PlanRow.id.desc())
                  .limit(1)
                  .scalar_subquery())
        return select(PlanRow.id, PlanRow.body, PlanRow.created_us).where(PlanRow.id == newest)

    def find_plan_by_hash(self, request_hash: str, since_us: int = 0) -> StoredPlan | None:
        """The newest plan stored for this request hash (at or after `since_us`), or None."""
        with Session(self.engine) as s:
            row = s.execute(self.newest_plan_query(request_hash, since_us)).first()
            return StoredPlan(row.id, row.body, row.created_us) if row else None

    def try_lock_request(self, request_hash: str) -> RequestLock | None:
        """The cross-replica lock of one request hash, or None while another replica holds it."""
        if self.engine.dialect.name != "postgresql":
            return RequestLock()
        key = request_lock_key(request_hash)
        conn = self.engine.connect()
        try:
            got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
            conn.commit()  # the lock is the session's, not the transaction's: no idle transaction
        except BaseException:
            conn.close()
            raise
        if not got:
            conn.close()
            return None
        return RequestLock(conn, key)

    def list_plans(
        self, limit: int, cursor: tuple[int, str] | None = None, offset: int = 0
    ) -> tuple[list[dict], str | None, int]:
        """Newest first. Returns (summaries, next_cursor, total)."""
        with Session(self.engine) as s:
            q = select(PlanRow.id, PlanRow.request_hash, PlanRow.status, PlanRow.created_us)
            if cursor is not None:
                ts, id_ = cursor
                q = q.where(or_(PlanRow.created_us < ts, (PlanRow.created_us == ts) & (PlanRow.id < id_)))
            q = q.order_by(PlanRow.created_us.desc(), PlanRow.id.desc()).offset(offset).limit(limit + 1)
            rows = s.execute(q).all()
            total = s.scalar(select(func.count()).select_from(PlanRow)) or 0
        more = len(rows) > limit
        rows = rows[:limit]
        items = [
            {"id": r.id, "request_hash": r.request_hash, "status": r.status, "created_at": r.created_us / 1e6}
            for r in rows
        ]
        nxt = encode_cursor(rows[-1].created_us, rows[-1].id) if more and rows else None
        return items, nxt, total

    # profiles
    def put_profile(self, profile_id: str, device: str, body: dict) -> int:
        created = now_us()
        with Session(self.engine) as s, s.begin():
            s.add(ProfileRow(id=profile_id, created_us=created, device=device[:200], body=json.dumps(body)))
        return created

    def get_profile(self, profile_id: str) -> tuple[dict, int] | None:
        with Session(self.engine) as s:
            row = s.get(ProfileRow, profile_id)
            return (json.loads(row.body), row.created_us) if row else None
