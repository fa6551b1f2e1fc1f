"""audio-gateway: a sidecar that turns file-path audio sidechannels into vLLM audio parts."""

__version__ = "0.1.0"
