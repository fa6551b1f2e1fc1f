"""`python -m bench.system --replicas 2`: two real engines behind a real vllm-router, with and
without the gateway's clip key (`[routing] affinity_headers`).

Measures per mode and wave vLLM's processings per clip (its own mm_cache counters), the
gateway's misses retried, API-server CPU per request over the replicas, requests per replica
and wall time; then the hot-clips case per router policy. Writes
bench/results/<date>-replicas.json and .md (`--name`); `python -m bench.replicas.report
RESULT.json` renders one again.

May import: bench/shared/, engine/ and the gateway. Never bench/system/ (which starts it).
"""
