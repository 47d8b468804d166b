"""The browser-facing hardening, live: every response carries the Content-Security-Policy,
nosniff and no-referrer, and the API docs load nothing from outside the service."""

from __future__ import annotations

import re

import pytest

PAGES = [
    "/",
    "/static/app.js",
    "/static/style.css",
    "/healthz",
    "/metrics",
    "/openapi.json",
    "/docs",
    "/redoc",
    "/docs/swagger-ui-bundle.js",
    "/docs/swagger-ui.css",
    "/docs/swagger-init.js",
    "/docs/redoc.standalone.js",
    "/no-such-page",
]


def directives(csp: str) -> dict[str, set[str]]:
    return {
        name: set(values)
        for name, *values in (part.split() for part in csp.split(";") if part.strip())
    }


@pytest.mark.parametrize("path", PAGES)
def test_every_response_carries_the_security_headers(live, path):
    check(live.anon.get(path))


@pytest.mark.parametrize("authorized", [True, False])
def test_api_answers_carry_them_too(live, authorized):
    r = (live.client if authorized else live.anon).get("/v1/videos", params={"limit": 1})
    assert r.status_code == (200 if authorized else 401)
    check(r)


def check(r) -> None:
    csp = directives(r.headers["content-security-policy"])
    assert csp["script-src"] == {"'self'"}  # no inline script, no other origin
    assert csp["object-src"] == {"'none'"} and csp["frame-ancestors"] == {"'none'"}
    assert csp["base-uri"] == {"'self'"} and csp["default-src"] == {"'self'"}
    assert csp["img-src"] == {"'self'", "data:", "blob:"} and csp["media-src"] == {
        "'self'",
        "blob:",
    }
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_docs_load_only_files_the_service_serves(live, path):
    r = live.anon.get(path)
    assert r.status_code == 200
    assert "://" not in r.text, r.text  # nothing from a CDN
    assert "<script>" not in r.text  # every script from a file (the CSP runs no inline one)
    loaded = re.findall(r'(?:src|href|spec-url)="([^"]+)"', r.text)
    assert loaded, r.text
    for url in loaded:
        got = live.anon.get(
            "/" + url
        )  # relative to /docs, /redoc: so they work under a route prefix
        assert got.status_code == 200 and len(got.content) > 100, (url, got.status_code)
