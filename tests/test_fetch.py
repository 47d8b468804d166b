"""URL fetches have a total deadline and a minimum rate: a server that trickles bytes (or
sends none) cannot hold the extractor's queue. Real HTTP servers on 127.0.0.1, small limits."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from vifusion.config import Config
from vifusion.sources import SourceError, download, new_media_path

HEAD = b"\x00\x00\x00\x18ftypmp42"


class _Slow(http.server.BaseHTTPRequestHandler):
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

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


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
