"""Scoped API keys against the live service (real HTTP): each scope refused where it must be,
keys made, listed and revoked by the command line and by REST, a revoked or expired key
refused within a second, a signed media URL dying with its key, the bootstrap key still an
admin key, and the catalog holding no key. Two replicas (two processes, each its own gate
and catalog connection) both refuse a key revoked through a third."""

from __future__ import annotations

import contextlib
import multiprocessing
import sqlite3
import time

import httpx
import uvicorn
from fastapi import APIRouter, Depends, FastAPI

from serve import _auth
from serve._front import Front, api
from tests.conftest import free_port
from vifusion.cli import parser as cli
from vifusion.config import Config

from .conftest import KEY


def make_key(live, scope: str, **body) -> dict:
    r = live.client.post("/v1/keys", json={"scope": scope, **body})
    assert r.status_code == 201, r.text
    return r.json()


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def refused_within_a_second(send) -> int:
    """Poll ``send()`` until it is refused (401 or 403), for at most a second; its status."""
    deadline = time.monotonic() + 1.0
    while True:
        status = send().status_code
        if status in (401, 403) or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


# -- which scope may call what ----------------------------------------------------------------

# Each /v1 route with a request that does no harm when let through (an unknown id, a body
# that fails validation), and the least scope the docs give it.
ROUTES = [
    ("POST", "/v1/search", {"json": {"text": "a cat", "top_k": 1}}, "search"),
    ("GET", "/v1/videos", {}, "search"),
    ("GET", "/v1/videos/{kitchen}", {}, "search"),
    ("GET", "/v1/videos/{kitchen}/thumbnail", {}, "search"),
    ("GET", "/v1/videos/{kitchen}/media", {"headers": {"Range": "bytes=0-9"}}, "search"),
    ("GET", "/v1/videos/{kitchen}/transcript", {}, "search"),
    ("POST", "/v1/videos/{kitchen}/media-url", {}, "search"),
    ("POST", "/v1/videos", {"json": {"uri": 7}}, "ingest"),
    ("POST", "/v1/videos/999999/retry", {}, "ingest"),
    ("GET", "/v1/jobs/no-such-job", {}, "ingest"),
    ("DELETE", "/v1/videos/999999", {}, "admin"),
    ("POST", "/v1/keys", {"json": {"scope": "owner"}}, "admin"),
    ("GET", "/v1/keys", {}, "admin"),
    ("DELETE", "/v1/keys/000000000000", {}, "admin"),
    ("POST", "/v1/webhooks", {"json": {"url": 7}}, "admin"),
    ("GET", "/v1/webhooks", {}, "admin"),
    ("DELETE", "/v1/webhooks/no-such-hook", {}, "admin"),
    ("GET", "/v1/collections", {}, "search"),
    ("DELETE", "/v1/collections/no-such-collection", {}, "admin"),
    ("GET", "/v1/languages", {}, "search"),
    ("POST", "/v1/reindex", {"json": {"visual_model": 7}}, "admin"),
    ("GET", "/v1/reindex", {}, "admin"),
]
RANK = {"search": 0, "ingest": 1, "admin": 2}


def template(path: str) -> str:
    for sample, name in (
        ("{kitchen}", "{video_id}"),
        ("999999", "{video_id}"),
        ("no-such-job", "{job_id}"),
        ("000000000000", "{key_id}"),
        ("no-such-hook", "{hook_id}"),
        ("no-such-collection", "{name}"),
    ):
        path = path.replace(sample, name)
    return path


def test_every_v1_route_is_given_its_scope_in_the_one_table():
    """Every /v1 route of the app is in ROUTE_SCOPES (one missing would need admin), with
    the scope the docs give it (ROUTES above)."""
    routes = {
        (method.upper(), path)
        for path, ops in api.openapi()["paths"].items()
        if path.startswith("/v1")
        for method in ops
    }
    assert routes == set(_auth.ROUTE_SCOPES)
    assert {(m, template(p)): needed for m, p, _, needed in ROUTES} == _auth.ROUTE_SCOPES


def test_live_each_scope_is_refused_where_it_must_be_and_let_through_elsewhere(live):
    keys = {scope: make_key(live, scope, name=f"table {scope}")["key"] for scope in RANK}
    keys["bootstrap"] = KEY
    kitchen = live.ids["kitchen.mp4"]
    for method, path, kw, needed in ROUTES:
        url = path.replace("{kitchen}", str(kitchen))
        for who, key in keys.items():
            r = live.anon.request(
                method,
                url,
                headers=bearer(key) | kw.get("headers", {}),
                **{k: v for k, v in kw.items() if k != "headers"},
            )
            if who != "bootstrap" and RANK[who] < RANK[needed]:
                assert r.status_code == 403, (method, path, who, r.text)
                error = r.json()["error"]
                assert error["code"] == "forbidden_scope" and needed in error["message"], error
            else:
                assert r.status_code not in (401, 403), (method, path, who, r.status_code, r.text)


# -- made, listed, revoked ----------------------------------------------------------------------


def test_live_a_key_made_by_rest_is_listed_without_its_secret_and_dies_when_revoked(live):
    made = make_key(live, "search", name="web page", expires_in_days=30)
    assert made["key"].startswith(f"vf_{made['id']}_") and made["revoked_at"] is None
    search = lambda: live.anon.post(  # noqa: E731
        "/v1/search", json={"text": "a cat", "top_k": 1}, headers=bearer(made["key"])
    )
    assert search().status_code == 200
    listed = live.client.get("/v1/keys").json()["keys"]
    mine = next(k for k in listed if k["id"] == made["id"])
    assert mine == {k: v for k, v in made.items() if k != "key"}
    assert made["key"] not in live.client.get("/v1/keys").text
    # A search key may not list, make or revoke keys.
    assert live.anon.get("/v1/keys", headers=bearer(made["key"])).status_code == 403
    assert live.client.delete(f"/v1/keys/{made['id']}").status_code == 204
    assert refused_within_a_second(search) == 401
    listed = {k["id"]: k for k in live.client.get("/v1/keys").json()["keys"]}
    assert listed[made["id"]]["revoked_at"] is not None
    assert live.client.delete("/v1/keys/0123456789ab").status_code == 404
    # The bootstrap key is still an admin key.
    assert live.client.get("/v1/keys").status_code == 200


def test_live_a_key_made_by_the_cli_works_at_once_and_a_cli_revoke_ends_it(live, capsys):
    data_dir = str(live.cfg.data_dir)
    assert (
        cli.main(["keys", "create", "--scope", "ingest", "--name", "batch", "--data-dir", data_dir])
        == 0
    )
    out = capsys.readouterr().out
    key = out.strip().splitlines()[-1]
    key_id = key.split("_")[1]
    job = lambda: live.anon.get("/v1/jobs/no-such-job", headers=bearer(key))  # noqa: E731
    assert job().status_code == 404  # let in, the job unknown
    assert cli.main(["keys", "list", "--data-dir", data_dir]) == 0
    listed = capsys.readouterr().out
    assert key_id in listed and "batch" in listed and key not in listed
    assert cli.main(["keys", "revoke", key_id, "--data-dir", data_dir]) == 0
    assert refused_within_a_second(job) == 401
    assert cli.main(["keys", "revoke", "0123456789ab", "--data-dir", data_dir]) == 1


def test_live_an_expired_key_is_refused(live):
    lasting = make_key(live, "search")["key"]
    brief = make_key(live, "search", expires_in_days=1 / 86400)["key"]  # one second
    deadline = time.monotonic() + 5
    while (r := live.anon.get("/v1/videos", headers=bearer(brief))).status_code == 200:
        assert time.monotonic() < deadline, "a key a second old still opens after 5 s"
        time.sleep(0.1)
    assert r.status_code == 401, r.text
    assert live.anon.get("/v1/videos", headers=bearer(lasting)).status_code == 200


def test_live_a_signed_url_stops_opening_once_the_key_that_made_it_is_revoked(live):
    made = make_key(live, "search")
    kitchen = live.ids["kitchen.mp4"]
    signed = live.anon.post(f"/v1/videos/{kitchen}/media-url", headers=bearer(made["key"]))
    url = signed.json()["url"]
    assert f"key={made['id']}" in url
    boot_url = live.client.post(f"/v1/videos/{kitchen}/media-url").json()["url"]
    fetch = lambda u=url: live.anon.get(u, headers={"Range": "bytes=0-9"})  # noqa: E731
    assert fetch().status_code == 206
    # Another key's id in the URL does not carry the signature over.
    other = make_key(live, "search")
    assert fetch(url.replace(made["id"], other["id"])).status_code == 403
    assert live.client.delete(f"/v1/keys/{made['id']}").status_code == 204
    assert refused_within_a_second(fetch) == 403
    assert fetch().json()["error"]["code"] == "key_revoked"
    assert fetch(boot_url).status_code == 206  # the bootstrap key's URLs open as before


def test_live_the_catalog_holds_no_key(live):
    made = make_key(live, "admin")
    secret = made["key"].split("_", 2)[2]
    with contextlib.closing(sqlite3.connect(live.cfg.data_dir / "catalog.db")) as c:
        rows = c.execute("SELECT * FROM api_keys").fetchall()
    assert rows and not any(secret in str(v) for row in rows for v in row)
    for path in live.cfg.data_dir.glob("catalog.db*"):  # the file and its write-ahead log
        assert secret.encode() not in path.read_bytes(), path


# -- two replicas ---------------------------------------------------------------------------------


def _replica(cfg: Config, port: int) -> None:
    """One API replica's gate, in a process of its own: the bootstrap key, its own catalog
    connection, and Front over a /v1 route that needs the search scope."""
    from vifusion.catalog import open_catalog

    gate = _auth.Gate()
    gate.configure(KEY, cfg)
    gate.use_keys(open_catalog(cfg))
    _auth.GATE = gate
    app = FastAPI()
    router = APIRouter()
    router.post("/v1/search")(lambda: {"results": []})
    app.include_router(router, dependencies=[Depends(_auth.needs_scope)])
    app.add_middleware(Front)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def test_a_key_revoked_anywhere_is_refused_by_every_replica_within_a_second(catalog, tmp_path):
    cfg = Config(data_dir=tmp_path, catalog_url=catalog.url)
    admin = catalog.open()
    _, key = admin.create_key("search")
    ctx = multiprocessing.get_context("fork")
    ports = [free_port(), free_port()]
    replicas = [ctx.Process(target=_replica, args=(cfg, p), daemon=True) for p in ports]
    for p in replicas:
        p.start()
    try:
        clients = [httpx.Client(base_url=f"http://127.0.0.1:{p}", timeout=30) for p in ports]
        for c in clients:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    r = c.post("/v1/search", headers=bearer(key))
                    break
                assert time.monotonic() < deadline, "a replica did not start"
                time.sleep(0.1)
            assert r.status_code == 200, r.text  # each has read the key
        admin.revoke_key(key.split("_")[1])  # as `vifusion keys revoke` does, from elsewhere
        for c in clients:
            assert (
                refused_within_a_second(lambda c=c: c.post("/v1/search", headers=bearer(key)))
                == 401
            )
            assert c.post("/v1/search", headers=bearer(KEY)).status_code == 200
    finally:
        for p in replicas:
            p.terminate()
            p.join(10)
