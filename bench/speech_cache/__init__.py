"""`python -m bench.speech_cache`: why the cache keeps raw bytes for the speech-to-text routes.

Measures what a hit would cost if it decoded cached base64 instead, and the entry sizes, per clip
size. Prints Markdown; writes no results file.

May import: the gateway.
"""
