"""Helpers for the dataset-tool tests: running the CLI in-process and writing JSONL rows."""

from __future__ import annotations

import base64
import contextlib
import io
import json
from pathlib import Path
from typing import Any

from gateway.__main__ import main


def run_tool(*argv: str) -> tuple[int, str, str]:
    """`audio-gateway ARGV` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as exit_:
            code = exit_.code
    return int(code or 0), out.getvalue(), err.getvalue()


def run_json(*argv: str) -> tuple[int, dict[str, Any]]:
    """A tool run with `--json`: (exit status, the parsed summary)."""
    code, out, err = run_tool(*argv, "--json")
    assert out, err
    return code, json.loads(out)


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    """One row per line; a str row is written as it is (for malformed lines)."""
    with path.open("w") as handle:
        for row in rows:
            handle.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return path


def read_jsonl(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]


def data_uri(data: bytes, mime: str = "audio/wav") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def error_examples(summary: dict[str, Any]) -> dict[str, list[tuple[int, str | None, Any]]]:
    """A summary's errors as {code: [(line, key, path as written), ...]}."""
    return {
        code: [(e["line"], e["key"], e["path"]) for e in group["examples"]]
        for code, group in summary["errors"].items()
    }
