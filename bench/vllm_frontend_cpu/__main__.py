"""`python -m bench.vllm_frontend_cpu BODIES.jsonl`: see run.py. The flags are read before
run.py imports vLLM, so `--help` and bad flags answer without it."""

from __future__ import annotations

import sys

from bench.vllm_frontend_cpu.flags import build_parser

build_parser().parse_args()

from bench.vllm_frontend_cpu.run import main  # noqa: E402 - after the flags, on purpose

sys.exit(main())
