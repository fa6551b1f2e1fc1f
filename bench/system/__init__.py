"""`python -m bench.system`: what the gateway + vLLM pair costs against vLLM alone, on the real
engine (vLLM 0.32's CPU build, the tiny Qwen2-Audio of engine/models.py).

Measures per request the CPU of vLLM's API server, of all its processes and of the gateway,
wall p50/p95 and the bytes vLLM received, modes interleaved wave by wave; the gateway's CPU is
split into a uuid-only request and the request carrying the clip (split.py). Writes
bench/results/<date>-system.json, .md and .png (`--name`); `python -m bench.system.report
RESULT.json` renders one again. `--replicas 2` runs bench/replicas/ instead.

May import: bench/shared/, bench/replicas/ (for `--replicas`), engine/ and the gateway.
"""
