"""`python -m bench.longform`: long audio against a 30 s model, the gateway's `[chunking]`
against NeMo Skills' client-side windows and against no split at all.

Measures wall time per row and how much of each clip the model heard. Writes
bench/results/<date>-longform.json and .md (2026-12-03-longform.md is the committed run).

May import: bench/shared/ and the gateway.
"""
