"""`vifusion index --collection`, `vifusion search --collection`, `vifusion collections
[delete NAME]` and `vifusion keys create --collection`, on a real data dir read in this
process (no service): a search in one collection returns only its videos; deleting one
removes its videos' vectors and catalog rows."""

from __future__ import annotations

import json

from vifusion.catalog import open_catalog
from vifusion.cli import parser as cli
from vifusion.config import Config


def _search(capsys, data_dir, *args) -> list[dict]:
    capsys.readouterr()
    assert cli.main(["search", "--data-dir", str(data_dir), "--json", *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_collections_from_the_command_line(indexed_copy, tmp_path, capsys):
    data_dir, _ = indexed_copy
    cfg = Config(data_dir=data_dir)
    catalog = open_catalog(cfg)
    before = [v.id for v in catalog.list_videos()]
    moved = min(catalog.ready_ids())  # into a collection of its own
    with catalog._transaction() as c:
        c.execute("UPDATE videos SET collection='team-a' WHERE id=?", (moved,))
    catalog.close()

    text = ["--top-k", "50", "--group-by", "frame", "something on a table"]
    everywhere = {r["video_id"] for r in _search(capsys, data_dir, *text)}
    assert moved in everywhere and len(everywhere) > 1
    in_a = _search(capsys, data_dir, "--collection", "team-a", *text)
    assert in_a and {r["video_id"] for r in in_a} == {moved}
    assert moved not in {
        r["video_id"] for r in _search(capsys, data_dir, "--collection", "default", *text)
    }
    assert cli.main(["search", "--data-dir", str(data_dir), "--collection", "Bad!", "x"]) == 2

    capsys.readouterr()
    assert cli.main(["collections", "--data-dir", str(data_dir), "--json"]) == 0
    listed = {c["name"]: c["videos"] for c in json.loads(capsys.readouterr().out)}
    assert listed == {"default": len(before) - 1, "team-a": 1}

    args = ["keys", "create", "--scope", "search", "--data-dir", str(data_dir)]
    assert cli.main([*args, "--collection", "team-a"]) == 0
    assert "reaches team-a" in capsys.readouterr().out
    assert cli.main([*args, "--collection", "No Such"]) == 2

    assert cli.main(["collections", "delete", "team-a", "--data-dir", str(data_dir)]) == 0
    assert _search(capsys, data_dir, "--collection", "team-a", *text) == []
    catalog = open_catalog(cfg, read_only=True)
    assert catalog.get_video(moved) is None
    assert [c.name for c in catalog.collections()] == ["default"]
    catalog.close()
    assert cli.main(["collections", "delete", "team-a", "--data-dir", str(data_dir)]) == 1
