"""`python -m bench.vllm_frontend_cpu BODIES.jsonl`: vLLM 0.33's front-end audio CPU for recorded
chat bodies, measured on vLLM's own code (run in the vllm-compat venv).

Measures the audio CPU per body (its cost less its text-only twin's), decoded and uuid-only
items. JSON on stdout, or `--json OUT` to a file; writes no results file. bench/repeats/ runs it
on its recorded bodies, and tests/vllm_compat/ imports its tracker.

May import: vLLM, only in run.py (flags.py answers `--help` without it); nothing of bench/.
"""
