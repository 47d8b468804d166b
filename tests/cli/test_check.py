"""`vifusion check` on a real data dir (real SQLite, real shard actors, real files) with drift
and leftover files made by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import ray

from tests.fusion._frames import frames
from vifusion._files import TEMP_PREFIX
from vifusion.catalog import Catalog, open_catalog
from vifusion.cli import parser as cli
from vifusion.cli.check import find_leftovers, remove_leftovers
from vifusion.config import Config
from vifusion.index import shard_for
from vifusion.index.router import shard_dir
from vifusion.index.shard import WAL_DIR
from vifusion.ingest.sources import new_media_path, save_capped
from vifusion.runtime import Runtime


def ready_video(rt: Runtime, n: int = 4) -> int:
    """A ready video with n vectors in its shard."""
    video_id, job_id = rt.catalog.add_video(f"/videos/v{n}.mp4", f"v{n}")
    ray.get(rt.shards.handle_for(video_id).add.remote(frames(video_id, n)))
    rt.catalog.update_job(job_id, "ready", frames_indexed=n)
    return video_id


@pytest.mark.slow
def test_check_finds_each_kind_of_drift_and_repair_removes_it(ray_session, tmp_path, capsys):
    cfg = Config(data_dir=tmp_path / "data", num_shards=2)
    with Runtime(cfg, writer=True) as rt:
        fine, lost, stray = ready_video(rt), ready_video(rt), ready_video(rt)
        ray.get(rt.shards.handle_for(lost).delete_video.remote(lost))  # its vectors are gone
        rt.catalog.delete_video(stray)  # the catalog forgot it; the shard did not
        wrong = 1 - shard_for(fine, 2)
        ray.get(
            rt.shards.handles[wrong].add.remote(frames(fine, 2, start=10))
        )  # a copy where no search looks
    args = ["check", "--data-dir", str(cfg.data_dir)]

    assert cli.main(args) == 1
    out = capsys.readouterr().out
    assert (
        f"missing   video {lost}: ready in the catalog, no vectors in shard {shard_for(lost, 2)}"
        in out
    )
    assert (
        f"orphan    video {stray}: vectors in shard {shard_for(stray, 2)}, not in the catalog"
        in out
    )
    assert (
        f"misplaced video {fine}: vectors in shard {wrong}, routed to shard {shard_for(fine, 2)}"
        in out
    )

    assert cli.main([*args, "--repair"]) == 0
    assert "repaired 3 problem(s); 0 left" in capsys.readouterr().out
    assert cli.main(args) == 0
    assert "consistent: 1 ready video(s)" in capsys.readouterr().out

    with Runtime(cfg) as rt:
        assert rt.catalog.get_video(lost).status == "queued"  # indexed again at the next start
        assert [j.video_id for j in rt.catalog.jobs_in(("queued",))] == [lost]
        held = {s: ray.get(h.video_ids.remote()) for s, h in enumerate(rt.shards.handles)}
        assert held[shard_for(fine, 2)] == [fine] and held[wrong] == []
        times, _ = rt.shards.frames("visual", fine, 0, 1e9)
        assert np.asarray(times).tolist() == [
            [i, i + 1] for i in range(4)
        ]  # the right copy untouched


def _upload(
    cfg: Config, catalog: Catalog | None, name: str, status: str = "queued"
) -> tuple[int | None, Path]:
    """A video stored as an upload is (its folder, its file, then its row); None: the crash
    came before the row."""
    path = new_media_path(cfg, name)
    save_capped([b"\x00\x00\x00\x18ftypmp42" + b"x" * 100], path, 1 << 20, "the upload")
    if catalog is None:
        return None, path
    video_id, job_id = catalog.add_video(f"upload:{name}", name, media=path)
    if status != "queued":
        catalog.update_job(job_id, status)
    return video_id, path


def test_leftover_media_and_temp_files_are_found_and_only_they_removed(tmp_path):
    cfg = Config(data_dir=tmp_path / "data")
    catalog = open_catalog(cfg)
    ready, ready_path = _upload(cfg, catalog, "ready.mp4", "ready")
    queued, queued_path = _upload(cfg, catalog, "queued.mp4")  # its job runs at the next start
    failed, failed_path = _upload(cfg, catalog, "failed.mp4", "failed")
    deleted, deleted_path = _upload(cfg, catalog, "deleted.mp4", "ready")
    catalog.delete_video(deleted)  # the crash came before its files went
    _, rowless_path = _upload(cfg, None, "rowless.mp4")  # stored, the crash came before its row
    torn = new_media_path(cfg, "torn.mp4")  # the crash came mid-write
    torn_temp = torn.with_name(TEMP_PREFIX + torn.name)
    torn_temp.write_bytes(b"half")
    outside = tmp_path / "videos" / "media" / "a" / "kept.mp4"  # a file:// video, read where it is
    outside.parent.mkdir(parents=True)
    outside.write_bytes(b"video")
    catalog.update_job(catalog.add_video(str(outside), "kept")[1], "failed")
    foreign = cfg.data_dir / "media" / "notes"  # not a folder the service made
    foreign.mkdir()
    stray_temp = ready_path.with_name(TEMP_PREFIX + "again.mp4")  # a temp beside a kept file
    stray_temp.write_bytes(b"half")

    found = find_leftovers(cfg.data_dir, catalog)
    assert {item.path: item.detail for item in found} == {
        deleted_path.parent: "stored media no video in the catalog names",
        rowless_path.parent: "stored media no video in the catalog names",
        torn.parent: "stored media no video in the catalog names",
        failed_path.parent: f"stored media of video {failed}, which failed",
        stray_temp: f"a temp file a crash left (video {ready})",
    }
    before = {p for p in tmp_path.rglob("*")}
    remove_leftovers(found)
    assert {p for p in before if not p.exists()} == {
        stray_temp,
        *(p for f in (deleted_path, rowless_path, torn_temp, failed_path) for p in (f, f.parent)),
    }
    assert all(p.exists() for p in (ready_path, queued_path, outside, foreign))
    assert find_leftovers(cfg.data_dir, catalog) == []


@pytest.mark.slow
def test_check_reports_leftovers_and_repair_removes_them(ray_session, tmp_path, capsys):
    cfg = Config(data_dir=tmp_path / "data")  # two shards, as the CLI opens it
    with Runtime(cfg, writer=True) as rt:
        deleted, path = _upload(cfg, rt.catalog, "gone.mp4", "ready")
        rt.catalog.delete_video(deleted)
    folder = path.parent.relative_to(cfg.data_dir)
    args = ["check", "--data-dir", str(cfg.data_dir)]

    assert cli.main(args) == 1
    captured = capsys.readouterr()
    assert f"leftover  {folder}: stored media no video in the catalog names" in captured.out
    assert "1 problem(s); `vifusion check --repair` fixes them" in captured.err
    assert path.exists()  # only --repair removes

    assert cli.main([*args, "--repair"]) == 0
    assert "repaired 1 problem(s); 0 left" in capsys.readouterr().out
    assert not path.parent.exists()
    assert cli.main(args) == 0
    assert "no leftover files" in capsys.readouterr().out


def test_check_on_a_shard_whose_log_is_damaged_names_the_file_and_byte(
    ray_session, tmp_path, capsys
):
    cfg = Config(data_dir=tmp_path / "data")  # two shards, as the CLI opens it
    with Runtime(cfg, writer=True) as rt:
        for v in range(1, 4):
            ray.get(rt.shards.handles[0].add.remote(frames(v, 2)))
    segment = next((shard_dir(cfg.data_dir, 0) / WAL_DIR).glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[100] ^= 0x01  # in the first of three acknowledged records
    segment.write_bytes(bytes(data))

    assert cli.main(["check", "--data-dir", str(cfg.data_dir), "--repair"]) == 1
    said = capsys.readouterr().err
    assert said.startswith(
        f"vifusion check: a shard cannot start: LogCorrupt: {segment}: "
        "damaged record at byte 8, and a whole record (seq 2)"
    )
    assert "Traceback" not in said
    assert segment.read_bytes() == bytes(data)  # left for the operator, nothing cut
