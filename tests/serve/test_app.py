"""The HTTP service over real HTTP: a Serve app on the session's Ray, on the indexed demo data."""

from __future__ import annotations

import socket

import httpx
import pytest
from ray import serve

from serve.app import ViFusionApp
from vifusion.config import Config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def service(indexed):
    data, videos, _ = indexed
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    cfg = Config(data_dir=data, api_key="test-key")
    serve.run(ViFusionApp.bind(cfg), name="vifusion", route_prefix="/")
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        yield client, videos
    serve.shutdown()


def test_health_reports_shards_and_vectors_without_a_key(service):
    client, _ = service
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "shards": 2, "vectors": 36}


def test_search_needs_the_key(service):
    client, _ = service
    r = client.post("/v1/search", json={"text": "a cat"})
    assert r.status_code == 401, r.text
    r = client.post("/v1/search", json={"text": "a cat"}, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401


def test_text_search_over_http_finds_the_cat(service):
    client, videos = service
    r = client.post("/v1/search", json={"text": "a cat", "top_k": 3}, headers={"Authorization": "Bearer test-key"})
    assert r.status_code == 200
    body = r.json()
    top = body["results"][0]
    cat = videos["kitchen.mp4"].scene_of("chelsea")
    assert top["title"] == "kitchen"
    assert top["start_s"] < cat.end_s and cat.start_s < top["end_s"]
    assert len(body["results"]) <= 3 and body["took_ms"] >= 0


def test_bad_request_is_a_4xx(service):
    client, _ = service
    r = client.post("/v1/search", json={"text": "", "top_k": 500}, headers={"Authorization": "Bearer test-key"})
    assert r.status_code == 422
