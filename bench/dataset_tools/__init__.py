"""`python -m bench.dataset_tools`: the dataset commands (`audio-gateway check` and `convert
--extract-to`) on synthetic datasets, run as a user runs them.

Measures wall time, rows/s and the JSONL size before and after. Prints Markdown; writes no
results file (bench/README.md quotes the last run).

May import: nothing of bench/ (the commands run as subprocesses).
"""
