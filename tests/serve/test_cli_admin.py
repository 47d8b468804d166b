"""`vifusion delete` and `status` where a service serves the data dir (announced in
``service.json``): the delete goes through the service, which holds the writer lock."""

from __future__ import annotations

import json

import pytest

from vifusion.cli import parser as cli
from vifusion.cluster.running import announce, withdraw

from .conftest import KEY


@pytest.fixture
def announced(live, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"api_key": KEY}))
    announce(live.cfg.data_dir, "127.0.0.1", int(live.url.rsplit(":", 1)[1]))
    yield live, config
    withdraw(live.cfg.data_dir)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_delete_goes_through_the_running_service_and_status_names_it(announced, capsys):
    live, config = announced
    stored = lambda: set((live.cfg.data_dir / "media").glob("*"))  # noqa: E731
    before = stored()
    with open(live.videos["kitchen.mp4"].path, "rb") as f:
        r = live.client.post(
            "/v1/videos", files={"file": ("copy.mp4", f, "video/mp4")}, data={"title": "to delete"}
        )
    video_id = r.json()["video_id"]
    assert live.vf.wait(r.json()["job_id"])["status"] == "ready"
    assert stored() != before
    common = ["--data-dir", str(live.cfg.data_dir), "--config", str(config)]
    code, out, err = run(capsys, "status", *common, "--json")
    assert code == 0, err
    assert json.loads(out)["service"] == live.url
    code, out, err = run(capsys, "delete", *common, str(video_id), "99999")
    assert code == 1
    assert f"deleted video {video_id}" in out and "not found: video 99999" in err
    assert live.client.get(f"/v1/videos/{video_id}").status_code == 404
    assert live.anon.get("/healthz").json()["vectors"] == live.vectors
    assert stored() == before  # the upload the service stored is gone with it
    code, out, _ = run(capsys, "list", *common, "--json")
    assert video_id not in {json.loads(line)["video_id"] for line in out.splitlines()}
