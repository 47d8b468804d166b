"""The soak (benchmarks/soak.py --quick): concurrent ingest under a closed-loop search load,
on a Ray and a Serve app of its own. Slow: `make test-all`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_ingest_under_search_load_answers_everything_and_holds_its_memory():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["errors"] == 0, report["requests"]
    assert report["ingest"] == {"ready": report["videos"], "failed": 0}
    assert report["searches"] > 100
    # no actor grows by half while the load runs (a leak of a few MB a second would)
    assert report["rss_growth_max"] < 1.5, report["rss"]
    assert out.returncode == 0
