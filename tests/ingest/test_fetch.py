"""URL fetches have a total deadline and a minimum rate: a server that trickles bytes (or
sends none) cannot hold the extractor's queue. Real HTTP servers on 127.0.0.1, small limits."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
import time
import zlib

import pytest

from tests._helpers import QuietHandler, serving
from vifusion.config import Config
from vifusion.ingest.sources import SourceError, download, new_media_path

HEAD = b"\x00\x00\x00\x18ftypmp42"


class _Slow(QuietHandler):
    """Promises 100 kB, then: ``/trickle`` one byte every 0.1 s, ``/steady`` 2,000 bytes/s,
    ``/silent`` nothing. Each gives up after 8 s, so a fetch that does not stop fails too."""

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        piece, pause = {"/trickle": (1, 0.1), "/steady": (200, 0.1), "/silent": (0, 0.1)}[self.path]
        self.wfile.write(HEAD)
        self.wfile.flush()
        end = time.monotonic() + 8
        try:
            while time.monotonic() < end:
                time.sleep(pause)
                if piece:
                    self.wfile.write(bytes(piece))
                    self.wfile.flush()
        except OSError:  # the client hung up: what a deadline does
            pass


@pytest.fixture
def slow_server():
    with serving(_Slow) as url:
        yield url


def _fetch(tmp_path, url: str, **limits) -> SourceError:
    cfg = Config(data_dir=tmp_path, allow_private_urls=True, **limits)
    dest = new_media_path(cfg, "clip.mp4")
    with pytest.raises(SourceError) as e:
        download(url, dest, cfg)
    return e.value


def test_a_trickling_server_fails_the_fetch_as_too_slow(tmp_path, slow_server):
    e = _fetch(tmp_path, f"{slow_server}/trickle", fetch_min_rate_bps=1000, fetch_rate_window_s=1.0)
    assert e.code == "fetch_too_slow"
    assert "download too slow" in str(e) and "under the minimum of 1000 bytes/s" in str(e), str(e)


def test_a_server_that_sends_nothing_fails_the_fetch_as_too_slow(tmp_path, slow_server):
    e = _fetch(tmp_path, f"{slow_server}/silent", fetch_min_rate_bps=1000, fetch_rate_window_s=1.0)
    assert e.code == "fetch_too_slow" and "nothing received for 1 s" in str(e), str(e)


def test_a_fetch_past_its_deadline_fails_even_at_a_steady_rate(tmp_path, slow_server):
    e = _fetch(
        tmp_path,
        f"{slow_server}/steady",
        fetch_min_rate_bps=1000,
        fetch_rate_window_s=1.0,
        fetch_deadline_s=2.0,
    )
    assert e.code == "fetch_too_slow" and "download took longer than 2 s" in str(e), str(e)


# -- compression bombs -----------------------------------------------------------------

_BOMB_MIB = 256


def _gzip_bomb() -> bytes:
    """``_BOMB_MIB`` MiB of zeros gzipped twice: under a kilobyte on the wire."""
    inner = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: the gzip format
    zeros = bytes(1 << 20)
    layer = b"".join(inner.compress(zeros) for _ in range(_BOMB_MIB)) + inner.flush()
    return gzip.compress(layer, 9)


class _Encoded(QuietHandler):
    """``/bomb``: the bomb as ``Content-Encoding: gzip, gzip``; ``/plain``: a small file as
    it is. Each request's Accept-Encoding is kept in ``asked``."""

    bomb = b""
    asked: list[str] = []

    def do_GET(self):  # noqa: N802
        type(self).asked.append(self.headers.get("Accept-Encoding", ""))
        body = self.bomb if self.path == "/bomb" else HEAD + bytes(1000)
        self.send_response(200)
        self.send_header("Content-Type", "video/mp4")
        if self.path == "/bomb":
            self.send_header("Content-Encoding", "gzip, gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def encoding_server():
    _Encoded.bomb = _gzip_bomb()
    with serving(_Encoded) as url:
        yield url


_FETCH_AND_MEASURE = """
import json, sys
from pathlib import Path
from vifusion.config import Config
from vifusion.ingest.sources import SourceError, download

url, folder = sys.argv[1], Path(sys.argv[2])
cfg = Config(data_dir=folder, allow_private_urls=True, max_upload_bytes=8 << 20)
try:
    download(url, folder / "clip.mp4", cfg)
    out = {"code": None, "message": ""}
except SourceError as e:
    out = {"code": e.code, "message": str(e)}
# VmHWM: this program's peak alone (ru_maxrss would count the forking parent's pages too)
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
out["peak_mib"] = int(hwm.split()[1]) / 1024
print(json.dumps(out))
"""


def test_a_gzip_bomb_is_refused_without_being_decoded(tmp_path, encoding_server):
    """Under a kilobyte sent as ``Content-Encoding: gzip, gzip`` that would expand to 256 MiB:
    the fetch fails saying why, and the fetching process's memory stays near its baseline
    (about 60 MiB; decoding it would take it past 300). In a process of its own, so its peak
    memory is the fetch's alone."""
    assert len(_Encoded.bomb) < 1024
    done = subprocess.run(
        [sys.executable, "-c", _FETCH_AND_MEASURE, f"{encoding_server}/bomb", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["code"] == "fetch_encoded", out
    assert "the server sent gzip, gzip-encoded content" in out["message"], out
    assert out["peak_mib"] < 160, out
    assert _Encoded.asked[-1] == "identity"  # it asked for the file as it is
    assert not (tmp_path / "clip.mp4").exists()


def test_a_plain_response_is_fetched_byte_for_byte(tmp_path, encoding_server):
    cfg = Config(data_dir=tmp_path, allow_private_urls=True)
    dest = new_media_path(cfg, "clip.mp4")
    sha, size = download(f"{encoding_server}/plain", dest, cfg)
    body = HEAD + bytes(1000)
    assert dest.read_bytes() == body
    assert (sha, size) == (hashlib.sha256(body).hexdigest(), len(body))
