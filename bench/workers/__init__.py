"""`python -m bench.workers`: requests per second of one gateway at `[server] workers` = 1, 2, ...

Measures req/s per round and their median, the ratio to the first count and the gateway's CPU
per request (supervisor and workers), the gateways driven in turn round by round. Prints
Markdown (`--json OUT` writes the raw points); writes no results file.

May import: bench/shared/ and the gateway.
"""
