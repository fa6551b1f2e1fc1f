"""The shared room: what every benchmark builds on; no benchmark of its own.

    loadgen         the load generator: a closed-loop aiohttp client in its own process
    clients         how clients hold connections (keep-alive pools or one per request), counted
    procstat        CPU (schedstat) and memory (VmRSS, VmHWM) of processes, from /proc
    servers         any server process on a free port, stopped in `finally`; the stub; a
                    gateway's config and command line
    stub_timing     the stub paced and split as vLLM answers, or all at once
    seed_reference  the BASELINE server: what NeMo Gym's vllm_model does per request
    workloads       the scenario of `python -m bench` and its synthetic clips
    speech_clips    short speech-like clips in the forms audio benchmarks carry
    long_clips      long speech-like clips written a minute at a time
    points          one measured point, and the live bench a workload drives
    s3server        a local S3 server (moto) that counts what it answers
    real_engine     the real engine's model, flags and chat body (system, replicas, pairs)
    samples         counters read from Prometheus text; the gateway's reference counters
    results         RESULTS_DIR: bench/results/

May import: the gateway, engine/, and other modules of this room. Never a benchmark folder
(bench/<benchmark>/): they import this room, not the other way round.
"""
