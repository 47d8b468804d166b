"""The Python client against the live service: upload, wait, search, list, delete, errors."""

import pytest

from vifusion.client import ApiError, Client
from vifusion.samples import write_video


@pytest.fixture()
def vf(live):
    with Client(live.url, live.cfg.api_key) as client:
        yield client


def test_upload_wait_search_list_and_delete(vf, tmp_path):
    path = write_video(tmp_path / "rocket-only.mp4", ["rocket"], scene_s=3.0, size=(160, 120))
    accepted = vf.upload(
        path.path, title="Rocket alone", metadata={"set": "client"}, collection="client"
    )
    assert accepted["status"] == "queued"
    job = vf.wait(accepted["job_id"], timeout_s=300)
    assert job["status"] == "ready", job
    found = vf.search("a rocket", top_k=3, filter={"set": "client"})
    assert [m["video_id"] for m in found] == [accepted["video_id"]]
    in_collection = vf.search("a rocket", top_k=3, collections=["client"])
    assert [m["video_id"] for m in in_collection] == [accepted["video_id"]]
    assert {"name": "client", "videos": 1} in [
        {k: c[k] for k in ("name", "videos")} for c in vf.collections()
    ]
    assert found[0]["title"] == "Rocket alone"
    by_image = vf.search(image=None, clip=path.path, top_k=1, filter={"set": "client"})
    assert by_image[0]["video_id"] == accepted["video_id"]
    assert accepted["video_id"] in {v["video_id"] for v in vf.videos(limit=1)}  # follows the cursor
    vf.delete(accepted["video_id"])
    with pytest.raises(ApiError) as gone:
        vf.video(accepted["video_id"])
    assert gone.value.status == 404


def test_errors_carry_the_servers_code(vf, live):
    with pytest.raises(ApiError) as e:
        vf.job("no-such-job")
    assert e.value.status == 404 and e.value.code and e.value.message
    with Client(live.url, "x" * 40) as wrong, pytest.raises(ApiError) as denied:
        wrong.search("a cat")
    assert denied.value.status == 401
    with pytest.raises(ValueError):
        vf.search("a cat", image="x.jpg")
