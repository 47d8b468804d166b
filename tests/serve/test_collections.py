"""Collections against the live service (real HTTP): a search in one collection never returns
another's videos and still fills its top_k when the others' frames would have filled the top;
a key limited to collections is refused (403) or told nothing exists (404) beyond them;
deleting a collection removes its videos' vectors (searches no longer find them) and media.

The module adds its own videos (the demo set again, in two collections) and deletes them at
the end, so the session's library is as the other modules expect it."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vifusion.catalog import open_catalog
from vifusion.samples import frame_at


def _jpeg_b64(rgb: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=90)
    return base64.b64encode(buf.getvalue()).decode()


def _add(live, name: str, collection: str) -> dict:
    r = live.client.post(
        "/v1/videos",
        json={"uri": live.videos[name].path.as_uri(), "collection": collection},
    )
    assert r.status_code == 202, r.text
    return r.json()


@pytest.fixture(scope="module")
def teams(live):
    """team-a: the launch video; team-b: the kitchen and street videos (their frames fill the
    top of a kitchen image search, with the kitchen video in ``default``); doomed: the street
    video uploaded (its media stored in the data dir). Queued together, indexed side by side."""
    street = live.videos["street.mp4"]
    upload = live.client.post(
        "/v1/videos",
        files={"file": ("street.mp4", street.path.read_bytes(), "video/mp4")},
        data={"collection": "doomed"},
    )
    assert upload.status_code == 202, upload.text
    accepted = {
        "a_launch": _add(live, "launch.mp4", "team-a"),
        "b_kitchen": _add(live, "kitchen.mp4", "team-b"),
        "b_street": _add(live, "street.mp4", "team-b"),
        "doomed": upload.json(),
    }
    for a in accepted.values():
        assert live.vf.wait(a["job_id"], timeout_s=300)["status"] == "ready"
    yield {name: a["video_id"] for name, a in accepted.items()}
    for name in ("team-a", "team-b", "doomed"):
        live.client.delete(f"/v1/collections/{name}")


def _search(live, headers=None, **body) -> list[dict]:
    r = live.client.post("/v1/search", json=body, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["results"]


def _kitchen_image(live) -> str:
    scene = live.videos["kitchen.mp4"].scene_of("chelsea")
    return _jpeg_b64(frame_at(live.videos["kitchen.mp4"].path, (scene.start_s + scene.end_s) / 2))


def test_a_search_in_one_collection_returns_only_its_videos_and_a_full_top_k(live, teams):
    query = {"image_b64": _kitchen_image(live), "group_by": "frame", "min_relative_score": 0}
    kitchens = {live.ids["kitchen.mp4"], teams["b_kitchen"]}
    everywhere = _search(live, **query, top_k=3)
    assert {m["video_id"] for m in everywhere} <= kitchens  # the kitchen's frames fill the top
    in_a = _search(live, **query, top_k=3, collections=["team-a"])
    assert [m["video_id"] for m in in_a] == [teams["a_launch"]] * 3  # filtered in the shards
    in_b = _search(live, **query, top_k=10, collections=["team-b"])
    assert {m["video_id"] for m in in_b} <= {teams["b_kitchen"], teams["b_street"]}
    assert in_b[0]["video_id"] == teams["b_kitchen"]
    said = _search(live, text="kitchen", top_k=20, collections=["team-a", "team-b"])
    assert {m["video_id"] for m in said} <= set(teams.values())
    # A multipart search names collections comma-separated.
    image = base64.b64decode(query["image_b64"])
    form = {"collections": "team-a,team-b", "group_by": "frame", "top_k": "3"}
    r = live.client.post("/v1/search", files={"image": ("q.jpg", image)}, data=form)
    assert r.status_code == 200, r.text
    assert [m["video_id"] for m in r.json()["results"]] == [teams["b_kitchen"]] * 3


def test_collections_are_listed_and_videos_say_theirs(live, teams):
    listed = {c["name"]: c for c in live.client.get("/v1/collections").json()["collections"]}
    assert listed["team-b"]["videos"] == 2 and listed["team-b"]["frames"] > 0
    assert listed["team-a"]["videos"] == 1 and listed["default"]["videos"] >= 3
    video = live.client.get(f"/v1/videos/{teams['a_launch']}").json()
    assert video["collection"] == "team-a"
    page = live.client.get("/v1/videos", params={"collection": "team-b"}).json()["videos"]
    assert [v["video_id"] for v in page] == [teams["b_kitchen"], teams["b_street"]]


@pytest.mark.parametrize("name", ["Team", "a/b", "", "x" * 65])
def test_a_bad_collection_name_is_a_422(live, name):
    uri = live.videos["launch.mp4"].path.as_uri()
    r = live.client.post("/v1/videos", json={"uri": uri, "collection": name})
    assert r.status_code == 422 and "collection" in r.text


def _key(live, scope: str, collections: list[str]) -> dict:
    r = live.client.post("/v1/keys", json={"scope": scope, "collections": collections})
    assert r.status_code == 201, r.text
    assert r.json()["collections"] == collections
    return {"Authorization": f"Bearer {r.json()['key']}"}


def test_a_key_limited_to_a_collection_reaches_nothing_else(live, teams):
    a = _key(live, "admin", ["team-a"])
    other, mine = teams["b_kitchen"], teams["a_launch"]
    # Searches: clamped to its collections; another named is a 403 naming it.
    query = {"image_b64": _kitchen_image(live), "group_by": "frame", "min_relative_score": 0}
    assert [m["video_id"] for m in _search(live, a, **query, top_k=3)] == [mine] * 3
    r = live.client.post("/v1/search", json={**query, "collections": ["team-b"]}, headers=a)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_collection"
    assert "team-b" in r.json()["error"]["message"]
    r = live.client.post(
        "/v1/search", json={"video_id": other, "start_s": 0, "end_s": 2}, headers=a
    )
    assert r.status_code == 404
    # Its videos only, listed or named; another collection's video is not there at all.
    listed = live.client.get("/v1/videos", params={"limit": 500}, headers=a).json()["videos"]
    assert [v["video_id"] for v in listed] == [mine]
    assert live.client.get(f"/v1/videos/{mine}", headers=a).status_code == 200
    for method, path in (
        ("GET", f"/v1/videos/{other}"),
        ("GET", f"/v1/videos/{other}/thumbnail"),
        ("GET", f"/v1/videos/{other}/media"),
        ("GET", f"/v1/videos/{other}/transcript"),
        ("POST", f"/v1/videos/{other}/media-url"),
        ("DELETE", f"/v1/videos/{other}"),
        ("DELETE", "/v1/collections/team-b"),
    ):
        r = live.client.request(method, path, headers=a)
        assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found"), (method, path)
    assert live.client.get(f"/v1/videos/{other}").status_code == 200  # still there
    names = [c["name"] for c in live.client.get("/v1/collections", headers=a).json()["collections"]]
    assert names == ["team-a"]
    # Ingest into another collection: 403; a job of another collection: 404.
    uri = live.videos["launch.mp4"].path.as_uri()
    r = live.client.post("/v1/videos", json={"uri": uri, "collection": "team-b"}, headers=a)
    assert r.status_code == 403 and "team-b" in r.json()["error"]["message"]
    r = live.client.post("/v1/videos", json={"uri": uri}, headers=a)  # "default" is another
    assert r.status_code == 403
    job = live.client.get(f"/v1/videos/{other}").json()["job_id"]
    assert live.client.get(f"/v1/jobs/{job}", headers=a).status_code == 404
    assert live.client.get(f"/v1/jobs/{job}").status_code == 200
    # Keys: only within its collections, and none listed or revoked by it.
    r = live.client.post("/v1/keys", json={"scope": "search", "collections": ["team-b"]}, headers=a)
    assert r.status_code == 403
    r = live.client.post("/v1/keys", json={"scope": "search"}, headers=a)
    assert r.status_code == 201 and r.json()["collections"] == ["team-a"]
    assert live.client.get("/v1/keys", headers=a).status_code == 403


def test_deleting_a_collection_removes_its_vectors_and_media(live, teams):
    street, doomed = live.videos["street.mp4"], teams["doomed"]
    catalog = open_catalog(live.cfg, read_only=True)
    media = Path(catalog.get_video(doomed).media)
    catalog.close()
    assert media.is_file()
    vectors = live.client.get("/healthz").json()["vectors"]
    image = {"image_b64": _jpeg_b64(frame_at(street.path, 1.0)), "group_by": "frame"}
    assert _search(live, **image, top_k=3, collections=["doomed"])[0]["video_id"] == doomed

    r = live.client.delete("/v1/collections/doomed")
    assert r.status_code == 200 and r.json() == {"name": "doomed", "deleted_video_ids": [doomed]}
    assert live.client.get("/healthz").json()["vectors"] < vectors  # its vectors left the shards
    assert doomed not in {m["video_id"] for m in _search(live, **image, top_k=50)}
    assert _search(live, **image, top_k=3, collections=["doomed"]) == []
    assert not media.exists() and not media.parent.exists()
    assert live.client.get(f"/v1/videos/{doomed}").status_code == 404
    names = [c["name"] for c in live.client.get("/v1/collections").json()["collections"]]
    assert "doomed" not in names
    assert live.client.delete("/v1/collections/doomed").status_code == 404
