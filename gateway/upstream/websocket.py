"""The WebSocket relay: an `Upgrade: websocket` request on any path becomes a session with the
upstream, on the same path and query (vLLM's `/v1/realtime` in particular).

The upstream handshake comes first, so that its refusal (status, headers, body) or its chosen
subprotocol reaches the client; only then is the client's upgrade accepted. Two pumps copy
messages, one per direction, each awaiting its write before it reads the next message: order is
kept, nothing waits in the gateway beyond aiohttp's per-connection queues, and a slow reader
slows its sender down (backpressure). Pings are answered on each hop by aiohttp.

The first side to end decides how both close: a close frame's code and reason go to the other
side and are echoed to the sender (RFC 6455 5.5.1); a side that vanishes without one closes the
other with 1001 (the client went away) or 1014 (bad gateway: the upstream did). The upstream is
closed first, the client last (its transport closing ends the handler). `go_away()` (the end of
a drain) ends every session the same way, both sides getting 1001 "gateway shutting down".
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable
from dataclasses import dataclass

import aiohttp
from aiohttp import ClientHandlerType, ClientRequest, ClientResponse, WSCloseCode, WSMsgType, web
from aiohttp.web_urldispatcher import UrlMappingMatchInfo
from pydantic import SecretStr
from yarl import URL

from ..auth import with_upstream_key
from ..config import UpstreamConfig
from ..errors import InvalidRequest, UpstreamTimeout, UpstreamUnavailable
from ..metrics import GatewayMetrics
from ..origin import UpstreamOrigin
from .pool import RawHeaders
from .relay import request_headers_for_upstream, response_headers_for_client

MAX_MESSAGE_BYTES = 16 * 1024**2  # uvicorn's default ws_max_size: what vLLM accepts anyway
CLOSE_TIMEOUT_SECONDS = 5.0  # how long a close waits for the peer's close reply
REFUSAL_BODY_MAX_BYTES = 1024**2  # an upstream's refusal body is cut here
# Per hop: aiohttp writes its own key, version and protocol list; extensions are not negotiated.
HANDSHAKE_HEADERS = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-accept",
    }
)

Socket = web.WebSocketResponse | aiohttp.ClientWebSocketResponse


def _comma_tokens(values: Iterable[str]) -> list[str]:
    return [token.strip() for value in values for token in value.split(",") if token.strip()]


def is_websocket_upgrade(request: web.BaseRequest) -> bool:
    """A GET asking for `Upgrade: websocket` (checked on every passthrough request: cheap first)."""
    if "Upgrade" not in request.headers or request.method != "GET":
        return False
    upgrade = _comma_tokens(request.headers.getall("Upgrade"))
    return "websocket" in (token.lower() for token in upgrade)


def requested_protocols(request: web.BaseRequest) -> tuple[str, ...]:
    """The subprotocols the client offers, in its order of preference."""
    return tuple(_comma_tokens(request.headers.getall("Sec-WebSocket-Protocol", ())))


class WebSocketUpgrades(web.DynamicResource):
    """`/{tail:.*}` for WebSocket upgrades only. Registered before the passthrough catch-all, it
    takes upgrades on any path the gateway does not answer itself, and its route name labels
    their metrics."""

    def __init__(self, name: str) -> None:
        super().__init__("/{tail:.*}", name=name)

    async def resolve(self, request: web.Request) -> tuple[UrlMappingMatchInfo | None, set[str]]:
        if not is_websocket_upgrade(request):
            return None, set()
        return await super().resolve(request)


@dataclass(frozen=True, slots=True)
class Ending:
    """How a session ends: the close code and reason for whichever side is still there."""

    code: int
    reason: str


CLIENT_GONE = Ending(WSCloseCode.GOING_AWAY, "client went away")
UPSTREAM_GONE = Ending(WSCloseCode.BAD_GATEWAY, "upstream went away")
SHUTTING_DOWN = Ending(WSCloseCode.GOING_AWAY, "gateway shutting down")


def sendable_close_code(code: int) -> int:
    """`code` if it may be sent in a close frame, else 1000 (no status, reserved codes)."""
    if 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999:
        return code
    return WSCloseCode.OK


class UpstreamRefusal(Exception):
    """The upstream answered the upgrade with something other than 101: relayed as it is."""

    def __init__(self, status: int, headers: RawHeaders, body: bytes) -> None:
        super().__init__(status)
        self.status = status
        self.headers = headers
        self.body = body

    def response(self) -> web.Response:
        headers = response_headers_for_client(self.headers)
        return web.Response(status=self.status, headers=headers, body=self.body)


async def keep_refusals(request: ClientRequest, handler: ClientHandlerType) -> ClientResponse:
    """Client middleware: `ws_connect` would follow a redirect and drop a refusal's body; this
    stops at the upstream's first answer that is not 101 and keeps it whole."""
    response = await handler(request)
    if response.status == 101:
        return response
    try:
        body = bytearray()
        async for chunk in response.content.iter_any():
            body += chunk
            if len(body) >= REFUSAL_BODY_MAX_BYTES:
                break
    finally:
        response.close()
    raise UpstreamRefusal(response.status, list(response.raw_headers), bytes(body))


class WebSocketRelay:
    """The process's one client session for upstream WebSockets, and the session relay."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        origin: UpstreamOrigin,
        metrics: GatewayMetrics,
        api_key: SecretStr,
    ) -> None:
        self.session = session
        self.origin = origin
        self.metrics = metrics
        self.api_key = api_key
        # Resolved by go_away(): every session, current or starting, then ends with it.
        self._going_away: asyncio.Future[Ending] = asyncio.get_running_loop().create_future()

    @classmethod
    async def open(
        cls,
        config: UpstreamConfig,
        origin: UpstreamOrigin,
        ssl_context: ssl.SSLContext | None,
        metrics: GatewayMetrics,
    ) -> WebSocketRelay:
        """`origin` and `ssl_context` are the HTTP pool's, parsed and loaded once at start-up."""
        connector: aiohttp.BaseConnector
        if origin.socket_path:  # one upstream connection per session: no limit of our own
            connector = aiohttp.UnixConnector(origin.socket_path, limit=0)
        else:
            connector = aiohttp.TCPConnector(ssl=ssl_context or True, limit=0)
        session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),  # one session serves every client
            auto_decompress=False,  # a refusal's body is relayed with its Content-Encoding
            skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent"),  # only the client's
            timeout=aiohttp.ClientTimeout(
                total=None,
                connect=config.connect_timeout_seconds,
                sock_read=config.read_timeout_seconds,
            ),
            middlewares=(keep_refusals,),
        )
        return cls(session, origin, metrics, config.api_key)

    async def close(self) -> None:
        await self.session.close()

    def go_away(self) -> None:
        """End every session: both sides get a close frame, 1001 "gateway shutting down"."""
        if not self._going_away.done():
            self._going_away.set_result(SHUTTING_DOWN)

    def upstream_url(self, request: web.Request) -> URL:
        scheme = "wss" if self.origin.tls else "ws"
        authority = self.origin.host_header  # "localhost" for unix://: the socket is the route
        return URL(
            f"{scheme}://{authority}{self.origin.path_prefix}{request.raw_path}", encoded=True
        )

    async def relay(self, request: web.Request) -> web.StreamResponse:
        """One session: upstream handshake, client handshake, messages both ways, closes."""
        protocols = requested_protocols(request)
        if not web.WebSocketResponse(protocols=protocols).can_prepare(request).ok:
            raise InvalidRequest(
                "not a valid WebSocket handshake (Connection, Sec-WebSocket-Key or -Version)",
                code="invalid_websocket_handshake",
            )
        try:
            upstream = await self._connect(request, protocols)
        except UpstreamRefusal as refusal:
            return refusal.response()
        try:
            client = await _accept(request, upstream.protocol)
            self.metrics.websocket_sessions.inc()
            try:
                await _run_session(client, upstream, self._going_away)
            finally:
                self.metrics.websocket_sessions.dec()
        finally:
            if not upstream.closed:  # the client vanished or the handler was cancelled
                await upstream.close(code=CLIENT_GONE.code, message=CLIENT_GONE.reason.encode())
        return client

    async def _connect(
        self, request: web.Request, protocols: tuple[str, ...]
    ) -> aiohttp.ClientWebSocketResponse:
        headers = request_headers_for_upstream(request)
        headers = [
            (name, value) for name, value in headers if name.lower() not in HANDSHAKE_HEADERS
        ]
        try:
            return await self.session.ws_connect(
                self.upstream_url(request),
                protocols=protocols,
                headers=with_upstream_key(headers, self.api_key),
                autoclose=False,  # closes are passed on, with their codes, by _run_session
                max_msg_size=MAX_MESSAGE_BYTES,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=CLOSE_TIMEOUT_SECONDS),
            )
        except aiohttp.WSServerHandshakeError as exc:  # a 101 with a broken handshake
            raise UpstreamUnavailable(
                f"the upstream {self.origin.label} answered the WebSocket upgrade with a broken "
                f"handshake: {exc.message}",
                code="upstream_bad_handshake",
            ) from exc
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"the upstream {self.origin.label} did not answer the WebSocket upgrade in time",
                code="upstream_timeout",
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            message = _unreachable(self.origin, exc)
            raise UpstreamUnavailable(message, code="upstream_unreachable") from exc


def _unreachable(origin: UpstreamOrigin, exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"the upstream {origin.label} failed TLS certificate verification: {exc}"
    return f"the upstream {origin.label} is unreachable: {exc.__class__.__name__}: {exc}"


async def _accept(request: web.Request, protocol: str | None) -> web.WebSocketResponse:
    """The client's upgrade, answered with the subprotocol the upstream chose (or none)."""
    client = web.WebSocketResponse(
        protocols=(protocol,) if protocol else (),
        autoclose=False,
        max_msg_size=MAX_MESSAGE_BYTES,
        timeout=CLOSE_TIMEOUT_SECONDS,
        compress=False,  # per-hop deflate would cost CPU on every frame of a local sidecar
    )
    if protocol is None and requested_protocols(request):
        # With no overlap aiohttp logs the offered list, and a browser client may carry a
        # credential in it (OpenAI's `openai-insecure-api-key.<key>`): answer without it.
        headers = request.headers.copy()
        del headers["Sec-WebSocket-Protocol"]
        request = request.clone(headers=headers)
    await client.prepare(request)
    return client


async def _run_session(
    client: web.WebSocketResponse,
    upstream: aiohttp.ClientWebSocketResponse,
    going_away: asyncio.Future[Ending],
) -> None:
    pumps = [
        asyncio.create_task(_pump(client, upstream, CLIENT_GONE, UPSTREAM_GONE)),
        asyncio.create_task(_pump(upstream, client, UPSTREAM_GONE, CLIENT_GONE)),
    ]
    try:
        done, _ = await asyncio.wait([*pumps, going_away], return_when=asyncio.FIRST_COMPLETED)
        ending = done.pop().result()
        reason = ending.reason.encode()
        await upstream.close(code=ending.code, message=reason)
        # Last, with nothing awaited after it: closing the client's transport cancels this
        # handler (aiohttp's handler_cancellation), which would cut anything still pending.
        await client.close(code=ending.code, message=reason)
    finally:
        for pump in pumps:  # each close has already woken its reader: they end on their own
            pump.cancel()


async def _pump(source: Socket, sink: Socket, source_gone: Ending, sink_gone: Ending) -> Ending:
    """Copy messages from `source` to `sink` until `source` ends; say how the session ends."""
    while True:
        message = await source.receive()
        try:
            if message.type is WSMsgType.TEXT:
                await sink.send_str(message.data)
            elif message.type is WSMsgType.BINARY:
                await sink.send_bytes(message.data)
            elif message.type is WSMsgType.CLOSE:
                return Ending(sendable_close_code(message.data), message.extra or "")
            else:  # CLOSED or ERROR: gone without a close frame
                return source_gone
        except ConnectionError:  # the sink went away mid-write
            return sink_gone
