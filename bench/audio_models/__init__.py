"""`python -m bench.audio_models`: what the gateway + vLLM pair saves vLLM's API server, for
each audio chat architecture the real engine serves here (the tiny Qwen2-Audio, Voxtral, Audio
Flamingo 3 and GLM-ASR of engine/models.py).

One vLLM server at a time; per model, waves of 16 concurrent seeds of a new clip, vLLM alone
with data URIs against the gateway by reference (where the model takes no uuid-only parts,
Voxtral: data with the clip's `uuid`), interleaved wave by wave. Per request: the CPU of vLLM's
API-server process, of all its processes and of the gateway, and vLLM's processings a wave (its
processor cache's queries less hits). Writes bench/results/<date>-audio-models.json and .md
(`--name`).

May import: bench/shared/, engine/ and the gateway.
"""
