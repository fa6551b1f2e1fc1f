"""`python -m bench.affinity_key`: what the clip key (`[routing] affinity_headers`) costs per MB.

Measures the CPU of decoding and hashing a client's inline part, the sha256 alone and msgspec's
parse of the same body for scale, per clip size. Prints Markdown; writes no results file.

May import: the gateway.
"""
