"""The gateway's bodies judged by vLLM's own code (0.33 and 0.34), in process, no engine.

`.ci/vllm-compat` runs these modules once per vLLM version, each in a venv of its own; without
`vllm` they skip (see versions.py). conftest.py holds vLLM's request path as fixtures.
"""
