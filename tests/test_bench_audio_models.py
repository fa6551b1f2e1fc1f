"""`python -m bench.audio_models` (its run needs the real engine: documented, not run here): what
each mode sends, which parts the gateway is told to send per model, and the table's shape."""

from __future__ import annotations

import base64
from pathlib import Path

from bench.audio_models.run import MODELS, chat_body, markdown, write_clip


def test_vllm_alone_gets_a_data_uri_and_the_gateway_a_path(tmp_path: Path) -> None:
    clip = write_clip(tmp_path, 1, 0.5)
    model = MODELS["glm-asr"]
    alone = chat_body(model, clip, "vllm-direct")
    part = alone["messages"][0]["content"][0]
    assert part["type"] == "audio_url"
    assert base64.b64decode(part["audio_url"]["url"].split(",", 1)[1]) == clip.read_bytes()
    pair = chat_body(model, clip, "gateway")
    assert pair["metadata"] == {"audio_path": clip.name}
    assert [p["type"] for p in pair["messages"][0]["content"]] == ["text"]
    assert alone["model"] == pair["model"] == "tiny-glm-asr"


def test_one_row_per_architecture() -> None:
    cell = {"api_server_cpu_ms": 4.0, "vllm_cpu_ms": 9.0, "gateway_cpu_ms": 0.5,
            "processings_per_wave": 1.0, "errors": 0,
            "gateway_parts_per_wave": {"data": 1.0, "reference": 15.0}}  # fmt: skip
    runs = [
        {"architecture": m.architecture,
         "modes": {"vllm-direct": cell, "gateway": {**cell, "api_server_cpu_ms": 2.0}}}
        for m in MODELS.values()
    ]  # fmt: skip
    result = {"date": "2026-12-04", "waves": 3, "seconds": 30.0, "command": "x", "runs": runs}
    rows = [line for line in markdown(result).splitlines() if line.startswith("| ")][2:]
    assert [row.split(" | ")[0][2:] for row in rows] == [m.architecture for m in MODELS.values()]
    assert all(" | 1 data + 15 references | 4.00 | 2.00 | 0.50 | 0.50 | 0.62 | 1 / 1 | 0 |" in row
               for row in rows)  # fmt: skip
