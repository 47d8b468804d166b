"""What the catalog's statements stand on, whichever database runs them: a connection, one
transaction, and a ``Dialect`` naming the little each database spells its own way. Every
statement is written once, with ``?`` for each parameter (``_postgres.py`` hands psycopg its
``%s``); rows come back as dicts on both."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]
# A condition a database writes its own way, with its arguments: (SQL, args).
Clause = Callable[..., tuple[str, list[Any]]]


@dataclass(frozen=True)
class Dialect:
    """What one database spells its own way in the catalog's statements."""

    seq: str  # the column that orders jobs added in one instant as they were added
    lock: str  # ends a SELECT of rows its transaction then writes: no other writer between
    take: str  # ends lease_job's SELECT: a second taker passes over the row the first takes
    any_of: Clause  # (column, values): the column is one of the values
    metadata_is: Clause  # (key, value): a video's metadata holds key -> value
    position: str  # the function giving where a string holds another (0: nowhere)
    matching: str  # a SELECT of the ids of the text rows a keyword match (``_match``) finds


class Database(ABC):
    """Connections to the catalog's database; each database's catalog provides them."""

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
