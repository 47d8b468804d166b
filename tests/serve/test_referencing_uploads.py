"""An upload that names another file (issue 51), through the live service (see conftest.py):
an HLS playlist naming a file outside the ingest roots, then a real MPEG-TS video. Before the
fix decord read it as a playlist, and the other file's on-screen text was searchable and in
``/transcript?kind=screen``."""

from __future__ import annotations

from tests.extract.test_references import hls_in_front, mpegts
from vifusion.samples.talks import slide

SECRET = "Payroll ledger Lisbon"
OWN = "Harbour cranes at dawn"


def test_a_playlist_upload_is_indexed_with_its_own_frames_only(live, tmp_path) -> None:
    secret = tmp_path / "outside" / "secret.ts"  # not under the ingest roots
    secret.parent.mkdir()
    secret.write_bytes(mpegts([slide([SECRET])] * 30, fps=10))
    upload = hls_in_front(secret, mpegts([slide([OWN])] * 30, fps=10))

    r = live.client.post("/v1/videos", files={"file": ("clip.mp4", upload, "video/mp4")})
    assert r.status_code == 202, r.text  # the sniff takes it for a video
    job = live.vf.wait(r.json()["job_id"])
    assert job["status"] == "ready" and job["frames_indexed"] == 3, job

    video_id = r.json()["video_id"]
    shown = live.client.get(f"/v1/videos/{video_id}/transcript", params={"kind": "screen"})
    text = " ".join(s["text"] for s in shown.json()["segments"])
    assert "Harbour" in text and "Lisbon" not in text and "Payroll" not in text, text
    hits = live.client.post("/v1/search", json={"text": "payroll ledger Lisbon", "top_k": 10})
    mine = [h for h in hits.json()["results"] if h["video_id"] == video_id]
    assert not any("Lisbon" in (h.get("snippet") or "") for h in mine), mine
    assert live.client.delete(f"/v1/videos/{video_id}").status_code == 204
