"""`vifusion hooks add | list | remove` on a data dir, without a service: ingest's URL rules,
the secret printed once and never listed."""

from __future__ import annotations

import json

from tests._helpers import run_cli


def test_hooks_add_list_remove(capsys, tmp_path, monkeypatch):
    data = str(tmp_path / "data")
    (tmp_path / "data").mkdir()
    url = "http://127.0.0.1:9/hook"
    code, _, err = run_cli(capsys, "hooks", "add", url, "--data-dir", data)
    assert code == 2 and "127.0.0.1" in err and "private" in err  # refused without the allowance

    monkeypatch.setenv("VIFUSION_ALLOW_PRIVATE_URLS", "true")
    code, out, _ = run_cli(
        capsys,
        "hooks",
        "add",
        url,
        "--event",
        "job.failed",
        "--collection",
        "news",
        "--data-dir",
        data,
    )
    assert code == 0
    secret = out.strip().splitlines()[-1]
    assert secret.startswith("whsec_")

    code, out, _ = run_cli(capsys, "hooks", "list", "--json", "--data-dir", data)
    [listed] = json.loads(out)
    assert (listed["url"], listed["events"], listed["collection"]) == (url, ["job.failed"], "news")
    assert listed["pending"] == 0 and listed["last"] is None
    code, out, _ = run_cli(capsys, "hooks", "list", "--data-dir", data)
    assert listed["id"] in out and secret not in out

    assert run_cli(capsys, "hooks", "remove", listed["id"], "--data-dir", data)[0] == 0
    code, _, err = run_cli(capsys, "hooks", "remove", listed["id"], "--data-dir", data)
    assert code == 1 and "no webhook" in err
