"""API keys in the catalog, on each database: a key is shown once and stored only as a
digest; it opens its own row only; revoking and expiry end it; an old catalog gains the table."""

from __future__ import annotations

import sqlite3
import time

import pytest

from vifusion.catalog import parse_key, scope_allows


def test_a_new_key_opens_its_row_and_the_catalog_holds_only_its_digest(catalog):
    cat = catalog.open()
    record, key = cat.create_key("search", name="web page")
    key_id, secret = parse_key(key)
    assert key_id == record.id and key.startswith(f"vf_{record.id}_")
    stored = cat.api_key(key_id)
    assert (stored.name, stored.scope, stored.revoked_at, stored.expires_at) == (
        "web page",
        "search",
        None,
        None,
    )
    assert stored.live() and stored.opens(secret)
    assert not stored.opens(secret[:-1] + ("A" if secret[-1] != "A" else "B"))
    assert secret not in repr(stored) and stored.secret_sha256 not in repr(stored)
    # No column of any row holds the key or its secret.
    with cat._connection() as c:
        rows = c.execute("SELECT * FROM api_keys").fetchall()
    assert rows and not any(secret in str(v) for r in rows for v in r.values())
    # Reopened (another process, a replica): the same record.
    assert catalog.open().api_key(key_id) == stored


def test_keys_are_listed_revoked_once_and_expire(catalog):
    cat = catalog.open()
    a, _ = cat.create_key("admin", name="ops")
    b, _ = cat.create_key("ingest", expires_in_s=0.2)
    assert [k.id for k in cat.api_keys()] == [a.id, b.id]
    first = cat.revoke_key(a.id)
    assert first.revoked_at is not None and not first.live()
    assert cat.revoke_key(a.id).revoked_at == first.revoked_at  # a second revoke keeps the first
    assert cat.revoke_key("0123456789ab") is None
    assert b.live() and not b.live(now=b.expires_at)
    with pytest.raises(ValueError, match="scope"):
        cat.create_key("owner")
    with pytest.raises(ValueError, match="expire"):
        cat.create_key("search", expires_in_s=0)


def test_what_is_not_a_stored_key_is_not_parsed_as_one():
    for text in ("", "vf_", "vf_0123456789ab_", "vf_0123456789AB_" + "a" * 43, "x" * 60):
        assert parse_key(text) is None
    assert parse_key("vf_0123456789ab_" + "a" * 43) == ("0123456789ab", "a" * 43)
    assert scope_allows("admin", "search") and scope_allows("ingest", "ingest")
    assert not scope_allows("search", "ingest") and not scope_allows("ingest", "admin")


def test_a_catalog_of_the_release_before_keys_gains_the_table_and_keeps_its_rows(tmp_path):
    from vifusion.catalog._schema import SQLITE_MIGRATIONS, migrate_sqlite
    from vifusion.catalog._sqlite import SqliteCatalog

    path = tmp_path / "catalog.db"
    migrate_sqlite(path, SQLITE_MIGRATIONS[:5])  # as the release before keys left it
    with sqlite3.connect(path) as c:
        c.execute(
            "INSERT INTO videos (source, title, status, created_at) VALUES ('a', 'a', 'ready', ?)",
            (time.time(),),
        )
    cat = SqliteCatalog(path)
    assert cat.get_video(1).title == "a" and cat.api_keys() == []
    record, _ = cat.create_key("search")
    assert [k.id for k in cat.api_keys()] == [record.id]
