"""`python -m bench.normalize.memory` and `python -m bench.normalize.quality`: `[normalize]`.

memory: the peak RSS growth of a real gateway normalizing a long clip, per `[chunking]` setting
(JSON lines on stdout). quality: what the model sees with and without `[normalize]` (log-mel
differences, SNR, decode + resample CPU against vLLM's own loader and resamplers; run in the
vllm-compat venv), a Markdown table or `--json`. Neither writes a results file.

May import: bench/shared/ and the gateway (quality also vLLM).
"""
