"""`python -m bench.audio_models`: what the gateway + vLLM pair saves vLLM's API server, for
each audio chat architecture the real engine serves here (the tiny Qwen2-Audio, Voxtral, Audio
Flamingo 3 and GLM-ASR of engine/models.py).

One vLLM server at a time; per model, waves of 16 concurrent seeds of a new clip, vLLM alone
with data URIs against the gateway with `repeats = "reference"` (it places each model by
vLLM's /v1/models, and sends one that takes no uuid-only parts, Voxtral, every clip's data with
its `uuid`), interleaved wave by wave. Per request: the CPU of vLLM's API-server process, of all
its processes and of the gateway; per wave, vLLM's processings (its processor cache's queries
less hits) and the parts the gateway sent (its own metrics). Writes
bench/results/<date>-audio-models.json and .md (`--name`).

May import: bench/shared/, engine/ and the gateway.
"""
