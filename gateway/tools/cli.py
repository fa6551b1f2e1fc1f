"""The `check` and `convert` subcommands: argv -> config -> run -> summary -> exit status.

Exit status: 0 when no row has an error, 1 when some do, 2 for a usage error (a missing file,
a bad config, an output that may not be written).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from contextlib import closing
from typing import Any

from pydantic import ValidationError

from ..audio.policy import PathPolicy
from ..config import Config, ConfigError, describe_validation_error, load_config
from ..naming.object_names import is_object_url
from ..serving.logs import add_log_level_option
from .check import RowChecker, check_rows
from .convert import run_convert
from .jobs import default_jobs
from .jsonl import UsageError, existing_inputs, read_lines
from .long_audio import LongAudioTally
from .progress import Progress
from .summary import EXIT_CLEAN, EXIT_ROW_ERRORS, EXIT_USAGE, CheckSummary, print_summary

COMMANDS = ("check", "convert")


def add_commands(commands: Any) -> None:
    """Add `check` and `convert` to the `audio-gateway` subcommand parser."""
    check = commands.add_parser("check", help="check dataset rows exactly as the server would")
    check.add_argument("files", nargs="+", metavar="DATA.jsonl")
    _config_options(check)
    check.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help=(
            "concurrent file and object checks (default: 4 on local disks, 32 on network "
            "file systems or object storage)"
        ),
    )
    check.add_argument("--json", action="store_true", help="a JSON summary on stdout")

    convert = commands.add_parser(
        "convert", help="move a dataset's audio out of or into the JSONL, or rename its keys"
    )
    convert.add_argument("input", metavar="IN.jsonl")
    convert.add_argument("output", metavar="OUT.jsonl")
    direction = convert.add_mutually_exclusive_group()
    direction.add_argument(
        "--extract-to", metavar="DIR", help="inline audio -> files in DIR, rows name them by path"
    )
    direction.add_argument(
        "--inline", action="store_true", help="paths -> the body the gateway would send upstream"
    )
    convert.add_argument(
        "--to-key-prefix",
        metavar="P",
        help=(
            "write the rows' sidechannel keys under prefix P (read under [sidechannel] "
            "key_prefix); alone or with --extract-to / --inline; '' goes back to the plain keys"
        ),
    )
    _config_options(convert)
    convert.add_argument("--force", action="store_true", help="replace an existing OUT")
    convert.add_argument("--strict", action="store_true", help="stop at the first row error")
    convert.add_argument("--json", action="store_true", help="a JSON summary on stdout")


def _config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE.toml", help="TOML config, as for serve")
    parser.add_argument("--audio-root", metavar="DIR", help="override [audio] root, as for serve")
    add_log_level_option(parser, "WARNING")


def run_command(args: argparse.Namespace) -> int:
    """Run `check` or `convert`; the exit status."""
    try:
        if args.command == "check":
            return run_check(args)
        return asyncio.run(run_convert(args, tools_config(args)))
    except (UsageError, ConfigError) as exc:
        print(f"audio-gateway {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE


def tools_config(args: argparse.Namespace) -> Config:
    """`--config` with `--audio-root` over it, as `serve` reads them (a relative root is taken
    from the working directory; an `s3://bucket/prefix/` root is an object root)."""
    config = load_config(args.config)
    root = args.audio_root or None
    if root is not None and not is_object_url(root):
        root = os.path.abspath(root)
        if not os.path.isdir(root):
            raise UsageError(f"--audio-root {args.audio_root}: not a directory")
    try:
        return config.with_overrides(audio={"root": root})
    except ValidationError as exc:
        raise ConfigError(f"command-line override: {describe_validation_error(exc)}") from exc


def run_check(args: argparse.Namespace) -> int:
    files = existing_inputs(args.files)
    config = tools_config(args)
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    has_objects = bool(config.audio.object_roots())
    jobs = args.jobs or default_jobs(config.audio.effective_roots(), objects=has_objects)
    checker = RowChecker(config, PathPolicy.from_config(config.audio))
    summary = CheckSummary(
        files, audio_root=config.audio.root, long_audio=LongAudioTally(config.chunking)
    )
    started = time.perf_counter()
    total = sum(os.path.getsize(path) for path in files)
    with closing(Progress(total, "check")) as progress, closing(checker):
        for path in files:
            for row in check_rows(read_lines(path), checker, jobs):
                progress.advance(len(row.line.data))
                summary.add(row)
    summary.seconds = time.perf_counter() - started
    print_summary(summary.to_json() if args.json else summary.render())
    return EXIT_ROW_ERRORS if summary.errors.rows else EXIT_CLEAN
