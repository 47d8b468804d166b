"""Where a video comes from: an upload, a ``file://`` path, or an ``http(s)://`` URL, each
checked before anything is queued, so a bad one is refused at once:
- an upload is sniffed from its first bytes: text, images and documents are refused
  (unknown binary data passes, and its job fails with the decoder's reason);
- a ``file://`` path must resolve inside one of ``Config.ingest_roots`` to a regular file,
  sniffed as an upload is; every later read opens it through no symlink (``open_video_file``);
- an ``http(s)://`` host must resolve only to public addresses (an IPv6 form carrying an
  IPv4 address, as NAT64 or 6to4 do, is judged by that address) unless
  ``Config.allow_private_urls``, checked again at fetch and on every redirect, and the
  fetch connects to the checked address (no DNS rebinding); a fetch past
  ``Config.fetch_deadline_s`` or slower than ``Config.fetch_min_rate_bps`` fails its job.
"""

from __future__ import annotations

import errno
import hashlib
import ipaddress
import os
import socket
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, unquote, urljoin, urlsplit

from vifusion._files import NotRegularFile, make_dirs, open_regular, whole_file
from vifusion.config import Config
from vifusion.datadir import MEDIA

if TYPE_CHECKING:
    from vifusion.catalog import Video


class SourceError(ValueError):
    """A source refused before indexing; ``code`` is a stable machine-readable reason and
    ``status`` the HTTP status that says it."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


# -- uploads ---------------------------------------------------------------------------

_VIDEO_MAGIC: tuple[tuple[int, bytes], ...] = (
    (4, b"ftyp"),  # MP4, MOV, 3GP, M4V
    (4, b"moov"),
    (4, b"mdat"),
    (4, b"free"),
    (4, b"wide"),
    (4, b"skip"),  # older QuickTime
    (0, b"\x1a\x45\xdf\xa3"),  # Matroska, WebM
    (0, b"RIFF"),  # AVI (checked further below)
    (0, b"\x00\x00\x01\xba"),
    (0, b"\x00\x00\x01\xb3"),  # MPEG program stream, elementary
    (0, b"FLV"),
    (0, b"OggS"),
    (0, b"GIF8"),
    (0, b"\x30\x26\xb2\x75\x8e\x66\xcf\x11"),  # ASF / WMV
)
_NOT_VIDEO_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"BM", "a BMP image"),
    (b"\x7fELF", "a program"),
    (b"ID3", "an MP3 audio file"),
    (b"fLaC", "a FLAC audio file"),
)
SNIFF_BYTES = 4096


def sniff(head: bytes) -> str | None:
    """Why ``head`` (a file's first bytes) is not a video, or None when it may be one.

    Only sure refusals: a known video signature passes, a known other format or plain text
    is refused, and anything else passes on to the decoder, which gives the final word.
    """
    if not head:
        return "the file is empty"
    for offset, magic in _VIDEO_MAGIC:
        if head[offset : offset + len(magic)] == magic:
            if magic == b"RIFF" and head[8:12] != b"AVI ":
                return f"a RIFF {head[8:12].decode('latin-1')!r} file, not an AVI video"
            return None
    if len(head) >= 376 and head[0] == 0x47 and head[188] == 0x47:  # MPEG transport stream
        return None
    for magic, what in _NOT_VIDEO_MAGIC:
        if head.startswith(magic):
            return f"{what}, not a video"
    if b"\x00" not in head:
        try:
            head.decode("utf-8")
            return "text, not a video"
        except UnicodeDecodeError as e:
            if e.start >= len(head) - 3:  # a character cut at the end of the sample
                return "text, not a video"
    return None


def refuse_non_video(head: bytes, name: str) -> None:
    """Refuse a file by its first bytes (``sniff``), an upload or a ``file://`` path alike:
    400 ``empty_file`` when empty, 415 ``unsupported_media_type`` when plainly not a video.
    Otherwise a key holder could queue any text file under an ingest root, a ``.env`` or a
    token, and read it back (``/media`` also serves only what decoded as a video)."""
    if not head:
        raise SourceError("empty_file", f"{name} is empty (0 bytes)")
    if (why := sniff(head)) is not None:
        raise SourceError("unsupported_media_type", f"{name}: {why}", 415)


MAX_TITLE_CHARS = 200  # a longer title given by a client is refused (422)
_NAME_BYTES = 200  # a stored file's name in UTF-8: file systems allow 255 bytes, not characters
_EXTENSION_BYTES = 16


def new_media_path(cfg: Config, filename: str | None) -> Path:
    """A fresh folder under the data dir's media folder, holding the file under a safe
    version of its own name (so errors and downloads name the file the client knows): only
    letters, digits and ``._-``, cut to ``_NAME_BYTES`` keeping its extension."""
    name = Path((filename or "").replace("\\", "/")).name
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in name).lstrip(".")
    if not Path(name).suffix or not Path(name).stem:
        name = (name or "video") + ".bin"
    folder = cfg.data_dir / MEDIA / uuid.uuid4().hex
    make_dirs(folder)
    return folder / _fit(name, _NAME_BYTES)


def _fit(name: str, limit: int) -> str:
    """``name`` cut to ``limit`` UTF-8 bytes on a character boundary, its extension kept."""
    suffix = Path(name).suffix
    if len(suffix.encode()) > _EXTENSION_BYTES:
        suffix = ""
    stem = name[: len(name) - len(suffix)]
    return stem.encode()[: limit - len(suffix.encode())].decode(errors="ignore") + suffix


def url_filename(url: str) -> str:
    """The last path segment of a URL ('' when there is none)."""
    return urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]


def save_capped(chunks: Iterable[bytes], dest: Path, limit: int, what: str) -> tuple[str, int]:
    """Write ``chunks`` to ``dest``, refusing (413) past ``limit`` bytes; return the
    content's (sha256 hex, size), hashed on the way so the file is not read again.
    On return ``dest`` is on disk whole (fsynced; ``whole_file``): only then may the upload
    be acknowledged or the fetched file indexed."""
    h = hashlib.sha256()
    size = 0
    with whole_file(dest) as f:
        for chunk in chunks:
            size += len(chunk)
            if size > limit:
                raise SourceError("too_large", f"{what} is over the {limit}-byte limit", 413)
            h.update(chunk)
            f.write(chunk)
    return h.hexdigest(), size


# -- file:// ---------------------------------------------------------------------------


def _split(uri: str) -> SplitResult:
    try:
        return urlsplit(uri)
    except ValueError as e:  # an unclosed "[" of an IPv6 host, say
        raise SourceError("invalid_uri", f"uri cannot be parsed: {e}") from None


def resolve_file_uri(uri: str, roots: Iterable[Path]) -> Path:
    """The local file a ``file://`` URI names, if it lies inside one of ``roots``."""
    parts = _split(uri)
    if parts.netloc not in ("", "localhost"):
        raise SourceError(
            "invalid_uri", f"file uri with a host ({parts.netloc!r}) is not supported"
        )
    raw = unquote(parts.path)
    if "\x00" in raw:
        raise SourceError("invalid_uri", "file uri contains a NUL byte")
    if ".." in Path(raw).parts:
        raise SourceError("path_traversal", "file uri must not contain '..'", 403)
    roots = [Path(r).resolve() for r in roots]
    if not roots:
        raise SourceError(
            "file_uri_disabled",
            "file:// ingest is off: set ingest_roots (VIFUSION_INGEST_ROOTS) to allow it",
            403,
        )
    path = Path(os.path.realpath(raw))
    if not any(path.is_relative_to(root) for root in roots):
        raise SourceError("forbidden_path", f"{raw} is outside the ingest roots", 403)
    try:  # opened as every later read opens it, so what would fail there is refused here
        fd = open_regular(path, follow_symlinks=False)
        try:
            head = os.read(fd, SNIFF_BYTES)
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise SourceError("not_found", f"{raw}: no such file", 404) from None
    except NotRegularFile as e:
        raise SourceError("not_regular_file", f"{raw}: {e.strerror}") from None
    except OSError as e:
        raise SourceError("unreadable", f"{raw}: cannot read: {e.strerror}", 403) from None
    refuse_non_video(head, raw)
    return path


def is_path_source(video: Video) -> bool:
    """Whether the video's file is the path it was added by (``file://``, ``vifusion index``),
    not a file the service stored in the data dir (an upload, a download)."""
    return video.media_path is not None and str(video.media_path) == video.source


def open_video_file(video: Video) -> int:
    """A read-only descriptor of the video's file (``open_regular``); the caller closes it.

    A path source was stored resolved (for ``file://``, inside the ingest roots), so no part
    of it may be a symlink now: one would be a swap made after the check. A file the service
    stored lies in the data dir, whose own path may run through symlinks."""
    path = video.media_path
    if path is None:
        raise FileNotFoundError(errno.ENOENT, "not fetched yet", video.source)
    return open_regular(path, follow_symlinks=not is_path_source(video))


# -- http(s):// ------------------------------------------------------------------------


# IPv6 forms that reach an IPv4 address, checked as that address: NAT64 (RFC 6052),
# IPv4-compatible (RFC 4291, deprecated; holds :: and ::1 too) and IPv4-translated (RFC 2765),
# besides IPv4-mapped and 6to4 (``ipv4_mapped``, ``sixtofour``).
_HOLDS_IPV4_LOW = tuple(
    ipaddress.IPv6Network(n) for n in ("64:ff9b::/96", "::/96", "::ffff:0:0:0/96")
)
# Refused whatever they hold: a network's own NAT64 (RFC 8215), deprecated site-local (RFC
# 3879), Teredo (RFC 4380: a tunnel to a client address that cannot be told apart from a server's).
_NEVER: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (ipaddress.IPv6Network("64:ff9b:1::/48"), "a local-use NAT64 address"),
    (ipaddress.IPv6Network("fec0::/10"), "a site-local address"),
    (ipaddress.IPv6Network("2001::/32"), "a Teredo address"),
)


def _not_public(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why a fetch must not connect to ``addr``, or None for a public unicast address. An
    IPv6 form that carries an IPv4 address is judged by that address, as IPv4 is."""
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.is_loopback or addr.is_unspecified:  # ::1 and ::, inside ::/96
            return "a loopback or unspecified address"
        for net, what in _NEVER:
            if addr in net:
                return what
        v4 = addr.ipv4_mapped or addr.sixtofour
        if v4 is None and any(addr in net for net in _HOLDS_IPV4_LOW):
            v4 = ipaddress.IPv4Address(int(addr) & 0xFFFF_FFFF)
        if v4 is not None:
            why = _not_public(v4)
            return None if why is None else f"which carries {v4}, {why}"
    if not addr.is_global or addr.is_multicast:
        return "a private, loopback, link-local or multicast address"
    return None


def check_url(url: str, allow_private: bool) -> str:
    """Refuse a URL that is malformed or whose host resolves to a non-public address;
    return the address to connect to (the fetch is pinned to it)."""
    parts = _split(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SourceError("invalid_uri", "uri must be file://, http:// or https:// with a host")
    if parts.username or parts.password:
        raise SourceError("invalid_uri", "credentials in the uri are not accepted")
    try:
        port = parts.port
    except ValueError:
        raise SourceError("invalid_uri", "uri has a bad port") from None
    try:
        infos = socket.getaddrinfo(parts.hostname, port or 443, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        raise SourceError("unresolvable_host", f"cannot resolve host {parts.hostname!r}") from None
    addrs = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    for addr in addrs:
        if not allow_private and (why := _not_public(addr)) is not None:
            raise SourceError(
                "forbidden_address", f"{parts.hostname} resolves to {addr}, {why}", 403
            )
    return str(addrs[0])


class _Pace:
    """A fetch's time limits: all of it within ``fetch_deadline_s``, and at least
    ``fetch_min_rate_bps`` over each ``fetch_rate_window_s`` of the body after the first (the
    first is grace: TCP slow start). Checked as bytes arrive; the read timeout is one window,
    so a server that goes quiet is caught too, and the deadline is overrun by a window at most.
    """

    def __init__(self, cfg: Config) -> None:
        self.deadline_s, self.window_s = cfg.fetch_deadline_s, cfg.fetch_rate_window_s
        self.min_rate = cfg.fetch_min_rate_bps
        self.start = time.monotonic()

    def check(self) -> None:
        if time.monotonic() - self.start > self.deadline_s:
            raise SourceError(
                "fetch_too_slow",
                f"download took longer than {self.deadline_s:g} s (fetch_deadline_s)",
            )

    def watch(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        mark, mark_bytes, got = time.monotonic(), 0, 0
        for chunk in chunks:
            got += len(chunk)
            self.check()
            now = time.monotonic()
            if now - mark >= self.window_s:
                rate = (got - mark_bytes) / (now - mark)
                if rate < self.min_rate:
                    raise SourceError(
                        "fetch_too_slow",
                        f"download too slow: {rate:.0f} bytes/s under the minimum of "
                        f"{self.min_rate} bytes/s over {now - mark:.0f} s (fetch_min_rate_bps)",
                    )
                mark, mark_bytes = now, got
            yield chunk


def download(url: str, dest: Path, cfg: Config, max_redirects: int = 5) -> tuple[str, int]:
    """Fetch ``url`` into ``dest``, checking every hop's address, the size limit and the
    pace (``_Pace``); return the content's (sha256 hex, size). SourceError says why it failed.

    Each hop connects to the address that was checked (Host header and TLS name stay the
    URL's), so a DNS answer that changes after the check cannot redirect the fetch.

    The file is asked for as it is (``Accept-Encoding: identity``) and read raw, never
    decoded: the size limit counts the bytes that arrive. A response with a Content-Encoding
    (gzip, say) is refused, not decoded: a video is compressed already, and a few hundred
    bytes of nested gzip decode to hundreds of MiB in one read, before any limit could count.
    """
    import httpx

    pace = _Pace(cfg)
    timeout = httpx.Timeout(30.0, read=min(30.0, pace.window_s))
    try:
        with httpx.Client(follow_redirects=False, timeout=timeout) as client:
            for _ in range(max_redirects + 1):
                pace.check()
                addr = check_url(url, cfg.allow_private_urls)
                parts = urlsplit(url)
                host = f"[{addr}]" if ":" in addr else addr
                pinned = parts._replace(
                    netloc=f"{host}:{parts.port}" if parts.port else host
                ).geturl()
                headers = {"Host": parts.netloc, "Accept-Encoding": "identity"}
                with client.stream(
                    "GET", pinned, headers=headers, extensions={"sni_hostname": parts.hostname}
                ) as r:
                    if r.is_redirect:
                        url = urljoin(url, r.headers.get("location", ""))
                        continue
                    if r.status_code != 200:
                        raise SourceError("fetch_failed", f"GET {url}: HTTP {r.status_code}")
                    declared = int(r.headers.get("content-length") or 0)
                    if declared > cfg.max_upload_bytes:
                        raise SourceError(
                            "too_large",
                            f"{url} is {declared} bytes; the limit is {cfg.max_upload_bytes}",
                            413,
                        )
                    encoding = r.headers.get("content-encoding", "identity").strip()
                    if encoding.lower() != "identity":
                        raise SourceError(
                            "fetch_encoded",
                            f"the server sent {encoding}-encoded content; the file is fetched"
                            " as it is (Accept-Encoding: identity) and never decoded, since a"
                            " small encoded body can decode to far more than the size limit:"
                            " serve it without a Content-Encoding",
                        )
                    raw = r.iter_raw()  # as sent: nothing decoded
                    return save_capped(pace.watch(raw), dest, cfg.max_upload_bytes, url)
    except httpx.ReadTimeout:
        raise SourceError(
            "fetch_too_slow", f"download too slow: nothing received for {pace.window_s:g} s"
        ) from None
    except httpx.TransportError as e:  # refused, reset, cut short, a TLS failure
        raise SourceError("fetch_failed", f"GET {url}: {type(e).__name__}: {e}") from None
    raise SourceError("fetch_failed", f"{url}: more than {max_redirects} redirects")
