"""Workload (s3) of `python -m bench`: clips on a local S3 server (moto), through the gateway
(revalidating and immutable) and the seed reference fetching each object per request.

Measures req/s cold and warm, latency, GETs per clip and HEADs per request counted at the S3
server, and the proxy's CPU. Writes nothing itself: its rows go into `python -m bench`'s
result (bench/results/<date>-<name>.json, the `objects` section; 2026-12-02-s3.md).

May import: bench/shared/ and the gateway.
"""
