"""`python -m bench.pairs --base DIR`: two versions of the gateway interleaved wave by wave (ABBA),
in front of the paced stub or (`--engine`) the real vLLM.

Measures the gateway's own CPU per request of each side and the per-round difference head -
base, for a first wave (one seed carries the clip) and an again wave (uuid-only). Prints it;
writes no results file.

May import: bench/shared/, engine/ and the gateway.
"""
