"""The routers' hash-locked venvs (.ci/router, .ci/smg), checked without installing them: each
lock pins the version engine/router.py and engine/smg.py start, as requirements.in asks for it,
and every file of the closure is hash-pinned (`pip install --require-hashes` needs no more)."""

from __future__ import annotations

import re

import pytest

from engine import router, smg
from engine.server import REPO

LOCKS = [("router", "vllm-router", router.VERSION), ("smg", "smg", smg.VERSION)]


@pytest.mark.parametrize(("folder", "package", "version"), LOCKS)
def test_the_lock_pins_the_version_started_every_file_hashed(
    folder: str, package: str, version: str
) -> None:
    text = (REPO / ".ci" / folder / "requirements.lock").read_text()
    pins = dict(re.findall(r"^([a-z0-9][a-z0-9._-]*)==(\S+) \\$", text, re.MULTILINE))
    assert pins[package] == version
    wanted = (REPO / ".ci" / folder / "requirements.in").read_text()
    assert f"\n{package}=={version}\n" in wanted
    entries = re.split(r"^(?=[a-z0-9])", text, flags=re.MULTILINE)[1:]
    assert len(entries) == len(pins), "an entry without `name==version \\`"
    for entry in entries:
        assert "--hash=sha256:" in entry, entry.splitlines()[0]
