"""A small typed client for the REST API.

Example, against ``vifusion serve`` on its default port and data dir::

    from pathlib import Path

    from vifusion.client import Client

    key = Path("vifusion-data/api_key").read_text().strip()  # or VIFUSION_API_KEY where set
    with Client("http://127.0.0.1:8000", key) as vf:
        job = vf.upload("holiday.mp4", title="Holiday")
        vf.wait(job["job_id"])
        for moment in vf.search("a dog on a beach", top_k=5):
            print(moment["title"], moment["start_s"], moment["score"])

Every method raises ``ApiError`` (with the server's error code and message) on a non-2xx answer.
"""

from __future__ import annotations

import json
import ssl
import time
from pathlib import Path
from typing import Any

import httpx

__all__ = ["ApiError", "Client"]


class ApiError(RuntimeError):
    """A non-2xx answer: ``status``, the server's ``code`` and ``message``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class Client:
    """The API at ``url`` with API key ``key``. Use as a context manager, or ``close()`` it."""

    def __init__(
        self,
        url: str,
        key: str,
        timeout_s: float = 120.0,
        trust_env: bool = True,
        verify: ssl.SSLContext | str | bool = True,
    ) -> None:
        """``trust_env=False`` ignores proxy variables (a proxy must not sit in front of loopback);
        ``verify``: how an https URL's certificate is checked (httpx's ``verify``: a CA file,
        a context, True for the system's CAs)."""
        self._http = httpx.Client(
            base_url=url.rstrip("/"),
            timeout=timeout_s,
            trust_env=trust_env,
            verify=verify,
            headers={"Authorization": f"Bearer {key}"},
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        r = self._http.request(method, path, **kwargs)
        if r.status_code >= 400:
            try:
                err = r.json()["error"]
                raise ApiError(r.status_code, err["code"], err["message"])
            except (ValueError, KeyError, TypeError):
                raise ApiError(r.status_code, "http_error", r.text[:500]) from None
        return (
            r.json()
            if r.content and r.headers.get("content-type", "").startswith("application/json")
            else r
        )

    def health(self) -> dict:
        """``GET /healthz`` (no key needed): ``status``, ``shards``, ``vectors`` (frame vectors held)."""
        return self._call("GET", "/healthz")

    # -- videos ------------------------------------------------------------------------

    def upload(
        self,
        path: str | Path,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        collection: str | None = None,
    ) -> dict:
        """Upload a video file (into ``collection``, else ``default``); returns ``{video_id,
        job_id, status}``."""
        path = Path(path)
        data: dict[str, str] = {}
        if title is not None:
            data["title"] = title
        if metadata is not None:
            data["metadata"] = json.dumps(metadata)
        if collection is not None:
            data["collection"] = collection
        with path.open("rb") as f:
            return self._call("POST", "/v1/videos", files={"file": (path.name, f)}, data=data)

    def add_uri(
        self,
        uri: str,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        collection: str | None = None,
    ) -> dict:
        """Index a ``file://`` path under the service's ingest roots, or an http(s) URL (into
        ``collection``, else ``default``)."""
        body: dict[str, Any] = {"uri": uri}
        if title is not None:
            body["title"] = title
        if metadata is not None:
            body["metadata"] = metadata
        if collection is not None:
            body["collection"] = collection
        return self._call("POST", "/v1/videos", json=body)

    def job(self, job_id: str) -> dict:
        return self._call("GET", f"/v1/jobs/{job_id}")

    def wait(self, job_id: str, timeout_s: float = 600.0, poll_s: float = 0.5) -> dict:
        """Poll a job until it is ``ready`` or ``failed``; return it. TimeoutError past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if job["status"] in ("ready", "failed"):
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['status']} after {timeout_s} s")
            time.sleep(poll_s)

    def videos(self, limit: int = 50) -> list[dict]:
        """Every video, following the cursor (``limit`` per page)."""
        out: list[dict] = []
        cursor = None
        while True:
            page = self._call(
                "GET",
                "/v1/videos",
                params={"limit": limit, **({"cursor": cursor} if cursor else {})},
            )
            out.extend(page["videos"])
            cursor = page["next_cursor"]
            if cursor is None:
                return out

    def video(self, video_id: int) -> dict:
        return self._call("GET", f"/v1/videos/{video_id}")

    def delete(self, video_id: int) -> None:
        self._call("DELETE", f"/v1/videos/{video_id}")

    def collections(self) -> list[dict]:
        """The collections this key may see: ``[{"name", "videos", "frames"}]``."""
        return self._call("GET", "/v1/collections")["collections"]

    def delete_collection(self, name: str) -> None:
        """Delete a collection with its videos, their vectors and media (an admin key)."""
        self._call("DELETE", f"/v1/collections/{name}")

    def reindex(self, visual_model: str | None = None) -> dict:
        """Embed the library again with the service's configured visual model, searches
        answering meanwhile (an admin key): the state, as ``reindex_state``. ApiError 409
        ``reindex_running``, ``model_unavailable``, or ``model_not_configured`` where
        ``visual_model`` is given and is not the configured one."""
        body = {} if visual_model is None else {"visual_model": visual_model}
        return self._call("POST", "/v1/reindex", json=body)

    def reindex_state(self) -> dict:
        """``{"state": idle|embedding|switching|ready|failed, "index_model",
        "configured_model", "videos_done", "videos_total", "error", ...}``."""
        return self._call("GET", "/v1/reindex")

    def retry(self, video_id: int) -> dict:
        """Index a failed video again: ``{"video_id", "job_id", "status": "queued"}`` (``wait``
        on the job). ApiError 409 ``not_failed`` if it has not failed, 410 ``source_gone`` if
        its file is no longer there."""
        return self._call("POST", f"/v1/videos/{video_id}/retry")

    def transcript(self, video_id: int, kind: str = "speech", vtt: bool = False) -> dict | str:
        """What a video says (``kind`` "speech"), shows written ("screen") or both ("all"):
        ``{"video_id", "segments": [{"kind", "start_s", "end_s", "text"}]}``, or with ``vtt``
        the WebVTT text."""
        r = self._call(
            "GET",
            f"/v1/videos/{video_id}/transcript",
            params={"kind": kind, "format": "vtt" if vtt else "json"},
        )
        return r.text if vtt else r

    # -- search ------------------------------------------------------------------------

    def search(
        self,
        text: str | None = None,
        *,
        image: str | Path | None = None,
        clip: str | Path | None = None,
        top_k: int = 10,
        min_relative_score: float | None = None,
        **options: Any,
    ) -> list[dict]:
        """Moments for a text query, an image file or a clip file (exactly one), best first.
        ``min_relative_score``: drop moments under this fraction of the best one's score (0:
        keep all; None: the service's setting). ``options``: the API's other search options
        (``modalities``, ``group_by``, ``filter``, ``min_score``...)."""
        if min_relative_score is not None:
            options["min_relative_score"] = min_relative_score
        return self.search_page(text, image=image, clip=clip, top_k=top_k, **options)["results"]

    def search_page(
        self,
        text: str | None = None,
        *,
        image: str | Path | None = None,
        clip: str | Path | None = None,
        top_k: int = 10,
        **options: Any,
    ) -> dict:
        """The whole answer: ``results``, ``next_cursor``, ``partial``, ``missing_shards``, ``took_ms``."""
        if sum(q is not None for q in (text, image, clip)) != 1:
            raise ValueError("give exactly one of text, image, clip")
        if text is not None:
            return self._call("POST", "/v1/search", json={"text": text, "top_k": top_k, **options})
        path = Path(image if image is not None else clip)
        fields = {
            k: json.dumps(v)
            if isinstance(v, dict)
            else ",".join(v)
            if isinstance(v, list | tuple)
            else str(v)
            for k, v in options.items()
        }
        with path.open("rb") as f:
            return self._call(
                "POST",
                "/v1/search",
                files={"image" if image is not None else "clip": (path.name, f)},
                data={"top_k": str(top_k), **fields},
            )
