"""What the catalog's statements stand on, whichever database runs them: a connection, one
transaction, and a ``Dialect`` naming the little each database spells its own way. Every
statement is written once, with ``?`` for each parameter (``_postgres.py`` hands psycopg its
``%s``); rows come back as dicts on both."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]


@dataclass(frozen=True)
class Dialect:
    """What one database spells its own way in the catalog's statements."""

    seq: str  # the column that orders jobs added in one instant as they were added
    lock: str  # ends a SELECT of rows its transaction then writes: no other writer between
    take: str  # ends lease_job's SELECT: a second taker passes over the row the first takes
    position: str  # the function giving where a string holds another (0: nowhere)
    matching: str  # a SELECT of the ids of the text rows a keyword match (``_match``) finds


class Database(ABC):
    """Connections to the catalog's database, and the conditions it writes its own way;
    each database's catalog provides them."""

    dialect: Dialect

    @abstractmethod
    def _connection(self) -> contextlib.AbstractContextManager[Any]:
        """A connection (``execute``, ``executemany``), each statement committed as it runs."""

    @abstractmethod
    def _transaction(self) -> contextlib.AbstractContextManager[Any]:
        """A connection in one transaction, committed at the end of the block (rolled back
        where it raises)."""

    @abstractmethod
    def close(self) -> None:
        """Let go of every connection (a thread that uses the catalog later reopens)."""

    @abstractmethod
    def _any_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """A condition that ``column`` is one of ``values``, and its arguments."""

    @abstractmethod
    def _metadata_is(self, key: str, value: Any) -> tuple[str, list[Any]]:
        """A condition that a video's metadata holds ``key`` -> ``value`` (JSON equality,
        telling 1 from "1" and from true), and its arguments."""

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        with self._connection() as c:
            return c.execute(sql, args).fetchall()

    def _row(self, sql: str, args: Sequence[Any] = ()) -> Row | None:
        rows = self._rows(sql, args)
        return rows[0] if rows else None

    def _write(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one write; the rows it touched."""
        with self._transaction() as c:
            return c.execute(sql, args).rowcount


class QmarkConnection:
    """A PostgreSQL (psycopg) connection taking the catalog's statements, written with ``?`` for each
    parameter where psycopg's is ``%s`` (no statement holds a ``?`` of its own)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        return self._conn.execute(sql.replace("?", "%s"), args)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(sql.replace("?", "%s"), rows)
