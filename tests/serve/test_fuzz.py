"""Property-based fuzz of the REST API against the live service (see conftest.py).

Schemathesis reads the service's own ``/openapi.json`` and sends what it documents, both
schema-valid (positive) and schema-breaking (negative) requests, from its coverage phase
(boundary values, wrong types, unexpected methods) and its Hypothesis fuzzing phase. The
properties: no response is ever a 5xx; every error is ``{"error": {"code", "message"}}``;
2xx bodies match their documented models; without the key a ``/v1`` route answers no
handler's response but a 401. A few plain Hypothesis properties aim at inputs the schema
cannot describe (numeric-looking Unicode cursors, deeply nested JSON).

What is left out, on purpose: ``DELETE /v1/videos/{video_id}`` (it would delete the demo
videos the other serve tests rely on) and ``POST /v1/videos`` (it would ingest fuzzed
uploads and change the catalog and the vector counts). test_app.py covers both. The only
``POST /v1/videos`` requests here are bodies that cannot ingest anything (see
``test_deeply_nested_json_is_a_4xx``), and the last test checks that the catalog is as the
fuzz found it.

Repeatable: a fixed seed, no example database, and a bounded number of examples per
operation (about a minute on two cores, after the shared ~35 s service start).
"""

from __future__ import annotations

import json

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.serve.conftest import KEY

AUTH = {"Authorization": f"Bearer {KEY}"}
SEED = 20261122
FUZZ_EXAMPLES = 25  # per operation, on top of the coverage phase's deterministic cases
ANON_EXAMPLES = 10


def slow_ok(**kwargs) -> settings:
    """Requests to a real service are slow for Hypothesis; no deadline (no timing assertions)."""
    return settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
                    **kwargs)


def _config(*, max_examples: int, phases: tuple[str, ...], checks: tuple[str, ...], base_url: str):
    return schemathesis.Config.from_dict({
        "seed": SEED,
        "base-url": base_url,
        "request-timeout": 120,
        "generation": {"mode": "all", "max-examples": max_examples, "database": "none"},
        "phases": {name: {"enabled": name in phases} for name in ("examples", "coverage", "fuzzing", "stateful")},
        "checks": {"enabled": False, **{name: {"enabled": True} for name in checks}},
    })


# Schemathesis's own checks that hold for this API. Left out, with the reason:
# - status_code_conformance: run on its own in test_every_status_is_documented.
# - positive_data_acceptance: the schema cannot say "exactly one query kind", so a
#   schema-valid search such as {"video_id": 1} is rightly a 422.
# - allow_header_conformance: Starlette's 405 names only the methods of the route it
#   matched (OPTIONS /v1/videos says "Allow: POST"), a framework limitation.
CHECKS = ("not_a_server_error", "response_schema_conformance", "content_type_conformance", "unsupported_method")


def _load(live, **kwargs):
    config = _config(base_url=live.url, **kwargs)
    return schemathesis.openapi.from_url(f"{live.url}/openapi.json", config=config, timeout=60)


@pytest.fixture(scope="module")
def api_schema(live):
    return _load(live, max_examples=FUZZ_EXAMPLES, phases=("coverage", "fuzzing"), checks=CHECKS)


@pytest.fixture(scope="module")
def anon_schema(live):
    return _load(live, max_examples=ANON_EXAMPLES, phases=("fuzzing",), checks=CHECKS)


@pytest.fixture(scope="module")
def coverage_schema(live):
    return _load(live, max_examples=1, phases=("coverage",), checks=("status_code_conformance",))


def _safe(lazy):
    return lazy.exclude(method="DELETE").exclude(method="POST", path="/v1/videos")


fuzzed = _safe(schemathesis.pytest.from_fixture("api_schema"))
fuzzed_anon = _safe(schemathesis.pytest.from_fixture("anon_schema"))
covered = _safe(schemathesis.pytest.from_fixture("coverage_schema"))


@pytest.fixture(scope="module")
def http():
    with requests.Session() as session:
        yield session


@pytest.fixture(scope="module")
def catalog_before(live):
    return _catalog(live)


def _catalog(live) -> tuple[list, dict]:
    r = live.client.get("/v1/videos", params={"limit": 500})
    assert r.status_code == 200, r.text
    videos = sorted((v["video_id"], v["status"], v["frames_indexed"]) for v in r.json()["videos"])
    return videos, live.client.get("/healthz").json()


def _request(case, response) -> str:
    return case.as_curl_command(headers=dict(response.request.headers))


def _error_body(case, response) -> dict:
    """The body of an error response, asserted to be {"error": {"code": str, "message": str}}."""
    where = f"\n{response.status_code} for: {_request(case, response)}\nbody: {response.content[:500]!r}"
    ctype = next((v[0] for k, v in response.headers.items() if k.lower() == "content-type" and v), "")
    assert ctype.startswith("application/json"), where
    body = json.loads(response.content)
    assert isinstance(body, dict) and set(body) == {"error"}, where
    err = body["error"]
    assert isinstance(err, dict) and set(err) == {"code", "message"}, where
    assert isinstance(err["code"], str) and err["code"], where
    assert isinstance(err["message"], str) and err["message"], where
    return err


# -- the schema, with the key --------------------------------------------------------------


@fuzzed.parametrize()
@slow_ok()
def test_no_5xx_and_json_errors_with_the_key(case, live, http, catalog_before):
    response = case.call(session=http, headers=AUTH)
    assert response.status_code < 500, (
        f"{response.status_code} for: {_request(case, response)}\nbody: {response.content[:500]!r}"
    )
    if response.status_code >= 400:
        _error_body(case, response)
    case.validate_response(response, headers=AUTH)


@covered.parametrize()
@slow_ok()
def test_every_status_is_documented(case, live, http, catalog_before):
    """The coverage phase's boundary and wrong-type cases get only documented statuses."""
    response = case.call(session=http, headers=AUTH)
    assert response.status_code < 500, _request(case, response)
    case.validate_response(response, headers=AUTH)


# -- the schema, without the key -----------------------------------------------------------


@fuzzed_anon.parametrize()
@slow_ok()
def test_v1_routes_answer_401_without_the_key(case, live, http, catalog_before):
    response = case.call(session=http)
    status = response.status_code
    where = f"{status} for: {_request(case, response)}\nbody: {response.content[:300]!r}"
    assert status < 500, where
    if not case.operation.path.startswith("/v1/"):
        assert status != 401, where  # /healthz and /metrics need no key
        return
    assert status >= 400, where  # never data without the key
    err = _error_body(case, response)
    if status == 401:
        assert err["code"] == "unauthorized", where
        return
    # Not 401 only where no handler ran: the router found no route (a path parameter with a
    # "/" in it), or request validation, which FastAPI runs before the handler's key check,
    # refused a schema-breaking request.
    allowed = {404: "not_found", 405: "method_not_allowed"}
    if case.meta is not None and case.meta.generation.mode.is_negative:
        allowed[422] = "invalid_request"
    assert err["code"] == allowed.get(status), where
    if status == 404:
        assert err["message"] == "Not Found", where  # the router's, not a handler's "no video N"


# -- what the schema cannot describe -------------------------------------------------------

# str.isdigit() is true for more than 0-9: superscripts, circled and other-script digits.
_DIGITISH = st.characters(categories=("Nd", "No", "Nl"), codec="utf-8")


@slow_ok(max_examples=40, derandomize=True, database=None)
@given(cursor=st.one_of(st.text(_DIGITISH, min_size=1, max_size=32), st.text(min_size=1, max_size=32)))
def test_video_list_cursor_is_a_200_or_a_400(live, cursor):
    r = live.client.get("/v1/videos", params={"cursor": cursor})
    assert r.status_code in (200, 400), f"GET /v1/videos?cursor={cursor!r}: {r.status_code} {r.text[:300]}"
    if r.status_code == 400:
        body = r.json()
        assert body == {"error": {"code": "invalid_cursor", "message": body["error"]["message"]}}, body
    else:
        assert set(r.json()) == {"videos", "next_cursor"}


def _nested(depth: int, kind: str) -> str:
    return "[" * depth + "]" * depth if kind == "list" else '{"a":' * depth + "1" + "}" * depth


def _nested_request(live, target: str, doc: str):
    """One request carrying ``doc``; none of them can ingest a video (see the docstring)."""
    c = live.client
    if target == "search json":
        return c.post("/v1/search", content=f'{{"text": "a cat", "filter": {doc}}}',
                      headers={"content-type": "application/json"})
    if target == "search form filter":
        return c.post("/v1/search", files={"clip": ("c.mp4", b"not a video")}, data={"filter": doc})
    if target == "videos json":  # no "uri": a 422 if it parses
        return c.post("/v1/videos", content=f'{{"metadata": {doc}}}', headers={"content-type": "application/json"})
    # target == "videos form metadata": ``doc`` is a list, so a 422 (not an object) if it parses
    return c.post("/v1/videos", files={"file": ("v.mp4", b"not a video", "video/mp4")}, data={"metadata": doc})


@slow_ok(max_examples=30, derandomize=True, database=None)
@given(
    depth=st.integers(1, 5000),
    kind=st.sampled_from(["list", "object"]),
    target=st.sampled_from(["search json", "search form filter", "videos json", "videos form metadata"]),
)
def test_deeply_nested_json_is_a_4xx(live, depth, kind, target):
    if target == "videos form metadata":
        kind = "list"
    r = _nested_request(live, target, _nested(depth, kind))
    where = f"{target}, {kind} nested {depth} deep: {r.status_code} {r.text[:300]}"
    assert r.status_code < 500, where
    if r.status_code < 400:  # only a flat filter ({"a": 1}) is a valid search
        assert (target, kind, depth) == ("search json", "object", 1), where
        return
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, where


def test_the_fuzz_left_the_catalog_alone(live, catalog_before):
    assert _catalog(live) == catalog_before
