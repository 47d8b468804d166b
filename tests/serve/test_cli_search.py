"""`vifusion search` asks the running service of its data dir (announced in
``service.json``) instead of reading the data dir itself; the live app of conftest."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from vifusion.cli import parser as cli
from vifusion.cluster.running import announce, withdraw

from .conftest import KEY


def searches(live) -> float:
    """Text searches the service has answered so far (its /metrics)."""
    text = httpx.get(f"{live.url}/metrics", timeout=30).text
    m = re.search(r'^vifusion_search_seconds_count\{kind="text"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"api_key": KEY}))
    return path


@pytest.fixture
def announced(live):
    announce(live.cfg.data_dir, "127.0.0.1", int(live.url.rsplit(":", 1)[1]))
    yield live
    withdraw(live.cfg.data_dir)


def search(live, config: Path, *args: str, capsys) -> tuple[int, list[dict], str]:
    capsys.readouterr()
    code = cli.main(
        ["search", "--data-dir", str(live.cfg.data_dir), "--config", str(config), "--json", *args]
    )
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines() if line.startswith("{")], err


def test_a_search_is_answered_by_the_running_service(announced, config, capsys):
    live = announced
    before = searches(live)
    code, rows, err = search(live, config, "--group-by", "video", "a cat", capsys=capsys)
    assert code == 0, err
    assert searches(live) == before + 1
    assert rows[0]["video_id"] == live.ids["kitchen.mp4"]
    assert len({r["video_id"] for r in rows}) == len(rows)  # grouped by video, by the service
    assert (
        rows[0]["source"] is not None and rows[0]["title"]
    )  # as without a service: where it came from


def test_the_service_and_the_data_dir_read_here_agree(live, announced, config, capsys):
    code, asked, _ = search(
        live, config, "--top-k", "150", "--group-by", "frame", "a rocket", capsys=capsys
    )
    assert code == 0 and asked
    withdraw(live.cfg.data_dir)
    before = searches(live)
    code, read, _ = search(
        live, config, "--top-k", "150", "--group-by", "frame", "a rocket", capsys=capsys
    )
    assert code == 0
    assert searches(live) == before  # not asked: no service announced
    assert [(r["video_id"], r["start_s"], r["end_s"]) for r in read] == [
        (r["video_id"], r["start_s"], r["end_s"]) for r in asked
    ]
    assert [r["score"] for r in read] == pytest.approx([r["score"] for r in asked], abs=1e-4)


def test_what_the_service_refuses_is_said_and_exits_2(announced, config, capsys):
    code, rows, err = search(
        announced, config, "a cat " * 200, capsys=capsys
    )  # over the API's 1000 characters
    assert code == 2 and not rows
    assert err.startswith("vifusion search: ") and "1000" in err, err
