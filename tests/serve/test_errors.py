"""The error mapping on its own: what a handler raises becomes the status and JSON a client
relies on (the live service cannot be made to fill its disk in the shared session)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from serve._errors import install
from vifusion.service import StorageError


def test_a_full_or_read_only_data_dir_is_a_507_that_says_so():
    api = FastAPI()
    install(api)

    @api.post("/full")
    def full() -> None:
        raise StorageError("full", "the data dir /d is full: the upload was not stored")

    @api.post("/ro")
    def read_only() -> None:
        raise StorageError("read-only", "the data dir /d is read-only: the video was not queued")

    with TestClient(api) as client:
        for path, said in (("/full", "is full"), ("/ro", "is read-only")):
            r = client.post(path)
            assert r.status_code == 507
            assert (
                r.json()["error"]["code"] == "insufficient_storage"
                and said in r.json()["error"]["message"]
            )
