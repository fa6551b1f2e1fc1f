"""When the bench's stub answers: paced and split as vLLM answers, or all at once.

vLLM's engine finishes a wave's requests one or two at a time, tens of milliseconds apart, and
its uvicorn front writes an answer's head and body in two writes; the plain stub answers every
request as soon as it is parsed, head and body in one write. A proxy handling answers that
arrive alone pays a wake-up for each (and for each half of a split one), so its CPU per request
against the plain stub understates what it costs in front of vLLM. The bench's stub runs use
`VLLM_LIKE` unless told `--unpaced-stub`; the stub's own flags do the work
(`python -m gateway.stub_upstream --pace-answers N --pace-ms MS --split-head-body`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StubTiming:
    pace_answers: int = 0  # at most this many answers released at a time (0: no pacing)
    pace_ms: float = 0.0  # ... this far apart
    split_head_body: bool = False  # head and body in two writes, as uvicorn does

    @property
    def paced(self) -> bool:
        return self.pace_answers > 0

    def argv(self) -> list[str]:
        """The stub's command-line flags for this timing."""
        flags = []
        if self.paced:
            flags += ["--pace-answers", str(self.pace_answers), "--pace-ms", f"{self.pace_ms:g}"]
        if self.split_head_body:
            flags.append("--split-head-body")
        return flags

    def describe(self) -> str:
        if not self.paced and not self.split_head_body:
            return "plain stub: every answer as soon as it is ready, head and body in one write"
        parts = []
        if self.paced:
            parts.append(
                f"paced like vLLM: at most {self.pace_answers} answers at a time, "
                f"{self.pace_ms:g} ms apart"
            )
        if self.split_head_body:
            parts.append("head and body in two writes, as uvicorn does")
        return "stub " + "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "paced": self.paced,
            "pace_answers": self.pace_answers,
            "pace_ms": self.pace_ms,
            "split_head_body": self.split_head_body,
            "description": self.describe(),
        }


# vLLM's CPU engine on 30 s clips: answers two at a time, about 25 ms apart.
VLLM_LIKE = StubTiming(pace_answers=2, pace_ms=25.0, split_head_body=True)
PLAIN = StubTiming()
