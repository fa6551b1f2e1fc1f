"""The shared room: what every benchmark builds on, and no benchmark of its own.

Load generation (loadgen: a closed-loop client process; clients: keep-alive or per-request
pools), process stats (procstat: CPU from schedstat, peak RSS), server processes (servers: any
server on a free port, stopped in `finally`; the stub; a gateway's config and command line),
the stub's pacing (stub_timing), the seed reference baseline server (seed_reference), synthetic
clips and scenarios (workloads, speech_clips), a measured point and the live bench (points), a
local S3 server that counts its requests (s3server), the real engine's name, flags and chat body
(real_engine) and where results go (results: bench/results/).

May import: the gateway, engine/, and other modules of this room. Never a benchmark folder
(bench/<benchmark>/): they import this room, not the other way round.
"""
