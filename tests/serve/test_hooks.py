"""Webhooks through the live service's REST API: registered by an admin key only, the
secret shown once and never listed, a private address refused as URL ingest refuses it
(the live service has no allow_private_urls), removed."""

from __future__ import annotations

from .test_keys import bearer, make_key

PUBLIC = "http://93.184.215.14/vifusion-hook"  # a literal public address: no DNS asked


def test_live_hooks_are_registered_listed_and_removed_by_an_admin_key(live):
    made = live.client.post(
        "/v1/webhooks", json={"url": PUBLIC, "events": ["job.failed"], "collection": "news"}
    )
    assert made.status_code == 201, made.text
    hook = made.json()
    assert hook["secret"].startswith("whsec_")
    assert (hook["events"], hook["collection"], hook["pending"]) == (["job.failed"], "news", 0)
    try:
        listed = live.client.get("/v1/webhooks")
        assert listed.status_code == 200
        [mine] = [h for h in listed.json()["hooks"] if h["id"] == hook["id"]]
        assert "secret" not in mine and hook["secret"] not in listed.text
        assert mine["url"] == PUBLIC and mine["last_delivery"] is None

        ingest_key = make_key(live, "ingest", name="hooks test")["key"]
        for method, path in (("GET", "/v1/webhooks"), ("DELETE", f"/v1/webhooks/{hook['id']}")):
            r = live.anon.request(method, path, headers=bearer(ingest_key))
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_scope"
    finally:
        assert live.client.delete(f"/v1/webhooks/{hook['id']}").status_code == 204
    assert live.client.delete(f"/v1/webhooks/{hook['id']}").status_code == 404
    assert hook["id"] not in live.client.get("/v1/webhooks").text


def test_live_a_private_or_malformed_hook_url_is_refused(live):
    for url, status, code in (
        ("http://127.0.0.1:9/hook", 403, "forbidden_address"),
        ("http://10.0.0.7/hook", 403, "forbidden_address"),
        ("ftp://93.184.215.14/hook", 400, "invalid_uri"),
        ("http://user:pw@93.184.215.14/hook", 400, "invalid_uri"),
    ):
        r = live.client.post("/v1/webhooks", json={"url": url})
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), (url, r.text)
    r = live.client.post("/v1/webhooks", json={"url": PUBLIC, "events": ["job.started"]})
    assert r.status_code == 422
    r = live.client.post("/v1/webhooks", json={"url": PUBLIC, "collection": "Not A Name"})
    assert r.status_code == 422
    assert all(
        h["url"] != "http://127.0.0.1:9/hook"
        for h in live.client.get("/v1/webhooks").json()["hooks"]
    )
