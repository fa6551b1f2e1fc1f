"""Prometheus metrics of the gateway itself, served at /gateway/metrics.

Each app has its own registry, so several gateways (tests, bench) can live in one process.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

ADDED_LATENCY_BUCKETS_SECONDS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)  # fmt: skip
CHUNKS_PER_REQUEST_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128)
STORAGE_BUCKETS_SECONDS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.cache_hits = Counter(
            "audio_gateway_cache_hits",
            "Clip lookups served from the cache or by another request's in-flight encode.",
            registry=registry,
        )
        self.cache_misses = Counter(
            "audio_gateway_cache_misses",
            "Clip lookups that read and encoded the file.",
            registry=registry,
        )
        self.cache_bytes = Gauge(
            "audio_gateway_cache_bytes", "Bytes held by the encoded-audio cache.", registry=registry
        )
        self.cache_entries = Gauge(
            "audio_gateway_cache_entries",
            "Clips held by the encoded-audio cache.",
            registry=registry,
        )
        self.encoded_bytes = Counter(
            "audio_gateway_encoded_bytes",
            "Audio file bytes read and base64-encoded (cache misses and streamed clips).",
            registry=registry,
        )
        self.requests = Counter(
            "audio_gateway_requests",
            "Requests answered, by route and HTTP status.",
            ["route", "status"],
            registry=registry,
        )
        self.websocket_sessions = Gauge(
            "audio_gateway_websocket_sessions",
            "WebSocket sessions relayed to the upstream that are open now.",
            registry=registry,
        )
        self.added_latency = Histogram(
            "audio_gateway_added_latency_seconds",
            "Time the gateway spends on a rewritten request before handing it to the upstream "
            "(parse, resolve, read/encode or cache lookup, splice, serialise).",
            ["route"],
            buckets=ADDED_LATENCY_BUCKETS_SECONDS,
            registry=registry,
        )
        self.storage_requests = Counter(
            "audio_gateway_storage_requests",
            "Object-store requests, by operation (head, get) and outcome.",
            ["op", "outcome"],
            registry=registry,
        )
        self.storage_seconds = Histogram(
            "audio_gateway_storage_seconds",
            "Object-store request latency: a HEAD, or a GET until its body is read (a streamed "
            "GET: until its stream ends).",
            ["op"],
            buckets=STORAGE_BUCKETS_SECONDS,
            registry=registry,
        )
        self.chunked_requests = Counter(
            "audio_gateway_chunked_requests",
            "Requests whose clip was split into pieces (chunking), each piece sent upstream.",
            registry=registry,
        )
        self.audio_chunks = Counter(
            "audio_gateway_audio_chunks",
            "Pieces of split clips sent upstream, one request each.",
            registry=registry,
        )
        self.chunks_per_request = Histogram(
            "audio_gateway_audio_chunks_per_request",
            "Pieces a split clip was cut into, per chunked request.",
            buckets=CHUNKS_PER_REQUEST_BUCKETS,
            registry=registry,
        )
        self.audio_parts = Counter(
            "audio_gateway_audio_parts",
            "Audio parts sent upstream on chat completions and the Responses bridge, by form: "
            "with the clip (data: bytes or URL) or by uuid alone (reference).",
            ["form"],
            registry=registry,
        )
        self.reference_retries = Counter(
            "audio_gateway_reference_retries",
            "Requests that carried references and were sent again with every clip's data, by "
            "what the first attempt got (cache_miss: vLLM's 400; upstream_error: a 500 before "
            "any answer; stream_error: an error event or a cut stream before any content).",
            ["reason"],
            registry=registry,
        )
        self.reference_bytes_saved = Counter(
            "audio_gateway_reference_bytes_saved",
            "Base64 bytes not sent upstream because their clip went by reference.",
            registry=registry,
        )
        self.reference_clips = Gauge(
            "audio_gateway_reference_clips",
            "Clips the gateway records as held by the upstream's processor cache.",
            registry=registry,
        )

        self.clips = Counter(
            "audio_gateway_clips",
            "Clips resolved for chat completions and the Responses bridge, by what named them: "
            "the metadata sidechannel, or a content part naming a path (content_part).",
            ["carrier"],
            registry=registry,
        )
        # Both series exist from the start (a dashboard's rate() needs no first clip).
        self._sidechannel_clips = self.clips.labels("sidechannel")
        self._content_part_clips = self.clips.labels("content_part")

        self._request_counters: dict[tuple[str, int], Counter] = {}
        self._latency_histograms: dict[str, Histogram] = {}

    def count_request(self, route: str, status: int) -> None:
        """`requests.labels(...).inc()`, with the labelled child looked up once per pair."""
        key = (route, status)
        counter = self._request_counters.get(key)
        if counter is None:
            counter = self._request_counters[key] = self.requests.labels(route, str(status))
        counter.inc()

    def count_clips(self, sidechannel: int, content_parts: int) -> None:
        """One request's clips, by carrier."""
        if sidechannel:
            self._sidechannel_clips.inc(sidechannel)
        if content_parts:
            self._content_part_clips.inc(content_parts)

    def observe_added_latency(self, route: str, seconds: float) -> None:
        histogram = self._latency_histograms.get(route)
        if histogram is None:
            histogram = self._latency_histograms[route] = self.added_latency.labels(route)
        histogram.observe(seconds)

    def observe_storage(self, op: str, outcome: str, seconds: float) -> None:
        self.storage_requests.labels(op, outcome).inc()
        self.storage_seconds.labels(op).observe(seconds)

    def observe_chunked(self, pieces: int) -> None:
        self.chunked_requests.inc()
        self.chunks_per_request.observe(pieces)

    def render(self) -> bytes:
        return generate_latest(self.registry)
