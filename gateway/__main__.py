"""The `audio-gateway` command: argv -> config -> logging -> run (serve, demo, check, convert)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from pydantic import ValidationError

from .app import create_app
from .audio.roots import describe_roots
from .config import Config, ConfigError, describe_validation_error, load_config
from .lifecycle import serve_app
from .serving.logs import add_log_level_option, configure_logging
from .serving.tuning import event_loop_factory, reexec_with_malloc_tuning, tune_garbage_collector
from .tools.cli import COMMANDS as TOOL_COMMANDS
from .tools.cli import add_commands as add_tool_commands
from .tools.cli import run_command as run_tool_command
from .workers.supervisor import run_workers

log = logging.getLogger("gateway")
LOG_FORMATS = ("text", "json")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="audio-gateway",
        description="A sidecar in front of vLLM that turns file-path audio into audio parts.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gateway in front of an upstream")
    serve.add_argument("--config", metavar="FILE.toml", help="TOML config (default: built-in)")
    serve.add_argument("--host", help="override [server] host")
    serve.add_argument("--port", type=int, help="override [server] port")
    serve.add_argument("--upstream", metavar="URL", help="override [upstream] url")
    serve.add_argument("--audio-root", metavar="DIR", help="override [audio] root")
    serve.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY",
        help="accept this key on /v1 (repeatable; adds to [server] api_keys and "
        "AUDIO_GATEWAY_API_KEYS, which keeps it out of the process list)",
    )
    add_log_level_option(serve, "INFO")
    serve.add_argument("--log-format", choices=LOG_FORMATS, help="override [server] log_format")

    demo = commands.add_parser(
        "demo", help="run the gateway with a built-in stub upstream and show it working"
    )
    demo.add_argument("--port", type=int, default=0, help="gateway port (default: a free one)")
    demo.add_argument(
        "--keep-running", action="store_true", help="leave both servers up for trying curl by hand"
    )
    add_log_level_option(demo, "WARNING")
    demo.add_argument("--log-format", choices=LOG_FORMATS, default="text")
    add_tool_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.command != "serve":
        configure_logging(args.log_level, getattr(args, "log_format", None) or "text")
    if args.command == "demo":
        from .demo import run_demo

        sys.exit(asyncio.run(run_demo(port=args.port, keep_running=args.keep_running)))
    if args.command in TOOL_COMMANDS:
        sys.exit(run_tool_command(args))
    try:
        config = serve_config(args)
    except ConfigError as exc:
        print(f"audio-gateway: {exc}", file=sys.stderr)
        sys.exit(2)
    configure_logging(args.log_level, config.server.log_format)
    if config.server.malloc_tuning:
        reexec_with_malloc_tuning(argv)
    try:
        serve(config, args.log_level)
    except ConfigError as exc:  # found at start-up, e.g. an unreadable upstream.ca_file
        print(f"audio-gateway: {exc}", file=sys.stderr)
        sys.exit(2)


def serve_config(args: argparse.Namespace) -> Config:
    """The file, then the environment's secrets, then the flags (`--api-key` adds keys)."""
    config = load_config(args.config)
    try:
        config = config.with_environment(os.environ)
    except ValidationError as exc:
        raise ConfigError(f"environment: {describe_validation_error(exc)}") from exc
    api_keys = [*config.server.api_keys, *args.api_key] if args.api_key else None
    try:
        return config.with_overrides(
            server={
                "host": args.host,
                "port": args.port,
                "api_keys": api_keys,
                "log_format": args.log_format,
            },
            upstream={"url": args.upstream},
            audio={"root": args.audio_root},
        )
    except ValidationError as exc:
        raise ConfigError(f"command-line override: {describe_validation_error(exc)}") from exc


def serve(config: Config, log_level: str = "INFO") -> None:
    if config.splice.mode == "file_url":
        roots = config.audio.effective_roots()
        log.warning(
            "splice.mode = 'file_url': vLLM must run with --allowed-local-media-path covering %s; "
            "the gateway cannot verify that from here",
            roots or "(no roots configured)",
        )
    if config.splice.remote == "presigned_url" and config.audio.object_roots():
        log.warning(
            "splice.remote = 'presigned_url': vLLM fetches s3:// clips itself; it needs network "
            "reach to the store, the store's host in --allowed-media-domains when that is set, "
            "and a VLLM_AUDIO_FETCH_TIMEOUT long enough for the clips"
        )
    log.info(
        "audio-gateway on http://%s:%d%s -> %s; %s; %s",
        config.server.host,
        config.server.port,
        f" ({config.server.workers} workers)" if config.server.workers > 1 else "",
        config.upstream.url,
        describe_roots(config.audio),
        f"{len(config.server.api_keys)} API key(s) required on /v1"
        if config.server.api_keys
        else "no API keys: /v1 is open",
    )
    if config.server.workers > 1:
        sys.exit(run_workers(config, log_level))
    tune_garbage_collector()
    with asyncio.Runner(loop_factory=event_loop_factory(config.server.event_loop)) as runner:
        runner.run(serve_app(create_app(config), config.server))


if __name__ == "__main__":
    main()
