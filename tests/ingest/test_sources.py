"""Source guards: upload sniffing, file:// roots, http(s) address checks, downloads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._helpers import QuietHandler, serving
from vifusion.config import Config
from vifusion.ingest.sources import (
    SourceError,
    check_url,
    download,
    new_media_path,
    resolve_file_uri,
    sniff,
)

MP4_HEAD = b"\x00\x00\x00\x18ftypisom" + bytes(20)


@pytest.mark.parametrize(
    "head",
    [
        MP4_HEAD,
        b"\x1a\x45\xdf\xa3" + bytes(20),
        b"RIFF\x00\x00\x00\x00AVI LIST",
        b"GIF89a" + bytes(10),
        b"OggS" + bytes(10),
        bytes(range(256)) * 4,
    ],
    ids=["mp4", "mkv", "avi", "gif", "ogg", "unknown-binary"],
)
def test_sniff_lets_videos_and_unknown_binary_through(head):
    assert sniff(head) is None


@pytest.mark.parametrize(
    ("head", "why"),
    [
        (b"", "empty"),
        (b"hello world\n" * 10, "text"),
        ("héllo wörld ".encode() * 40, "text"),
        (b"\x89PNG\r\n\x1a\n" + bytes(20), "PNG"),
        (b"%PDF-1.7", "PDF"),
        (b"RIFF\x00\x00\x00\x00WAVEfmt ", "not an AVI"),
    ],
)
def test_sniff_refuses_what_is_surely_not_video(head, why):
    assert why in sniff(head)


def test_file_uri_must_stay_inside_the_roots(tmp_path):
    root = tmp_path / "videos"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a b.mp4").write_bytes(MP4_HEAD)
    assert resolve_file_uri((root / "sub" / "a b.mp4").as_uri(), [root]) == root / "sub" / "a b.mp4"
    cases = {
        f"file://{root}/../secret.mp4": "path_traversal",
        f"file://{root}/%2E%2E/secret.mp4": "path_traversal",
        "file:///etc/passwd": "forbidden_path",
        f"file://{tmp_path}/videos-evil/x.mp4": "forbidden_path",  # a prefix of the root is not inside it
        f"file://{root}/nothing.mp4": "not_found",
        f"file://otherhost{root}/sub/a.mp4": "invalid_uri",
    }
    for uri, code in cases.items():
        with pytest.raises(SourceError) as e:
            resolve_file_uri(uri, [root])
        assert e.value.code == code, uri
    with pytest.raises(SourceError) as e:
        resolve_file_uri((root / "sub" / "a b.mp4").as_uri(), [])
    assert e.value.code == "file_uri_disabled" and e.value.status == 403


@pytest.mark.parametrize(
    ("name", "content", "status", "code", "why"),
    [
        (".env", b"API_TOKEN=0123456789abcdef\n", 415, "unsupported_media_type", "text"),
        ("token.mp4", b"ghp_0123456789abcdefghij", 415, "unsupported_media_type", "text"),
        (
            "key.mp4",
            b"-----BEGIN OPENSSH PRIVATE KEY-----\n",
            415,
            "unsupported_media_type",
            "text",
        ),
        ("photo.mp4", b"\x89PNG\r\n\x1a\n" + bytes(20), 415, "unsupported_media_type", "PNG"),
        ("empty.mp4", b"", 400, "empty_file", "empty"),
    ],
)
def test_a_file_uri_that_is_plainly_not_a_video_is_refused_as_an_upload_is(
    tmp_path, name, content, status, code, why
):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(SourceError) as e:
        resolve_file_uri((tmp_path / name).as_uri(), [tmp_path])
    assert (e.value.status, e.value.code) == (status, code) and why in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/x",
        "http://localhost:9000/x",
        "http://169.254.169.254/",
        "http://[::1]/x",
        "http://10.1.2.3/x",
        "http://192.168.0.1/x",
        "http://172.16.0.1/x",
        "http://0.0.0.0/x",
        "http://[::ffff:127.0.0.1]/x",
        "http://2130706433/x",
    ],
)
def test_private_addresses_are_refused(url):
    with pytest.raises(SourceError) as e:
        check_url(url, allow_private=False)
    assert e.value.code == "forbidden_address" and e.value.status == 403


def test_public_address_literal_passes_and_private_passes_when_allowed():
    check_url(
        "http://93.184.216.34/video.mp4", allow_private=False
    )  # no lookup needed, no request made
    check_url("http://127.0.0.1:1/x", allow_private=True)


class _Handler(QuietHandler):
    body = b"\x00\x00\x00\x18ftypmp42" + bytes(1000)

    def do_GET(self):  # noqa: N802
        if self.path == "/redirect-private":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest")
            self.end_headers()
            return
        if self.path == "/missing":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


@pytest.fixture
def http_server():
    with serving(_Handler) as url:
        yield url


def test_download_fetches_and_enforces_limits(tmp_path, http_server):
    cfg = Config(data_dir=tmp_path, allow_private_urls=True)
    dest = new_media_path(cfg, "clip.mp4")
    assert dest.name == "clip.mp4" and dest.parent.parent == tmp_path / "media"
    download(f"{http_server}/clip.mp4", dest, cfg)
    assert dest.read_bytes() == _Handler.body
    with pytest.raises(SourceError, match="HTTP 404"):
        download(f"{http_server}/missing", dest, cfg)
    small = Config(data_dir=tmp_path, allow_private_urls=True, max_upload_bytes=100)
    with pytest.raises(SourceError) as e:
        download(f"{http_server}/clip.mp4", dest, small)
    assert e.value.status == 413


def test_download_refuses_a_redirect_to_a_private_address(tmp_path, http_server, monkeypatch):
    import vifusion.ingest.sources as sources

    # The test server is on loopback: let exactly that through, keep every other check.
    real = sources.check_url
    monkeypatch.setattr(
        sources, "check_url", lambda url, allow: real(url, allow or url.startswith(http_server))
    )
    cfg = Config(data_dir=tmp_path)
    with pytest.raises(SourceError) as e:
        download(f"{http_server}/redirect-private", tmp_path / "x.mp4", cfg)
    assert e.value.code == "forbidden_address"


def test_media_names_are_sanitised(tmp_path):
    cfg = Config(data_dir=tmp_path)
    assert new_media_path(cfg, "../../etc/passwd").name == "passwd.bin"
    assert new_media_path(cfg, "we ird;name.MP4").name == "we_ird_name.MP4"
    assert new_media_path(cfg, None).name == "video.bin"
    assert all(p.is_relative_to(tmp_path / "media") for p in (tmp_path / "media").rglob("*"))
    assert not Path(tmp_path / "etc").exists()


# Each disguises an IPv4 address inside an IPv6 one, or is an IPv6 range no fetch may reach.
DISGUISED = {
    "http://[64:ff9b::7f00:1]/x": "127.0.0.1",  # NAT64 (RFC 6052) of loopback
    "http://[64:ff9b::a9fe:a9fe]/latest": "169.254.169.254",  # NAT64 of the cloud metadata address
    "http://[64:ff9b::a00:1]/x": "10.0.0.1",
    "http://[2002:7f00:1::1]/x": "127.0.0.1",  # 6to4 (RFC 3056)
    "http://[2002:c0a8:1::]/x": "192.168.0.1",
    "http://[::127.0.0.1]/x": "127.0.0.1",  # IPv4-compatible (RFC 4291, deprecated)
    "http://[::10.0.0.1]/x": "10.0.0.1",
    "http://[::ffff:0:7f00:1]/x": "127.0.0.1",  # IPv4-translated (RFC 2765)
    "http://[::ffff:169.254.169.254]/x": "169.254.169.254",  # IPv4-mapped
    "http://[fec0::1]/x": "site-local",  # deprecated site-local (RFC 3879)
    "http://[64:ff9b:1::a00:1]/x": "local-use NAT64",  # RFC 8215: a network's own translator
    "http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/x": "Teredo",  # RFC 4380 tunnel
}


@pytest.mark.parametrize("url", list(DISGUISED))
def test_private_addresses_inside_ipv6_forms_are_refused(url):
    with pytest.raises(SourceError) as e:
        check_url(url, allow_private=False)
    assert (e.value.code, e.value.status) == ("forbidden_address", 403)
    assert DISGUISED[url] in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "url",
    [
        "http://[64:ff9b::808:808]/x",  # NAT64 of 8.8.8.8
        "http://[2002:808:808::1]/x",  # 6to4 of 8.8.8.8
        "http://[2606:4700::1111]/x",  # plain public IPv6
    ],
)
def test_public_addresses_inside_ipv6_forms_pass(url):
    check_url(url, allow_private=False)  # a literal: no lookup, no request


def test_download_refuses_a_disguised_private_address_before_connecting(tmp_path, http_server):
    # The test server listens on 127.0.0.1; NAT64's form of that address must not reach it.
    port = http_server.rsplit(":", 1)[1]
    with pytest.raises(SourceError) as e:
        download(
            f"http://[64:ff9b::7f00:1]:{port}/clip.mp4",
            tmp_path / "x.mp4",
            Config(data_dir=tmp_path),
        )
    assert e.value.code == "forbidden_address" and "127.0.0.1" in str(e.value)
    assert not (tmp_path / "x.mp4").exists()
