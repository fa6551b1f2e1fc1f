"""deploy/Dockerfile checked without building it (.ci/image-check builds and runs it): hadolint
passes, every file it copies exists and is in the build context, its command is a valid
`audio-gateway` invocation of the image's own config, and the locks it installs from are
hash-pinned and agree with pyproject.toml."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gateway.__main__ import build_parser, serve_config
from tests.deploy_helpers import DEPLOY, REPO, tool

DOCKERFILE = DEPLOY / "Dockerfile"
RUNTIME_LOCK = DEPLOY / "requirements.lock"
BUILD_LOCK = DEPLOY / "build-requirements.lock"
IMAGE_CONFIG = "/etc/audio-gateway/gateway.toml"


@pytest.fixture(scope="module")
def dockerfile() -> DockerfileParser:
    return DockerfileParser(str(DOCKERFILE))


def instructions(parser: DockerfileParser, name: str) -> list[str]:
    return [item["value"] for item in parser.structure if item["instruction"] == name]


def stages(parser: DockerfileParser) -> list[list[dict[str, Any]]]:
    """The instructions of each stage, in order (the first list: the global ARGs)."""
    result: list[list[dict[str, Any]]] = [[]]
    for item in parser.structure:
        if item["instruction"] == "FROM":
            result.append([])
        result[-1].append(item)
    return result


def exec_form(value: str) -> list[str]:
    words = json.loads(value)
    assert isinstance(words, list), f"not the exec form: {value}"
    return [str(word) for word in words]


# --- the recipe -------------------------------------------------------------------------------


def test_hadolint_passes() -> None:
    result = subprocess.run(
        [tool("hadolint"), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_multi_stage_on_a_slim_python_311_pinned_by_tag(dockerfile: DockerfileParser) -> None:
    bases = dockerfile.parent_images  # build args resolved, as docker resolves them
    assert len(bases) == 2
    for base in bases:
        name, _, tag = base.partition(":")
        assert name in ("python", "docker.io/library/python"), base
        assert re.fullmatch(r"3\.11\.\d+-slim(-\w+)?", tag), f"{base}: not a pinned 3.11 slim tag"
    runtime = stages(dockerfile)[-1]
    copies_from_build = [i["value"] for i in runtime if i["instruction"] == "COPY"]
    assert any(value.startswith("--from=build ") for value in copies_from_build)


def test_runs_as_a_fixed_numeric_non_root_user(dockerfile: DockerfileParser) -> None:
    (user,) = instructions(dockerfile, "USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and gid.isdigit(), f"USER {user}: runAsNonRoot needs numbers"
    assert int(uid) != 0 and int(gid) != 0


def test_exposes_one_port_the_image_config_listens_on(dockerfile: DockerfileParser) -> None:
    (exposed,) = instructions(dockerfile, "EXPOSE")
    image_config = tomllib.loads((DEPLOY / "gateway.toml").read_text())
    assert exposed.split("/")[0] == str(image_config["server"]["port"])
    assert image_config["server"]["host"] == "0.0.0.0"  # reachable from outside the container


def test_the_command_is_serve_with_the_image_config(dockerfile: DockerfileParser) -> None:
    (entrypoint,) = instructions(dockerfile, "ENTRYPOINT")
    (cmd,) = instructions(dockerfile, "CMD")
    argv = exec_form(entrypoint) + exec_form(cmd)
    assert argv == ["audio-gateway", "serve", "--config", IMAGE_CONFIG]
    copied = {dest: src for src, dest in copies(dockerfile, stage=-1)}
    args = build_parser().parse_args(argv[1:])
    assert args.command == "serve" and args.config == IMAGE_CONFIG
    args.config = str(REPO / copied[IMAGE_CONFIG])  # the file the image has at that path
    config = serve_config(args)
    assert (config.server.host, config.server.port) == ("0.0.0.0", 8080)


def copies(parser: DockerfileParser, stage: int) -> list[tuple[str, str]]:
    """(source, destination) of each COPY from the build context in one stage."""
    pairs = []
    for item in stages(parser)[stage]:
        if item["instruction"] != "COPY" or item["value"].startswith("--from="):
            continue
        *sources, destination = item["value"].split()
        for source in sources:
            pairs.append((source.rstrip("/"), destination))
    return pairs


def in_build_context(relative: str) -> bool:
    """Whether .dockerignore keeps `relative` in the context (last matching pattern wins)."""
    kept = True
    for line in (REPO / ".dockerignore").read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/").removeprefix("**/")
        parts = Path(relative).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) for p in [*prefixes, parts[-1]]):
            kept = negated
    return kept


def test_every_copied_file_exists_and_is_in_the_build_context(
    dockerfile: DockerfileParser,
) -> None:
    sources = [source for stage in range(1, 3) for source, _ in copies(dockerfile, stage)]
    assert sources, "the Dockerfile copies nothing from the context"
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: no such file"
        assert in_build_context(source), f"COPY {source}: excluded by .dockerignore"
        if (REPO / source).is_dir():
            for file in (REPO / source).rglob("*.py"):
                assert in_build_context(str(file.relative_to(REPO)))


def test_dockerignore_keeps_secrets_and_venvs_out() -> None:
    for path in [".git/config", ".ci-venv/bin/python", "bench/results/x.md", "local.toml"]:
        assert not in_build_context(path), path
    assert not in_build_context("gateway/__pycache__/app.cpython-311.pyc")


# --- the locks --------------------------------------------------------------------------------


def locked(lock: Path) -> dict[str, tuple[str, list[str]]]:
    """{name: (version, hashes)} of a pip-compile --generate-hashes file."""
    entries: dict[str, tuple[str, list[str]]] = {}
    text = lock.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip() if not line.lstrip().startswith("--") else ""
        if not line:
            continue
        requirement, *options = line.split(" --hash=")
        pin = Requirement(requirement.strip())
        (specifier,) = pin.specifier
        assert specifier.operator == "==", f"{lock.name}: {pin} is not pinned"
        hashes = [option.strip() for option in options]
        entries[canonicalize_name(pin.name)] = (specifier.version, hashes)
    return entries


@pytest.mark.parametrize("lock", [RUNTIME_LOCK, BUILD_LOCK], ids=lambda path: path.name)
def test_every_locked_package_is_pinned_with_sha256_hashes(lock: Path) -> None:
    entries = locked(lock)
    assert entries
    for name, (_, hashes) in entries.items():
        assert hashes and all(h.startswith("sha256:") for h in hashes), name


def test_the_runtime_lock_satisfies_pyproject() -> None:
    """Every [project] dependency is in the lock at a version it allows; regenerate with
    deploy/lock after changing them."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    entries = locked(RUNTIME_LOCK)
    for dependency in project["project"]["dependencies"]:
        requirement = Requirement(dependency)
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{name} is not in {RUNTIME_LOCK.name}: run deploy/lock"
        version, _ = entries[name]
        assert requirement.specifier.contains(version), f"{name}=={version} vs {requirement}"


def test_the_build_lock_covers_the_build_system() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    entries = locked(BUILD_LOCK)
    for dependency in project["build-system"]["requires"]:
        requirement = Requirement(dependency)
        version, _ = entries[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(version), f"{requirement} vs {version}"
