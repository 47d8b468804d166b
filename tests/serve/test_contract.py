"""The REST contract as the app declares it, read in-process (no Ray, no HTTP): every route,
its success status, response model, documented errors, parameters and request bodies. A
client depends on each of these; a change here is a change of the API, never of a refactor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

APP_ERRORS = {"401", "422", "429"}  # documented on every route (the key, the body, the rate)

# (method, path): (success statuses, response model or None, error statuses, parameters)
CONTRACT = {
    ("GET", "/healthz"): ({"200"}, "Health", set(), []),
    ("GET", "/metrics"): ({"200"}, None, set(), []),
    ("POST", "/v1/videos"): ({"202"}, "Accepted", {"400", "403", "404", "413", "415", "507"}, []),
    ("GET", "/v1/videos"): (
        {"200"},
        "VideoList",
        {"400"},
        ["limit", "cursor", "collection"],  # collection: additive (issue 56)
    ),
    ("GET", "/v1/jobs/{job_id}"): ({"200"}, "JobOut", {"404"}, ["job_id"]),
    ("GET", "/v1/videos/{video_id}"): ({"200"}, "VideoOut", {"404"}, ["video_id"]),
    ("DELETE", "/v1/videos/{video_id}"): ({"204"}, None, {"404", "507"}, ["video_id"]),
    ("POST", "/v1/videos/{video_id}/retry"): (
        {"202"},
        "Accepted",
        {"404", "409", "410", "507"},
        ["video_id"],
    ),
    ("GET", "/v1/videos/{video_id}/thumbnail"): ({"200"}, None, {"404"}, ["video_id", "t"]),
    ("GET", "/v1/videos/{video_id}/media"): ({"200", "206"}, None, {"404", "409"}, ["video_id"]),
    ("POST", "/v1/videos/{video_id}/media-url"): (
        {"200"},
        "MediaUrl",
        {"404", "409"},
        ["video_id"],
    ),
    ("GET", "/v1/videos/{video_id}/transcript"): (
        {"200"},
        "Transcript",
        {"404"},
        ["video_id", "kind", "format", "lang"],  # lang: additive (issue 55)
    ),
    ("POST", "/v1/search"): ({"200"}, "SearchResults", {"400", "404", "413", "415"}, []),
    ("POST", "/v1/keys"): ({"201"}, "KeyCreated", {"400", "403", "413"}, []),
    ("GET", "/v1/keys"): ({"200"}, "KeyList", {"403"}, []),
    ("DELETE", "/v1/keys/{key_id}"): ({"204"}, None, {"403", "404"}, ["key_id"]),
    # Webhooks (issue 56): additive.
    ("POST", "/v1/webhooks"): ({"201"}, "HookCreated", {"400", "403", "413"}, []),
    ("GET", "/v1/webhooks"): ({"200"}, "HookList", {"403"}, []),
    ("DELETE", "/v1/webhooks/{hook_id}"): ({"204"}, None, {"403", "404"}, ["hook_id"]),
    # Collections (issue 56): additive.
    ("GET", "/v1/collections"): ({"200"}, "CollectionList", set(), []),
    ("DELETE", "/v1/collections/{name}"): (
        {"200"},
        "CollectionDeleted",
        {"403", "404", "507"},
        ["name"],
    ),
    # The languages a search can keep to (issue 55): additive.
    ("GET", "/v1/languages"): ({"200"}, "LanguageList", set(), []),
    # A reindex while the service runs (issue 54): additive.
    ("POST", "/v1/reindex"): ({"202"}, "ReindexOut", {"400", "403", "409"}, []),
    ("GET", "/v1/reindex"): ({"200"}, "ReindexOut", {"403"}, []),
}
# Served but left out of the schema: the web page, its files, the docs, signed media.
UNDOCUMENTED = {
    ("GET", "/"),
    ("GET", "/static/{name}"),
    ("GET", "/docs"),
    ("GET", "/redoc"),
    ("GET", "/docs/{name}"),
    ("GET", "/media/{video_id}"),
}
SCHEMAS = {
    "Accepted",
    "CollectionDeleted",
    "CollectionList",
    "CollectionOut",
    "Error",
    "ErrorBody",
    "Health",
    "HookCreated",
    "HookList",
    "HookOut",
    "JobOut",
    "LastDelivery",
    "KeyCreated",
    "KeyList",
    "KeyOut",
    "LanguageList",
    "LanguageOut",
    "MediaUrl",
    "Moment",
    "ReindexOut",
    "SearchResults",
    "Transcript",
    "TranscriptSegment",
    "VideoList",
    "VideoOut",
}
SEARCH_FIELDS = [
    "collections",  # additive (issue 56)
    "cursor",
    "end_s",
    "filter",
    "fusion",  # additive (issue 54): the blend
    "group_by",
    "languages",  # additive (issue 55)
    "min_relative_score",
    "min_score",
    "modalities",
    "start_s",
    "text",
    "top_k",
    "video_id",
]


@pytest.fixture(scope="module")
def api():
    from serve.app import api

    return api


@pytest.fixture(scope="module")
def spec(api) -> dict:
    return api.openapi()


def _operations(spec: dict) -> dict[tuple[str, str], dict]:
    return {
        (method.upper(), path): op
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
    }


def _json_model(response: dict) -> str | None:
    ref = response.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
    return ref.rsplit("/", 1)[-1] if ref else None


def test_every_route_is_served_as_documented(api, spec):
    from ray.serve._private.http_util import _walk_fastapi_routes

    served = {
        (method, prefix + route.path)
        for route, _, prefix in _walk_fastapi_routes(api)
        for method in getattr(route, "methods", ()) or ()
        if method != "HEAD"
    }
    served -= {("GET", "/openapi.json")}
    assert served == set(CONTRACT) | UNDOCUMENTED


@pytest.mark.parametrize("route", sorted(CONTRACT), ids=" ".join)
def test_route_contract(spec, route):
    ok, model, errors, params = CONTRACT[route]
    op = _operations(spec)[route]
    codes = set(op["responses"])
    assert {c for c in codes if c.startswith("2")} == ok
    assert codes - ok == errors | APP_ERRORS
    assert _json_model(op["responses"][min(ok)]) == model
    for code in errors | APP_ERRORS:
        assert _json_model(op["responses"][code]) == "Error", code
    assert [p["name"] for p in op.get("parameters", [])] == params  # no `self`, no extras


def test_schema_names_and_info(spec):
    assert set(spec["components"]["schemas"]) == SCHEMAS
    assert spec["info"]["title"] == "ViFusion" and spec["info"]["version"] == "1"


def test_request_bodies(spec):
    ops = _operations(spec)
    upload = ops[("POST", "/v1/videos")]["requestBody"]
    assert upload["required"] is True
    form = upload["content"]["multipart/form-data"]["schema"]
    assert form["required"] == ["file"] and sorted(form["properties"]) == [
        "collection",  # additive (issue 56)
        "file",
        "metadata",
        "title",
    ]
    by_uri = upload["content"]["application/json"]["schema"]
    assert by_uri["title"] == "VideoByUri" and sorted(by_uri["properties"]) == [
        "collection",  # additive (issue 56)
        "metadata",
        "title",
        "uri",
    ]
    search = ops[("POST", "/v1/search")]["requestBody"]
    assert search["required"] is True
    as_json = search["content"]["application/json"]["schema"]
    assert as_json["title"] == "SearchRequest"
    assert sorted(as_json["properties"]) == sorted([*SEARCH_FIELDS, "image_b64"])
    as_form = search["content"]["multipart/form-data"]["schema"]
    assert sorted(as_form["properties"]) == sorted([*SEARCH_FIELDS, "clip", "image"])


def _python(code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_replica_unpickles_the_same_contract(spec, tmp_path):
    """Serve pickles the app when the deployment is declared and ships it to each replica's
    process, where a function pickled by reference arrives as its module defines it: the
    replica must read the same contract (a route's ``self`` turned into a required query
    parameter there once)."""
    pickled = tmp_path / "api.pickle"
    _python(
        "import sys; from ray import cloudpickle; from serve.app import api; "
        "open(sys.argv[1], 'wb').write(cloudpickle.dumps(api))",
        str(pickled),
    )
    read = "import json, pickle, sys; print(json.dumps(pickle.load(open(sys.argv[1], 'rb')).openapi()))"
    assert json.loads(_python(read, str(pickled)).splitlines()[-1]) == spec
