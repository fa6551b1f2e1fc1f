"""bench/: what audio-gateway costs and what it saves, one folder per benchmark.

    __main__.py        `python -m bench`: the gateway against other proxies (runs proxies/)
    proxies/           that benchmark: workloads (a), (b), (c), encode; its report and plot
    objects/           workload (s3) of `python -m bench`: clips on a local S3 server
    repeats/           `python -m bench.repeats`, and workload (repeats) of `python -m bench`
    system/            `python -m bench.system`: the gateway + vLLM pair on the real engine
    replicas/          `python -m bench.system --replicas 2`: two engines behind vllm-router
    pairs/             `python -m bench.pairs`: two gateway checkouts, before and after
    workers/           `python -m bench.workers`: req/s at `[server] workers` = 1, 2, ...
    longform/          `python -m bench.longform`: long audio against a 30 s model
    chunker/           `python -m bench.chunker`: what cutting long audio costs
    normalize/         `python -m bench.normalize.memory` / `.quality`: `[normalize]`
    dataset_tools/     `python -m bench.dataset_tools`: `audio-gateway check` and `convert`
    affinity_key/      `python -m bench.affinity_key`: the clip key's CPU per MB
    speech_cache/      `python -m bench.speech_cache`: raw bytes vs base64 for speech routes
    s3_libraries/      `python -m bench.s3_libraries`: obstore vs aiobotocore
    vllm_frontend_cpu/ `python -m bench.vllm_frontend_cpu`: vLLM's own front-end audio CPU
    audio_models/      `python -m bench.audio_models`: what the pair saves vLLM's API server,
                       per audio chat architecture (Qwen2-Audio, Voxtral, AF3, GLM-ASR)
    shared/            what they build on: load generation, clients, process stats, servers,
                       workloads and clips, the S3 server, the real engine, the results dir
    results/           the committed results the docs quote

Each folder's `__init__` says what it measures, which results file it writes and what it may
import. Benchmarks import shared/ (and the gateway, engine/); shared/ imports no benchmark; no
circle (tests/test_layout.py). Every documented command answers `--help`
(tests/test_bench_help.py). See bench/README.md.
"""
