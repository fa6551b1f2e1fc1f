"""`python -m bench` (bench/__main__.py): the gateway against the alternatives a user has.

Measures throughput, latency, the proxy's CPU per request and peak RSS of every mode (direct,
nginx, the seed reference, the gateway with and without its cache, passthrough, keyed) against
one stub upstream and one load generator, on workloads (a) small clips, (b) long clips, (c) one
256 MiB clip and (encode) cold-encode MB/s, plus (s3) from bench/objects/ and (repeats) from
bench/repeats/. Writes bench/results/<date>-<name>.json, .md and .png (name: standard, quick
or --name); `python -m bench.proxies.report RESULT.json` renders a saved one again. modes.py
holds its modes and starts the proxies behind them (nginx, the seed reference, the gateway).

May import: bench/shared/, bench/objects/, bench/repeats/ (its workloads) and the gateway.
"""
