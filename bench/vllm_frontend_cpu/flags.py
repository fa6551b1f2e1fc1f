"""The tool's flags, in a module of their own: `--help` and bad flags answer before vLLM loads
(or when it is missing)."""

from __future__ import annotations

import argparse
from pathlib import Path

DESCRIPTION = (
    "vLLM 0.33's front-end audio CPU for recorded chat bodies, measured on vLLM's own code."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.vllm_frontend_cpu", description=DESCRIPTION
    )
    parser.add_argument("bodies", type=Path, help="JSONL: one chat-completions body a line")
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="OUT",
        help="the whole report, per body included: on stdout, or written to OUT",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per body, the median counts (default 3)"
    )
    parser.add_argument(
        "--allowed-local-media-path", default=None, help="vLLM's flag, for file:// parts"
    )
    parser.add_argument(
        "--audio-backend",
        default="soundfile",
        choices=["soundfile", "pyav", "torchcodec", "auto"],
        help="vLLM's audio decoder (default soundfile; vLLM's own default is auto)",
    )
    return parser
