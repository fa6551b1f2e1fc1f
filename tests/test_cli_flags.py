"""The command lines people type first: `serve --log-level` shows its choices and default in
`--help` and takes any case, a bad level is a clean exit 2 naming the flag (not a traceback);
the stub upstream says where it listens once it does, and its `--help` shows every default."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from gateway.__main__ import build_parser
from gateway.serving.logs import LOG_LEVELS

REPO = Path(__file__).resolve().parent.parent
STARTUP_SECONDS = 60  # a busy machine


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("command", ["serve", "demo", "check", "convert"])
def test_log_level_help_shows_its_choices_and_default(command: str) -> None:
    done = run("-m", "gateway", command, "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "--log-level LEVEL" in text
    assert ", ".join(LOG_LEVELS) in text
    assert "(default: INFO)" in text if command == "serve" else "(default: WARNING)" in text


def test_a_bad_log_level_is_a_clean_usage_error() -> None:
    done = run("-m", "gateway", "serve", "--log-level", "LOUD")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "argument --log-level: invalid choice: 'LOUD'" in done.stderr
    assert done.stderr.count("\n") <= 8  # usage and the one error line


@pytest.mark.parametrize("given", ["debug", "Warning", "ERROR"])
def test_a_level_in_any_case_is_taken(given: str) -> None:
    args = build_parser().parse_args(["serve", "--log-level", given])
    assert args.log_level == given.upper()


def test_the_stubs_help_shows_defaults() -> None:
    done = run("-m", "gateway.stub_upstream", "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for shown in ("--host HOST", "(default: 127.0.0.1)", "--port PORT", "(default: 8000)",
                  "--window-mode {truncate,refuse}", "(default: truncate)"):  # fmt: skip
        assert shown in text, shown


def test_the_stub_says_where_it_listens_once_it_does() -> None:
    port = free_port()
    stub = subprocess.Popen(
        [sys.executable, "-m", "gateway.stub_upstream", "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert stub.stdout is not None
        line = stub.stdout.readline()  # blocks until the stub prints it (or exits)
        assert line.strip().endswith(f"listening on http://127.0.0.1:{port}"), line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
            assert answer.status == 200  # it listened before it said so
    finally:
        stub.terminate()
        stub.communicate(timeout=STARTUP_SECONDS)
