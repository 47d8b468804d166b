"""Text ingest refuses before anything is stored (vifusion/ingest/_checks.py), on both
catalogs: a NUL anywhere (PostgreSQL's text refuses one, its jsonb a stored ``\\u0000``, which
then failed every filtered search), a control character in a one-line text; what passes is
stored and filtered on alike by SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from vifusion.config import Config
from vifusion.ingest._checks import check_metadata, title_for
from vifusion.ingest.sources import SourceError

# Every C0 control but NUL, and DEL: metadata may hold them (a description's newlines, a tab).
CONTROLS = "".join(chr(c) for c in range(1, 32)) + "\x7f"


def refused(call, *args) -> str:
    with pytest.raises(SourceError) as e:
        call(*args)
    assert (e.value.code, e.value.status) == ("invalid_text", 422)
    return str(e.value)


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"note": "a\x00b"}, "metadata.note"),
        ({"a": {"b": [1, "\x00"]}}, "metadata.a.b[1]"),
        ({"a": {"k\x00": 1}}, "metadata.a.k\\x00 (its key)"),
    ],
)
def test_a_nul_anywhere_in_metadata_is_refused_naming_where(metadata, field):
    assert refused(check_metadata, metadata, Config()) == f"{field}: contains a NUL character"


def test_a_nul_or_a_control_character_in_a_title_or_file_name_is_refused():
    assert refused(title_for, "Dr. Who\x00", "a.mp4") == "title: contains a NUL character"
    assert refused(title_for, None, "a\x00.mp4") == "file name: contains a NUL character"
    assert refused(title_for, "red\x1b[31m", None) == (
        "title: contains a control character (U+001B)"
    )
    assert "U+000A" in refused(title_for, None, "two\nlines.mp4")
    assert title_for("Dr. Who", "a.mp4") == "Dr. Who"  # and a plain title is as given


def test_what_the_checks_let_through_both_catalogs_store_and_filter_on(catalog):
    cat = catalog.open()
    metadata = {"note": CONTROLS, "set": "demo", "deep": {"list": ["x\ty"]}}
    check_metadata(metadata, Config())  # not refused
    title = title_for("Ünïcode title 💸", None)
    vid, job = cat.add_video("upload:a.mp4", title, metadata)
    cat.update_job(job, "ready")
    assert cat.get_video(vid).metadata == metadata
    assert cat.ready_ids(metadata={"set": "demo"}) == {vid}
    assert cat.ready_ids(metadata={"note": CONTROLS}) == {vid}


def test_a_filter_with_a_nul_is_refused_naming_the_key_on_both_catalogs(catalog):
    cat = catalog.open()
    vid, job = cat.add_video("upload:a.mp4", "a", {"set": "demo"})
    cat.update_job(job, "ready")
    with pytest.raises(ValueError, match="metadata filter 'set': contains a NUL character"):
        cat.ready_ids(metadata={"set": "demo\x00"})
    with pytest.raises(ValueError, match="metadata key"):
        cat.ready_ids(metadata={"set\n": "demo"})  # a key may not end in a newline either
    assert cat.ready_ids(metadata={"set": "demo"}) == {vid}


def test_a_job_id_with_a_nul_is_no_job_on_both_catalogs(catalog):
    """``GET /v1/jobs/%00`` was a 404 on SQLite and a 500 on PostgreSQL."""
    cat = catalog.open()
    cat.add_video("upload:a.mp4", "a", {})
    assert cat.get_job("\x00") is None
