"""`python -m bench.repeats`, and workload (repeats) of `python -m bench`: the same clips sent
again and again, `[splice] repeats = "data"` against `"reference"`.

Measures upstream bytes per request, the gateway's CPU per request, retries, the stub's decodes
and vLLM's front-end audio CPU (bench/vllm_frontend_cpu/ run in its own venv). Alone it prints
Markdown (`--json OUT` writes the rows); the committed runs are bench/results/2026-12-03-repeats.md
and 2026-12-03-repeats-stereo.md. Inside `python -m bench` its rows go into that result.

May import: bench/shared/ and the gateway; bench/vllm_frontend_cpu/ only as a subprocess.
"""
