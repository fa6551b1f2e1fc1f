"""Prometheus metrics of the gateway itself, served at /gateway/metrics.

Each app has its own registry, so several gateways (tests, bench) can live in one process.
A `route` label always holds the route's name in the router (`chat_completions`, `responses`,
`transcriptions`, `translations`, `websocket`, `passthrough`, `gateway_metrics`, ...), the same
name the access log and the refusal log show.

A worker of a gateway with `[server] workers` > 1 runs in prometheus_client's multiprocess mode
(its supervisor sets `PROMETHEUS_MULTIPROC_DIR` to a directory of its own, gateway/workers), and
`aggregate_from(that directory)` makes `render()` speak for every worker: counters and histograms
summed over all the workers that ever ran (one that died and was replaced included), gauges
summed over the workers running now (`livesum`). A gauge read from a function (the cache's
bytes, ...) is written to the directory by each worker every `SAMPLE_SECONDS` and by the
answering worker at the scrape.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

ADDED_LATENCY_BUCKETS_SECONDS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)  # fmt: skip
CHUNKS_PER_REQUEST_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128)
SAMPLE_SECONDS = 1.0  # multiprocess mode: how stale another worker's function gauges may be
LIVE_SUM: Final = "livesum"  # multiprocess mode: a gauge is the sum over the workers running now
STORAGE_BUCKETS_SECONDS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._multiprocess_dir: str | None = None
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
            "audio_gateway_cache_bytes",
            "Bytes held by the encoded-audio cache.",
            registry=registry,
            multiprocess_mode=LIVE_SUM,
        )
        self.cache_entries = Gauge(
            "audio_gateway_cache_entries",
            "Clips held by the encoded-audio cache.",
            registry=registry,
            multiprocess_mode=LIVE_SUM,
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
            multiprocess_mode=LIVE_SUM,
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
            "any answer; stream_error: an error event or a cut stream before any content; "
            "refused: any other 400).",
            ["reason"],
            registry=registry,
        )
        self.reference_bytes_saved = Counter(
            "audio_gateway_reference_bytes_saved",
            "Base64 bytes not sent upstream because their clip went by reference.",
            registry=registry,
        )
        self.reference_switches = Counter(
            "audio_gateway_reference_switches",
            "Switches of one model's clips between going by reference and going with their "
            "data (and uuid), by where to (data, trial: references tried again, reference) and "
            "why (misses: references that missed right after their data was accepted; "
            "refused: a 400 to uuid-only parts that the same request with data did not get).",
            ["to", "reason"],
            registry=registry,
        )
        self.reference_data_models = Gauge(
            "audio_gateway_reference_data_models",
            "Models whose clips go with their data now because references to them did not work.",
            registry=registry,
            multiprocess_mode=LIVE_SUM,
        )
        self.reference_clips = Gauge(
            "audio_gateway_reference_clips",
            "Clips the gateway records as held by the upstream's processor cache.",
            registry=registry,
            multiprocess_mode=LIVE_SUM,
        )

        self.refusals = Counter(
            "audio_gateway_refusals",
            "Error answers the gateway made itself (not relayed upstream answers), by route and "
            "the OpenAI error code the client got.",
            ["route", "code"],
            registry=registry,
        )
        self.clips_over_window = Counter(
            "audio_gateway_clips_over_window",
            "Clips sent whole although longer than [chunking] threshold_seconds (the model's "
            "window) while [chunking] enabled = false; one per clip per request.",
            registry=registry,
        )
        self.normalized_clips = Counter(
            "audio_gateway_normalized_clips",
            "Clips decoded and converted to the model's form ([normalize]); a clip already a "
            "WAV in that form counts nothing, a cached conversion is not counted again.",
            registry=registry,
        )
        self.normalize_seconds = Histogram(
            "audio_gateway_normalize_seconds",
            "Time to decode, mix, resample and write one clip in the model's form ([normalize]).",
            buckets=STORAGE_BUCKETS_SECONDS,
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
        self.workers = Gauge(
            "audio_gateway_workers",
            "Serving processes of this gateway running now ([server] workers).",
            registry=registry,
            multiprocess_mode=LIVE_SUM,
        )
        self.workers.set(1)
        self.worker_restarts = Counter(
            "audio_gateway_worker_restarts",
            "Workers started again after one died while serving ([server] workers > 1).",
            registry=registry,
        )

        self._request_counters: dict[tuple[str, int], Counter] = {}
        self._latency_histograms: dict[str, Histogram] = {}

    def count_request(self, route: str, status: int) -> None:
        """`requests.labels(...).inc()`, with the labelled child looked up once per pair."""
        key = (route, status)
        counter = self._request_counters.get(key)
        if counter is None:
            counter = self._request_counters[key] = self.requests.labels(route, str(status))
        counter.inc()

    def count_refusal(self, route: str, code: str) -> None:
        self.refusals.labels(route, code).inc()

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

    def aggregate_from(self, directory: str) -> None:
        """From now on, `render()` speaks for every worker whose values are in `directory`
        (this process's among them: prometheus_client writes there when
        `PROMETHEUS_MULTIPROC_DIR` named it at start-up)."""
        self._multiprocess_dir = directory

    def write_sampled_gauges(self) -> None:
        """Multiprocess mode: write the gauges read from a function (`set_function`) to the
        directory, where the other workers' scrapes read them."""
        sampled = (self.cache_bytes, self.cache_entries, self.reference_clips)
        for gauge in (*sampled, self.reference_data_models):
            [family] = gauge.collect()
            gauge.set(family.samples[0].value)

    def render(self) -> bytes:
        if self._multiprocess_dir is None:
            return generate_latest(self.registry)
        self.write_sampled_gauges()
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self._multiprocess_dir)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
