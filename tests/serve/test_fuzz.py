"""Property-based fuzz of the REST API against the live service (see conftest.py).

Schemathesis reads the service's own ``/openapi.json`` and sends what it documents, both
schema-valid (positive) and schema-breaking (negative) requests, from its coverage phase
(boundary values, wrong types, unexpected methods) and its Hypothesis fuzzing phase. The
properties: no response is ever a 5xx; every error is ``{"error": {"code", "message"}}``;
2xx bodies match their documented models; without the key a ``/v1`` route answers no
handler's response but a 401. A few plain Hypothesis properties aim at inputs the schema
cannot describe: numeric-looking Unicode cursors, deeply nested JSON, and hostile values
(nesting hundreds deep, 5000-digit integers, integers past int64, NaN, long Unicode names)
in every field of ``POST /v1/videos`` (JSON and multipart) and ``POST /v1/search``.

What is left out, on purpose: ``DELETE /v1/videos/{video_id}`` (it would delete the demo
videos the other serve tests rely on; test_app.py covers it) and ``POST /v1/reindex`` (it
would embed the library again under the other tests; tests/ingest/test_live_reindex.py and
test_reindex.py cover it). ``POST /v1/videos`` is fuzzed,
but kept from changing what the other tests see: an upload the service accepts is deleted at
once (fuzzed bytes are never a video, so they index nothing), and a fuzzed http(s) uri is
swapped for one that cannot fetch anything. The last test checks that the catalog is as the
fuzz found it.

Repeatable: a fixed seed, no example database, and a bounded number of examples per
operation (about a minute on two cores, after the shared ~35 s service start).
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.serve.conftest import KEY

AUTH = {"Authorization": f"Bearer {KEY}"}
SEED = 20261122
FUZZ_EXAMPLES = 50  # per operation, on top of the coverage phase's deterministic cases
ANON_EXAMPLES = 15
STATUS_EXAMPLES = 10


def slow_ok(**kwargs) -> settings:
    """Requests to a real service are slow for Hypothesis; no deadline (no timing assertions)."""
    return settings(
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        **kwargs,
    )


def _config(*, max_examples: int, phases: tuple[str, ...], checks: tuple[str, ...], base_url: str):
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "base-url": base_url,
            "request-timeout": 120,
            "generation": {"mode": "all", "max-examples": max_examples, "database": "none"},
            "phases": {
                name: {"enabled": name in phases}
                for name in ("examples", "coverage", "fuzzing", "stateful")
            },
            "checks": {"enabled": False, **{name: {"enabled": True} for name in checks}},
        }
    )


# Schemathesis's own checks that hold for this API. Left out, with the reason:
# - status_code_conformance: run on its own in test_every_status_is_documented.
# - positive_data_acceptance: the schema cannot say "exactly one query kind", so a
#   schema-valid search such as {"video_id": 1} is rightly a 422.
# - allow_header_conformance: Starlette's 405 names only the methods of the route it
#   matched (OPTIONS /v1/videos says "Allow: POST"), a framework limitation.
CHECKS = (
    "not_a_server_error",
    "response_schema_conformance",
    "content_type_conformance",
    "unsupported_method",
)


def _load(live, **kwargs):
    config = _config(base_url=live.url, **kwargs)
    return schemathesis.openapi.from_url(f"{live.url}/openapi.json", config=config, timeout=60)


@pytest.fixture(scope="module")
def local_uris(live) -> list[str]:
    """Uris an ingest may be given that fetch nothing: a file in the ingest root that is no
    video (its job fails at once), one that is missing, a private address, a bad scheme."""
    noise = live.root / "videos" / "fuzz-noise.mkv"
    noise.write_bytes(NOISE)
    return [
        noise.as_uri(),
        (live.root / "videos" / "missing.mp4").as_uri(),
        "http://10.0.0.8/v.mp4",
        "ftp://x/v.mp4",
    ]


@pytest.fixture(scope="module")
def api_schema(live, local_uris):
    schema = _load(live, max_examples=FUZZ_EXAMPLES, phases=("coverage", "fuzzing"), checks=CHECKS)
    _steer_past_the_404s(schema, sorted(live.ids.values()), local_uris)
    return schema


_QUERY_KINDS = ("text", "image_b64", "video_id")
NOISE = (
    bytes(range(256)) * 16
)  # binary with no known signature: accepted as an upload, fails at decode


def _fetches(uri: object) -> bool:
    """Whether the service would fetch ``uri`` over the network (it parses it the same way)."""
    try:
        return isinstance(uri, str) and urlsplit(uri).scheme in ("http", "https")
    except ValueError:
        return False


def _steer_past_the_404s(schema, video_ids: list[int], local_uris: list[str]) -> None:
    """Random ids are almost never a video's and random searches almost always name several
    query kinds, so the handlers would stop at a 404 or a 422. Send some of the cases on:
    a schema-valid video id becomes a demo video's about half the time, and a JSON search
    with several query kinds keeps only one of them about half the time (the rest of the
    body, filter, cursor, top_k and all, stays fuzzed). An ingest's http(s) uri becomes one
    of ``local_uris``: a fuzzed host may be a real one."""

    @schema.hook
    def flatmap_path_parameters(context, path_parameters):
        video_id = (path_parameters or {}).get("video_id")
        if type(video_id) is not int or video_id < 1:
            return st.just(path_parameters)
        return st.sampled_from([video_id, video_id, *video_ids]).map(
            lambda v: {**path_parameters, "video_id": v}
        )

    @schema.hook
    def flatmap_body(context, body):
        if isinstance(body, dict) and _fetches(body.get("uri")):
            return st.sampled_from(local_uris).map(lambda uri: {**body, "uri": uri})
        kinds = [k for k in _QUERY_KINDS if isinstance(body, dict) and k in body]
        if context.operation is None or context.operation.path != "/v1/search" or len(kinds) < 2:
            return st.just(body)
        return st.sampled_from([None, *kinds]).map(
            lambda keep: body
            if keep is None
            else {k: v for k, v in body.items() if k not in kinds or k == keep}
        )


@pytest.fixture(scope="module")
def anon_schema(live):
    return _load(live, max_examples=ANON_EXAMPLES, phases=("fuzzing",), checks=CHECKS)


@pytest.fixture(scope="module")
def status_schema(live, local_uris):
    checks = ("status_code_conformance",)
    schema = _load(
        live, max_examples=STATUS_EXAMPLES, phases=("coverage", "fuzzing"), checks=checks
    )
    _steer_past_the_404s(schema, sorted(live.ids.values()), local_uris)
    return schema


def _safe(lazy):
    return lazy.exclude(method="DELETE").exclude(method="POST", path="/v1/reindex")


fuzzed = _safe(schemathesis.pytest.from_fixture("api_schema"))
fuzzed_anon = _safe(schemathesis.pytest.from_fixture("anon_schema"))
status_checked = _safe(schemathesis.pytest.from_fixture("status_schema"))


@pytest.fixture(autouse=True)
def _nodeid_for_schemathesis(request):
    """schemathesis 4.32's lazy (from_fixture) tests read and rename ``item._nodeid``, which
    pytest 9.2 no longer has (it keeps a structured ``_id``): give it one to read. Harmless
    where both agree; only the per-operation names in the report depend on it."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


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
    ctype = next(
        (v[0] for k, v in response.headers.items() if k.lower() == "content-type" and v), ""
    )
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
    _forget_if_ingested(live, response)
    assert response.status_code < 500, (
        f"{response.status_code} for: {_request(case, response)}\nbody: {response.content[:500]!r}"
    )
    if response.status_code >= 400:
        _error_body(case, response)
    case.validate_response(response, headers=AUTH)


@status_checked.parametrize()
@slow_ok()
def test_every_status_is_documented(case, live, http, catalog_before):
    """Every status the service answers is one the schema documents for that operation."""
    response = case.call(session=http, headers=AUTH)
    _forget_if_ingested(live, response)
    assert response.status_code < 500, _request(case, response)
    case.validate_response(response, headers=AUTH)


def _forget_if_ingested(live, response) -> dict | None:
    """Delete the video a POST /v1/videos made (the listing must stay as the fuzz found it)
    and return it as the service showed it. It is shown and listed first: whatever the fuzz
    got stored must show and list (not a 5xx)."""
    if response.status_code != 202:
        return None
    video_id = json.loads(response.content)["video_id"]
    shown = live.client.get(f"/v1/videos/{video_id}")
    listed = live.client.get("/v1/videos", params={"limit": 500})
    assert live.client.delete(f"/v1/videos/{video_id}").status_code == 204
    assert shown.status_code == 200, shown.text[:500]
    assert listed.status_code == 200, listed.text[:500]
    return shown.json()


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
    # The key is checked before routing and validation: every /v1 request without it is a
    # 401, whatever else is wrong with it.
    assert status == 401, where
    assert _error_body(case, response)["code"] == "unauthorized", where


# -- what the schema cannot describe -------------------------------------------------------

# str.isdigit() is true for 788 characters, not 10: other scripts' decimal digits (which
# int() reads) and 128 superscript, subscript and circled ones (which int() refuses).
_ISDIGIT = "".join(c for c in map(chr, range(0x20000)) if c.isdigit())


@slow_ok(max_examples=40, derandomize=True, database=None)
@given(
    cursor=st.text(st.sampled_from(_ISDIGIT), min_size=1, max_size=32)
    | st.text(min_size=1, max_size=32)
)
@example(cursor="\u00b2")  # superscript two
@example(cursor="1\u2460")  # 1, circled digit one
@example(cursor="\u0663")  # Arabic-Indic three
def test_video_list_cursor_is_a_200_or_a_400(live, catalog_before, cursor):
    r = live.client.get("/v1/videos", params={"cursor": cursor})
    assert r.status_code in (200, 400), (
        f"GET /v1/videos?cursor={cursor!r}: {r.status_code} {r.text[:300]}"
    )
    if r.status_code == 400:
        body = r.json()
        assert body == {"error": {"code": "invalid_cursor", "message": body["error"]["message"]}}, (
            body
        )
    else:
        assert set(r.json()) == {"videos", "next_cursor"}


_NESTED_TARGETS = ["search json", "search form filter", "videos json", "videos form metadata"]


def _nested(depth: int, kind: str) -> str:
    return "[" * depth + "]" * depth if kind == "list" else '{"a":' * depth + "1" + "}" * depth


def _nested_request(live, target: str, doc: str):
    """One request carrying ``doc``; none of them can ingest a video (see the docstring)."""
    c = live.client
    if target == "search json":
        return c.post(
            "/v1/search",
            content=f'{{"text": "a cat", "filter": {doc}}}',
            headers={"content-type": "application/json"},
        )
    if target == "search form filter":
        return c.post("/v1/search", files={"clip": ("c.mp4", b"not a video")}, data={"filter": doc})
    if target == "videos json":  # no "uri": a 422 if it parses
        return c.post(
            "/v1/videos",
            content=f'{{"metadata": {doc}}}',
            headers={"content-type": "application/json"},
        )
    # target == "videos form metadata": ``doc`` is a list, so a 422 (not an object) if it parses
    return c.post(
        "/v1/videos", files={"file": ("v.mp4", b"not a video", "video/mp4")}, data={"metadata": doc}
    )


@slow_ok(max_examples=30, derandomize=True, database=None)
@given(
    depth=st.integers(1, 5000),
    kind=st.sampled_from(["list", "object"]),
    target=st.sampled_from(_NESTED_TARGETS),
)
@example(depth=3000, kind="list", target="search json")
@example(depth=3000, kind="object", target="search form filter")
@example(depth=3000, kind="object", target="videos json")
@example(depth=3000, kind="list", target="videos form metadata")
def test_deeply_nested_json_is_never_a_5xx(live, catalog_before, depth, kind, target):
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


def _nested_around(depth: int, inner: str, kind: str) -> str:
    return (
        "[" * depth + inner + "]" * depth
        if kind == "list"
        else '{"a":' * depth + inner + "}" * depth
    )


# Hostile values, written as JSON text: json.dumps will not write NaN on purpose nor a
# 5000-digit integer at all, and a lone surrogate only an escape can spell.
_NUMBERS = st.sampled_from(
    [
        "1" * 5000,
        "-" + "9" * 4301,  # past Python's 4300-digit limit on reading an integer
        str(2**63),
        str(-(2**63) - 1),
        "1" + "0" * 30,  # past SQLite's 64-bit integers
        "NaN",
        "Infinity",
        "-Infinity",
        "1e999",
        "-0.0",
    ]
) | st.integers().map(str)
_LONG_NAMES = st.builds(
    lambda c, n: c * n,
    st.sampled_from(["視頻", "é", "🎬", "a", "e\u0301", "\u202e", " "]),
    st.integers(50, 300),
)  # 100 CJK characters are 300 bytes: over a file name's 255
_NAMES = st.text(max_size=30) | _LONG_NAMES
_TEXT = _NAMES.map(json.dumps) | st.just('"x\\ud800"')
_SCALARS = _NUMBERS | _TEXT | st.sampled_from(["true", "false", "null"])
_VALUES = st.builds(
    _nested_around,
    st.integers(0, 10) | st.sampled_from([255, 256, 300, 900]),
    _SCALARS,
    st.sampled_from(["list", "object"]),
)
_MANY_KEYS = st.integers(250, 400).map(
    lambda n: "{" + ",".join(f'"k{i}": {i}' for i in range(n)) + "}"
)
_OBJECTS = _MANY_KEYS | st.lists(st.tuples(_TEXT, _VALUES), max_size=4).map(
    lambda items: "{" + ",".join(f"{key}: {value}" for key, value in items) + "}"
)


def _answered(live, r, where: str) -> dict | None:
    """Assert no 5xx and the error body; return what was ingested (then deleted), if anything."""
    assert r.status_code < 500, f"{where}: {r.status_code} {r.text[:300]}"
    if r.status_code >= 400:
        body = r.json()
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, (
            f"{where}: {body}"
        )
        return None
    return _forget_if_ingested(live, r)


@slow_ok(max_examples=40, derandomize=True, database=None)
@given(
    uri=st.integers(0, 3),
    title=st.none() | _TEXT | _VALUES,
    metadata=st.none() | _OBJECTS | _VALUES,
)
def test_hostile_values_in_a_json_ingest_are_never_a_5xx(
    live, catalog_before, local_uris, uri, title, metadata
):
    fields = {"uri": json.dumps(local_uris[uri]), "title": title, "metadata": metadata}
    body = "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items() if v is not None) + "}"
    r = live.client.post("/v1/videos", content=body, headers={"content-type": "application/json"})
    _answered(live, r, f"POST /v1/videos {body[:300]}")


@slow_ok(max_examples=40, derandomize=True, database=None)
@given(
    filename=_NAMES.filter(str.strip),
    title=st.none() | _NAMES,
    metadata=st.none() | _OBJECTS | _VALUES,
)
@example(filename="視頻" * 50 + ".mp4", title=None, metadata=None)
@example(filename="x.mp4", title="AC/DC live", metadata=_nested_around(300, "1", "object"))
def test_hostile_values_in_an_upload_are_never_a_5xx(
    live, catalog_before, filename, title, metadata
):
    data = {k: v for k, v in (("title", title), ("metadata", metadata)) if v is not None}
    r = live.client.post("/v1/videos", files={"file": (filename, NOISE)}, data=data)
    video = _answered(
        live,
        r,
        f"upload {filename[:60]!r}, title {title and title[:60]!r}, metadata {metadata and metadata[:200]}",
    )
    if video is not None and title and title.strip():
        assert video["title"] == title  # kept as given


@slow_ok(max_examples=40, derandomize=True, database=None)
@given(text=_TEXT | _VALUES, top_k=_NUMBERS, value=_VALUES, form=st.booleans())
def test_hostile_values_in_a_search_are_never_a_5xx(live, catalog_before, text, top_k, value, form):
    if form:
        r = live.client.post(
            "/v1/search",
            files={"clip": ("c.mp4", b"x")},
            data={"top_k": top_k, "filter": '{"k": %s}' % value},
        )
    else:
        body = '{"text": %s, "top_k": %s, "filter": {"k": %s}}' % (text, top_k, value)
        r = live.client.post(
            "/v1/search", content=body, headers={"content-type": "application/json"}
        )
    _answered(
        live,
        r,
        f"search ({'form' if form else 'json'}) text {text[:100]}, top_k {top_k[:20]}, filter {value[:100]}",
    )


def test_the_fuzz_left_the_catalog_alone(live, catalog_before):
    assert _catalog(live) == catalog_before
