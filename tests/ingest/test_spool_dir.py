"""The data dir's spool (``spool_dir``): made at start on the data dir, emptied of what a
crash left there."""

from __future__ import annotations

from vifusion._files import spool_dir


def test_the_spool_is_made_in_the_data_dir_and_emptied_of_leftovers(tmp_path):
    data = tmp_path / "data"
    assert spool_dir(data) == data / "tmp" and (data / "tmp").is_dir()
    (data / "tmp" / "tmpk2j3x9").write_bytes(b"a body a crash left behind")
    assert spool_dir(data) == data / "tmp" and not any((data / "tmp").iterdir())
