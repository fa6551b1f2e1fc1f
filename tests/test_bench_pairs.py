"""`python -m bench.pairs` on a tiny run (counts and shape only, no timings): it must not rot."""

from __future__ import annotations

import json

import pytest

from bench.pairs.run import main
from bench.shared.servers import REPO_ROOT


def test_two_rounds_against_the_paced_stub(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--base", str(REPO_ROOT), "--rounds", "2", "--seconds", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["upstream"], result["errors"], result["waves_per_cell"]) == ("paced stub", 0, 2)
    for kind in ("first", "again"):
        row = result[kind]
        assert len(row["rounds"]["base"]) == len(row["rounds"]["head"]) == 2
        assert all(value > 0 for value in row["rounds"]["base"] + row["rounds"]["head"])
        assert row["api_server_ms"] is None
