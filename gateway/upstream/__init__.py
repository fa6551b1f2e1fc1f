"""The connection to vLLM: the pooled HTTP/1.1 client and everything that crosses it.

Holds the pool and its connections, the relay (header policy, buffered vs streamed copy), the
segmented outgoing body, multipart forms, request content codings, the SSE watch, and the
WebSocket relay. May import: `auth`, `config`, `errors`, `metrics`, `origin`, `hop_headers`,
`audio`, and `affinity` (the pool sets a body's clip key in the `[routing]` headers).
"""
