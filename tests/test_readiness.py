"""`GET /gateway/ready`: 200 while the upstream answers its `GET /health`, 503 with a JSON reason
otherwise; one upstream probe shared by concurrent callers, its result kept at most 1 s; no
header of the prober's goes upstream, and no API key is needed. (The drain side, 503 from
SIGTERM on, is in test_drain.py, against a real process.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from gateway.serving.readiness import RESULT_TTL_SECONDS
from gateway.stub_upstream import StubState
from tests.conftest import GatewayFactory
from tests.test_config import free_port
from tests.test_upstream_origins import ca, ca_file, tls_stub, unix_stub  # noqa: F401 (fixtures)

READY = "/gateway/ready"


def health_probes(stub: StubState) -> list[Any]:
    return [request for request in stub.requests if request.path == "/health"]


async def ready_answer(client: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    async with client.get(READY, **kwargs) as response:
        assert response.headers["Content-Type"].startswith("application/json")
        return response.status, await response.json()


class TestVerdicts:
    async def test_ready_while_the_upstream_answers_health(
        self, gateway: Any, stub: StubState
    ) -> None:
        assert await ready_answer(gateway) == (200, {"status": "ready"})
        assert len(health_probes(stub)) == 1

    async def test_upstream_health_failing_flips_it_to_503_and_back(
        self, gateway: Any, stub: StubState
    ) -> None:
        assert (await ready_answer(gateway))[0] == 200
        stub.health_status = 503
        await asyncio.sleep(RESULT_TTL_SECONDS + 0.1)  # past the kept result
        status, body = await ready_answer(gateway)
        assert status == 503
        assert body["status"] == "not_ready"
        assert body["reason"] == "upstream_status"
        assert "503" in body["message"]
        stub.health_status = 200
        await asyncio.sleep(RESULT_TTL_SECONDS + 0.1)
        assert (await ready_answer(gateway))[0] == 200

    async def test_unreachable_upstream_is_503_naming_it(
        self, make_gateway: GatewayFactory
    ) -> None:
        client = await make_gateway(upstream={"url": f"http://127.0.0.1:{free_port()}"})
        status, body = await ready_answer(client)
        assert status == 503
        assert body["reason"] == "upstream_unreachable"
        assert "127.0.0.1" in body["message"]

    async def test_liveness_stays_200_while_not_ready(self, gateway: Any, stub: StubState) -> None:
        stub.health_status = 500
        assert (await ready_answer(gateway))[0] == 503
        async with gateway.get("/gateway/health") as response:
            assert response.status == 200


class TestProbeSharing:
    async def test_concurrent_calls_share_one_probe_and_the_result_is_kept_at_most_1s(
        self, gateway: Any, stub: StubState
    ) -> None:
        answers = await asyncio.gather(*(ready_answer(gateway) for _ in range(20)))
        assert {status for status, _ in answers} == {200}
        assert len(health_probes(stub)) == 1
        await asyncio.sleep(RESULT_TTL_SECONDS + 0.1)
        assert (await ready_answer(gateway))[0] == 200
        assert len(health_probes(stub)) == 2

    async def test_a_prober_hanging_up_does_not_cancel_the_shared_probe(
        self, gateway: Any, stub: StubState
    ) -> None:
        stub.health_status = 500
        hung_up = asyncio.ensure_future(ready_answer(gateway))
        await asyncio.sleep(0)
        hung_up.cancel()
        status, body = await ready_answer(gateway)
        assert (status, body["reason"]) == (503, "upstream_status")


class TestBoundary:
    async def test_no_header_of_the_probers_goes_upstream(
        self, make_gateway: GatewayFactory, stub: StubState
    ) -> None:
        gateway = await make_gateway(upstream={"api_key": "upstream-secret"})
        headers = {
            "Authorization": "Bearer client-secret",
            "Cookie": "session=abc",
            "X-Forwarded-For": "10.0.0.1",
            "X-Prober": "kubelet",
        }
        assert (await ready_answer(gateway, headers=headers))[0] == 200
        [probe] = health_probes(stub)
        sent = {name.lower(): value for name, value in probe.headers.items()}
        assert probe.method == "GET"
        # Host (the upstream's) and the configured upstream key, nothing of the prober's.
        assert sent.pop("authorization") == "Bearer upstream-secret"
        assert set(sent) == {"host"}
        assert "client-secret" not in str(probe.headers)

    async def test_needs_no_api_key(self, make_gateway: GatewayFactory) -> None:
        gateway = await make_gateway(server={"api_keys": ["gateway-key"]})
        assert (await ready_answer(gateway))[0] == 200
        async with gateway.get("/v1/models") as response:
            assert response.status == 401  # the keys are on


class TestOrigins:
    async def test_over_a_unix_socket(
        self,
        make_gateway: GatewayFactory,
        unix_stub: tuple[str, StubState],  # noqa: F811
    ) -> None:
        path, state = unix_stub
        gateway = await make_gateway(upstream={"url": f"unix://{path}"})
        assert (await ready_answer(gateway))[0] == 200
        state.health_status = 503
        await asyncio.sleep(RESULT_TTL_SECONDS + 0.1)
        assert (await ready_answer(gateway))[0] == 503

    async def test_over_verified_tls(
        self,
        make_gateway: GatewayFactory,
        tls_stub: tuple[int, StubState],  # noqa: F811
        ca_file: str,  # noqa: F811
    ) -> None:
        port, state = tls_stub
        gateway = await make_gateway(
            upstream={"url": f"https://localhost:{port}", "ca_file": ca_file}
        )
        assert (await ready_answer(gateway))[0] == 200
        assert len(health_probes(state)) == 1

    async def test_missing_socket_is_503_unreachable(
        self, make_gateway: GatewayFactory, tmp_path: Path
    ) -> None:
        gateway = await make_gateway(upstream={"url": f"unix://{tmp_path}/absent.sock"})
        status, body = await ready_answer(gateway)
        assert (status, body["reason"]) == (503, "upstream_unreachable")
