"""`python -m bench.chunker`: what cutting long audio costs (`[chunking]`), per source format.

Measures the split's CPU per audio minute and peak RSS growth, each in a fresh process, and
soundfile's decode time of a 30 s piece as WAV and as FLAC (why pieces are WAV). Prints
Markdown; bench/results/2026-12-03-chunker.md is the committed run.

May import: bench/shared/ and the gateway.
"""
