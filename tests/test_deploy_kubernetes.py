"""deploy/kubernetes, base and every overlay, rendered by the real kustomize (kubectl's): the
output validates against the Kubernetes schemas of pinned versions (the PodMonitor against the
Prometheus operator's CRD models); the ConfigMap's TOML loads with the gateway's own loader;
the gateway container's args parse with its own CLI; ports, the socket path and probe paths
agree across the Deployment, Service, PodMonitor, TOML and the app's routes; the pod is locked
down; the shutdown timing covers the drain."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
from cloudcoil.models.prometheus_operator.v1 import PodMonitor
from kubernetes_validate import validate

from gateway.__main__ import build_parser, serve_config
from gateway.app import create_app
from gateway.auth import is_protected
from gateway.config import Config, validate_config
from gateway.origin import parse_origin
from tests.deploy_helpers import (
    GATEWAY_CONTAINER,
    KUSTOMIZATIONS,
    VLLM_CONTAINER,
    Rendered,
    rendered,
)

# The oldest Kubernetes minor release still supported by the big managed offerings, and the
# newest the pinned kubernetes-validate knows.
KUBERNETES_VERSIONS = ["1.30.0", "1.37.0"]
VLLM_EXIT_SLACK_SECONDS = 15  # what vLLM gets after its preStop for its own shutdown, at least
GATEWAY_EXIT_SECONDS = 4  # after drain + shutdown timeout, the cut and the exit (README)
LIVENESS_ROUTE = "/gateway/health"
READINESS_ROUTE = "/gateway/ready"
METRICS_ROUTE = "/gateway/metrics"
VLLM_METRICS_PATH = "/metrics"  # vLLM's, relayed by the gateway (passthrough)


@pytest.fixture(scope="module", params=KUSTOMIZATIONS, ids=lambda path: path.name)
def out(request: pytest.FixtureRequest) -> Rendered:
    kustomization: Path = request.param
    return rendered(kustomization)


@pytest.fixture(scope="module")
def config(out: Rendered) -> Config:
    return validate_config(out.gateway_toml(), source="the ConfigMap's gateway.toml")


def app_routes() -> set[str]:
    app = create_app(Config())
    return {resource.canonical for resource in app.router.resources()}


# --- it renders and validates -----------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_validates_against_the_kubernetes_schema(out: Rendered, version: str) -> None:
    for obj in out.objects:
        if obj["kind"] == "PodMonitor":
            continue  # a CRD: no schema in Kubernetes' own; checked below
        validate(obj, version, strict=True)  # raises, naming the path, on any error


def test_the_podmonitor_matches_the_operators_crd(out: Rendered) -> None:
    document = out.one("PodMonitor")
    model = PodMonitor.model_validate(document)
    # The models ignore unknown keys: a key lost on the way back was not in the CRD.
    assert model.model_dump(by_alias=True, exclude_none=True, mode="json") == document


def test_one_deployment_one_service_one_podmonitor(out: Rendered) -> None:
    for kind in ("Deployment", "Service", "PodMonitor", "ConfigMap"):
        out.one(kind)
    assert [c["name"] for c in out.pod["containers"]] == [VLLM_CONTAINER, GATEWAY_CONTAINER]


# --- the gateway's config and command ---------------------------------------------------------


def test_the_config_map_toml_loads_with_the_gateways_loader(config: Config) -> None:
    assert config.upstream.origin().scheme == "unix"
    assert config.server.host == "0.0.0.0"
    assert not config.server.api_keys  # keys come from the Secret, never the ConfigMap


def test_the_gateway_args_parse_with_its_own_cli(out: Rendered, tmp_path: Path) -> None:
    args = build_parser().parse_args(out.container(GATEWAY_CONTAINER)["args"])
    assert args.command == "serve"
    mount = out.mount(GATEWAY_CONTAINER, str(Path(args.config).parent))
    assert mount.get("readOnly") is True
    local = tmp_path / Path(args.config).name
    local.write_text(out.gateway_toml_text())
    args.config = str(local)
    served = serve_config(args)  # what `serve` runs with: file, environment, flags
    assert served.upstream.url == validate_config(out.gateway_toml()).upstream.url


def test_api_keys_come_from_a_required_secret(out: Rendered) -> None:
    env = {e["name"]: e for e in out.container(GATEWAY_CONTAINER)["env"]}
    reference = env["AUDIO_GATEWAY_API_KEYS"]["valueFrom"]["secretKeyRef"]
    assert reference["name"] and reference["key"]
    assert reference.get("optional", False) is False  # no Secret: no pod, never an open /v1


# --- ports, socket and probe paths agree ------------------------------------------------------


def test_the_service_exposes_the_gateway_port_only(out: Rendered, config: Config) -> None:
    service = out.one("Service")
    (port,) = service["spec"]["ports"]
    ports = {p["name"]: p["containerPort"] for p in out.container(GATEWAY_CONTAINER)["ports"]}
    assert ports == {port["targetPort"]: config.server.port}
    selector = service["spec"]["selector"]
    assert selector.items() <= out.pod_labels.items()
    assert "ports" not in out.container(VLLM_CONTAINER)  # vLLM listens on no port
    assert not out.pod.get("hostNetwork", False)


def test_the_podmonitor_scrapes_the_gateway_and_vllm_through_the_gateway_port(
    out: Rendered,
) -> None:
    spec = out.one("PodMonitor")["spec"]
    assert spec["selector"]["matchLabels"].items() <= out.pod_labels.items()
    gateway_ports = {p["name"] for p in out.container(GATEWAY_CONTAINER)["ports"]}
    by_path = {endpoint["path"]: endpoint for endpoint in spec["podMetricsEndpoints"]}
    assert set(by_path) == {METRICS_ROUTE, VLLM_METRICS_PATH}
    for endpoint in by_path.values():
        assert endpoint["port"] in gateway_ports  # vLLM has no port: its socket only
        # /metrics and /gateway/metrics need no key (auth.py), so no credential is configured.
        assert not {"authorization", "bearerTokenSecret", "basicAuth"} & set(endpoint)
    assert METRICS_ROUTE in app_routes()
    # ... and that a keyed gateway relays it to vLLM: test_deploy_dashboard.py, over HTTP.
    assert not is_protected("GET", VLLM_METRICS_PATH)
    assert not is_protected("GET", METRICS_ROUTE)
    # vLLM's series name the container they come from (and the two `up` series differ).
    assert by_path[VLLM_METRICS_PATH]["relabelings"] == [
        {"action": "replace", "targetLabel": "container", "replacement": VLLM_CONTAINER}
    ]
    assert "relabelings" not in by_path[METRICS_ROUTE]


def test_probes_hit_the_gateways_health_and_ready_routes(out: Rendered) -> None:
    gateway = out.container(GATEWAY_CONTAINER)
    port_names = {p["name"] for p in gateway["ports"]}
    paths = {}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = gateway[probe]["httpGet"]
        assert get["port"] in port_names
        paths[probe] = get["path"]
    assert paths == {
        "startupProbe": LIVENESS_ROUTE,
        "livenessProbe": LIVENESS_ROUTE,
        "readinessProbe": READINESS_ROUTE,
    }
    assert {LIVENESS_ROUTE, READINESS_ROUTE} <= app_routes()


def vllm_script(out: Rendered) -> list[str]:
    """The words of the vLLM container's shell command line."""
    vllm = out.container(VLLM_CONTAINER)
    assert vllm["command"] == ["/bin/sh", "-c"]
    (script,) = vllm["args"]
    return shlex.split(script)


def test_vllm_serves_on_the_socket_the_gateway_connects_to(out: Rendered, config: Config) -> None:
    words = vllm_script(out)
    serve = words.index("serve")
    assert words[serve - 2 : serve + 1] == ["exec", "vllm", "serve"]
    uds = words[words.index("--uds") + 1]
    assert not {"--host", "--port"} & set(words)  # vLLM 0.33: --uds ignores them anyway
    assert parse_origin(config.upstream.url).socket_path == uds
    folder = str(Path(uds).parent)
    vllm_mount = out.mount(VLLM_CONTAINER, folder)
    gateway_mount = out.mount(GATEWAY_CONTAINER, folder)
    assert vllm_mount["name"] == gateway_mount["name"]
    assert "emptyDir" in out.volume(vllm_mount["name"])  # shared by these two containers only
    # vLLM's bind() fails on a socket left by a previous run of the container: removed first.
    assert words[words.index("rm") : words.index("rm") + 3] == ["rm", "-f", uds]


# --- the pod is locked down -------------------------------------------------------------------


@pytest.mark.parametrize("name", [VLLM_CONTAINER, GATEWAY_CONTAINER])
def test_every_container_is_locked_down(out: Rendered, name: str) -> None:
    assert out.effective(name, "runAsNonRoot") is True
    assert out.effective(name, "runAsUser") not in (None, 0)
    assert out.effective(name, "readOnlyRootFilesystem") is True
    assert out.effective(name, "allowPrivilegeEscalation") is False
    assert out.effective(name, "privileged") in (None, False)
    assert out.effective(name, "capabilities") == {"drop": ["ALL"]}
    assert out.effective(name, "seccompProfile") == {"type": "RuntimeDefault"}


def test_vllm_has_its_gpu_the_audio_read_only_and_writable_caches(out: Rendered) -> None:
    vllm = out.container(VLLM_CONTAINER)
    assert vllm["image"].startswith("vllm/vllm-openai:")
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == "1"
    audio_mounts = [m for m in vllm["volumeMounts"] if m["mountPath"].startswith("/data/audio")]
    assert all(m.get("readOnly") is True for m in audio_mounts)
    env = {e["name"]: e.get("value") for e in vllm["env"]}
    mounted = [m["mountPath"] for m in vllm["volumeMounts"] if not m.get("readOnly")]
    for writable in (env["HOME"], env["HF_HOME"], "/tmp", "/dev/shm"):
        assert any(writable == m or writable.startswith(m + "/") for m in mounted), writable


def test_the_gateway_reads_its_audio_volume_read_only(out: Rendered, config: Config) -> None:
    for root in config.audio.effective_roots():  # the local roots: each on a read-only mount
        mounts = out.container(GATEWAY_CONTAINER)["volumeMounts"]
        (mount,) = [m for m in mounts if root == m["mountPath"] or root.startswith(m["mountPath"])]
        assert mount.get("readOnly") is True
        assert out.volume(mount["name"])["persistentVolumeClaim"]["readOnly"] is True


# --- shutdown timing --------------------------------------------------------------------------


def prestop_seconds(container: dict[str, Any]) -> float:
    hook = container["lifecycle"]["preStop"]
    if "sleep" in hook:
        return float(hook["sleep"]["seconds"])
    command = hook["exec"]["command"]
    assert command[0] == "sleep" and len(command) == 2, command
    return float(command[1])


def test_vllm_outlives_the_gateways_drain_within_the_grace_period(
    out: Rendered, config: Config
) -> None:
    drain = config.server.drain_seconds + config.server.shutdown_timeout_seconds
    assert config.server.drain_seconds > 0  # endpoints are withdrawn while still serving
    vllm_stays = prestop_seconds(out.container(VLLM_CONTAINER))
    # In-flight requests keep their upstream to the end, and the cut's closes reach vLLM.
    assert vllm_stays > drain + GATEWAY_EXIT_SECONDS
    grace = out.pod["terminationGracePeriodSeconds"]
    assert grace >= vllm_stays + VLLM_EXIT_SLACK_SECONDS
    assert "lifecycle" not in out.container(GATEWAY_CONTAINER)  # its drain starts at SIGTERM
