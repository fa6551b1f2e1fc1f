"""The TOML config and the CLI: the example file loads, bad keys and values are named, and the
two commands (`serve`, `demo`) behave as documented."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gateway.config import Config, ConfigError, ModelConfig, load_config, validate_config
from gateway.serving.tuning import MALLOC_TUNABLES, TUNED_MARKER

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "config.example.toml"
CLI_TIMEOUT_SECONDS = 30
DEMO_TIMEOUT_SECONDS = 60


def run_cli(*args: str, timeout: float = CLI_TIMEOUT_SECONDS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def flat_keys(data: dict[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in data.items():
        if isinstance(value, dict):
            keys |= flat_keys(value, f"{prefix}{key}.")
        else:
            keys.add(f"{prefix}{key}")
    return keys


def config_error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as raised:
        validate_config(data)
    return str(raised.value)


class TestExampleFile:
    def test_example_loads_and_shows_the_defaults(self) -> None:
        assert load_config(EXAMPLE) == Config()

    def test_example_documents_every_key(self) -> None:
        with EXAMPLE.open("rb") as handle:
            documented = flat_keys(tomllib.load(handle))
        assert documented == flat_keys(Config().model_dump())

    def test_example_models_table_names_every_key_and_loads(self) -> None:
        """The commented `[models."..."]` example, uncommented, is a valid table of every key."""
        lines = EXAMPLE.read_text().split('#[models."', 1)[1].splitlines()
        table = ['[models."' + lines[0]]
        table += [line[1:] for line in lines[1:] if re.match(r"#[a-z_]+\s*=", line)]
        data = tomllib.loads("\n".join(table))
        (name,) = data["models"]
        assert set(data["models"][name]) == set(ModelConfig.model_fields)
        assert validate_config(data).models[name].architecture

    def test_required_key_names_and_defaults(self) -> None:
        config = load_config(EXAMPLE)
        assert (config.server.host, config.server.port) == ("127.0.0.1", 8080)
        assert config.upstream.url == "http://127.0.0.1:8000"
        assert (config.audio.root, config.audio.allowed_roots) == ("", [])
        assert (config.audio.max_file_bytes, config.audio.max_clips) == (26_214_400, 16)
        assert config.cache.max_bytes == 1_073_741_824
        assert config.server.max_body_bytes == 64 * 1024**2


class TestValidation:
    @pytest.mark.parametrize(
        ("data", "key"),
        [
            ({"server": {"hots": "0.0.0.0"}}, "server.hots"),
            ({"audio": {"max_file_size": 10}}, "audio.max_file_size"),
            ({"upstream": {"url": "http://x:1", "timeout": 3}}, "upstream.timeout"),
            ({"bogus_section": {}}, "bogus_section"),
        ],
    )
    def test_unknown_key_is_an_error_naming_it(self, data: dict[str, Any], key: str) -> None:
        message = config_error(data)
        assert f"{key}: unknown key" in message

    @pytest.mark.parametrize(
        ("data", "key", "reason"),
        [
            ({"server": {"port": "eighty"}}, "server.port", "integer"),
            ({"server": {"port": 70000}}, "server.port", "65535"),
            ({"upstream": {"url": "ftp://vllm:8000"}}, "upstream.url", "http(s) origin"),
            ({"upstream": {"read_timeout_seconds": 0}}, "upstream.read_timeout_seconds", "0"),
            ({"audio": {"root": "relative/dir"}}, "audio.root", "absolute"),
            ({"audio": {"allowed_roots": ["rel"]}}, "audio.allowed_roots", "absolute"),
            ({"audio": {"max_file_bytes": "25 furlongs"}}, "audio.max_file_bytes", "not a size"),
            ({"audio": {"max_file_bytes": -1}}, "audio.max_file_bytes", "0"),
            ({"audio": {"max_clips": 0}}, "audio.max_clips", "1"),
            ({"cache": {"max_bytes": "lots"}}, "cache.max_bytes", "not a size"),
            ({"splice": {"mode": "url"}}, "splice.mode", "data_uri"),
            ({"splice": {"repeats": "uuid"}}, "splice.repeats", "'data' or 'reference'"),
            ({"splice": {"reference_max_clips": 0}}, "splice.reference_max_clips", "1"),
            ({"splice": {"reference_wait_ms": -1}}, "splice.reference_wait_ms", "0"),
            ({"splice": {"reference_wait_ms": 1.5}}, "splice.reference_wait_ms", "integer"),
        ],
    )
    def test_bad_value_names_the_key_and_reason(
        self, data: dict[str, Any], key: str, reason: str
    ) -> None:
        message = config_error(data)
        assert f"{key}: " in message
        assert reason in message.split(f"{key}: ", 1)[1]

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("25MiB", 25 * 1024**2),
            ("64MB", 64_000_000),
            ("1GiB", 1024**3),
            ("512 KiB", 512 * 1024),
            ("1.5MiB", 1_572_864),
            ("100", 100),
            ("100b", 100),
            (26214400, 26214400),
        ],
    )
    def test_sizes_may_be_strings(self, text: str | int, expected: int) -> None:
        config = validate_config({"audio": {"max_file_bytes": text}, "cache": {"max_bytes": text}})
        assert (config.audio.max_file_bytes, config.cache.max_bytes) == (expected, expected)

    def test_size_strings_load_from_toml(self, tmp_path: Path) -> None:
        path = tmp_path / "sizes.toml"
        path.write_text('[server]\nmax_body_bytes = "2MiB"\n[audio]\nmax_file_bytes = "25MiB"\n')
        config = load_config(path)
        assert (config.server.max_body_bytes, config.audio.max_file_bytes) == (
            2 * 1024**2,
            26_214_400,
        )

    def test_invalid_toml_is_a_config_error(self, tmp_path: Path) -> None:
        path = tmp_path / "broken.toml"
        path.write_text("[server\nport = 1\n")
        with pytest.raises(ConfigError, match="not valid TOML"):
            load_config(path)

    def test_missing_file_is_a_config_error(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="cannot read config"):
            load_config(tmp_path / "absent.toml")

    def test_config_is_frozen(self) -> None:
        config = Config()
        with pytest.raises(ValueError, match="frozen"):
            config.server.port = 1  # type: ignore[misc]


class TestCommandLine:
    def test_serve_with_bad_config_exits_nonzero_naming_the_key(self, tmp_path: Path) -> None:
        bad = tmp_path / "bad.toml"
        bad.write_text('[audio]\nmax_clips = 0\nroot_dir = "/data"\n')
        result = run_cli("serve", "--config", str(bad))
        assert result.returncode != 0
        assert "audio.root_dir: unknown key" in result.stderr
        assert "audio.max_clips" in result.stderr
        assert str(bad) in result.stderr

    def test_serve_with_bad_override_exits_nonzero_naming_the_key(self) -> None:
        result = run_cli("serve", "--config", str(EXAMPLE), "--upstream", "vllm:8000")
        assert result.returncode != 0
        assert "upstream.url" in result.stderr

    def test_serve_runs_with_overrides(self, tmp_path: Path) -> None:
        port = free_port()
        process = start_gateway(
            "serve",
            *("--config", str(EXAMPLE), "--port", f"{port}"),
            *("--upstream", "http://127.0.0.1:9", "--audio-root", str(tmp_path)),
        )
        try:
            health = wait_for_health(f"http://127.0.0.1:{port}/gateway/health", process)
            assert health["status"] == "ok"
            assert health["upstream"] == "http://127.0.0.1:9"
        finally:
            process.terminate()
            try:
                process.wait(timeout=CLI_TIMEOUT_SECONDS)
            finally:
                if process.stderr is not None:
                    process.stderr.close()

    @pytest.mark.parametrize("tuned", [True, False])
    def test_serve_warns_about_file_url_and_tunes_malloc(self, tmp_path: Path, tuned: bool) -> None:
        """file_url mode: a start-up warning that vLLM's --allowed-local-media-path cannot be
        verified from here; malloc_tuning: the process re-executes with the glibc tunables."""
        config = tmp_path / "file_url.toml"
        config.write_text(
            f"[server]\nmalloc_tuning = {str(tuned).lower()}\n"
            f'[audio]\nroot = "{tmp_path}"\n[splice]\nmode = "file_url"\n'
        )
        port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", TUNED_MARKER)}
        process = start_gateway("serve", "--config", str(config), "--port", f"{port}", env=env)
        try:
            wait_for_health(f"http://127.0.0.1:{port}/gateway/health", process)
            # glibc cuts GLIBC_TUNABLES up in place while parsing it, so look for each tunable.
            environ = Path(f"/proc/{process.pid}/environ").read_bytes()
        finally:
            process.terminate()
            _, stderr = process.communicate(timeout=CLI_TIMEOUT_SECONDS)
        assert "--allowed-local-media-path" in stderr.decode()
        assert str(tmp_path) in stderr.decode()
        assert all(tunable.encode() in environ for tunable in MALLOC_TUNABLES) is tuned
        assert (f"{TUNED_MARKER}=1".encode() in environ) is tuned

    def test_demo_keep_running_leaves_the_gateway_up(self) -> None:
        port = free_port()
        process = start_gateway(
            "demo", "--keep-running", "--port", f"{port}", stdout=subprocess.PIPE
        )
        try:
            wait_for_health(f"http://127.0.0.1:{port}/gateway/health", process)
            body = json.dumps(
                {"model": "demo", "messages": [], "metadata": {"audio_path": "tone_440hz.wav"}}
            ).encode()
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                data=body,
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=CLI_TIMEOUT_SECONDS) as response:
                answer = json.loads(response.read())
            assert [clip["container"] for clip in answer["stub"]["clips"]] == ["wav"]
        finally:
            process.terminate()
            stdout, _ = process.communicate(timeout=CLI_TIMEOUT_SECONDS)
        assert process.returncode == 0  # SIGTERM shuts both servers down cleanly
        assert b"curl" in stdout

    def test_demo_runs_end_to_end(self) -> None:
        script = Path(sys.executable).with_name("audio-gateway")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "gateway"]
        result = subprocess.run(
            [*command, "demo"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=DEMO_TIMEOUT_SECONDS,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        for form in ("metadata.audio_path ", "metadata.audio_paths ", "metadata.audio_data "):
            assert f"{form}-> HTTP 200" in result.stdout
        assert "sha256 matches" in result.stdout
        assert "NO MATCHING FILE" not in result.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_gateway(
    *args: str, env: dict[str, str] | None = None, stdout: int = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    """`python -m gateway ARGS` in the background, its stderr kept for failure messages."""
    return subprocess.Popen(
        [sys.executable, "-m", "gateway", *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=stdout,
        stderr=subprocess.PIPE,
    )


def wait_for_health(url: str, process: subprocess.Popen[bytes]) -> dict[str, Any]:
    deadline = time.monotonic() + CLI_TIMEOUT_SECONDS
    while True:
        if process.poll() is not None:
            stderr = process.stderr.read().decode() if process.stderr else ""
            raise AssertionError(f"serve exited with {process.returncode}: {stderr}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return json.loads(response.read())
        except OSError:
            assert time.monotonic() < deadline, "the gateway never answered /gateway/health"
            time.sleep(0.05)


class TestRuntimeKeys:
    """`[server] drain_seconds`, `shutdown_timeout_seconds` and `log_format` (issue 18)."""

    def test_defaults(self) -> None:
        server = Config().server
        assert (server.drain_seconds, server.shutdown_timeout_seconds) == (0.0, 60.0)
        assert server.log_format == "text"

    def test_numbers_load_from_toml(self, tmp_path: Path) -> None:
        path = tmp_path / "drain.toml"
        path.write_text(
            '[server]\ndrain_seconds = 5\nshutdown_timeout_seconds = 2.5\nlog_format = "json"\n'
        )
        server = load_config(path).server
        assert (server.drain_seconds, server.shutdown_timeout_seconds) == (5.0, 2.5)
        assert server.log_format == "json"

    @pytest.mark.parametrize("key", ["drain_seconds", "shutdown_timeout_seconds"])
    @pytest.mark.parametrize(
        ("value", "reason"),
        [
            (-1, "greater than or equal to 0"),
            (-0.5, "greater than or equal to 0"),
            ("5", "valid number"),
            ("5s", "valid number"),
            (True, "valid number"),
            ([5], "valid number"),
            (float("inf"), "finite number"),
            (float("nan"), "finite number"),
        ],
    )
    def test_bad_seconds_name_the_key(self, key: str, value: object, reason: str) -> None:
        message = config_error({"server": {key: value}})
        assert f"server.{key}: " in message
        assert reason in message.split(f"server.{key}: ", 1)[1]

    def test_bad_log_format_names_the_key(self) -> None:
        message = config_error({"server": {"log_format": "yaml"}})
        assert "server.log_format: " in message
        assert "'text' or 'json'" in message

    def test_serve_refuses_a_negative_drain_naming_the_key(self, tmp_path: Path) -> None:
        bad = tmp_path / "drain.toml"
        bad.write_text("[server]\nshutdown_timeout_seconds = -3\n")
        result = run_cli("serve", "--config", str(bad))
        assert result.returncode == 2
        assert "server.shutdown_timeout_seconds" in result.stderr

    def test_log_format_flag_accepts_only_text_or_json(self) -> None:
        result = run_cli("serve", "--log-format", "yaml")
        assert result.returncode == 2
        assert "--log-format" in result.stderr
