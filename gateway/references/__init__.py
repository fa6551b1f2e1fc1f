"""What vLLM holds: clips sent by uuid (`repeats = "reference"`) and the relay that retries a miss.

Holds the record of held clips (`held`), bodies that can go by reference or with data (`body`),
the per-model switch between references and data (`models`), and the reference relay (`relay`).

`models.ModelReferences(metrics, miss_ratio=..., retry_seconds=..., refuses_uuid_only=...)` is
where a model's clips stop going by reference: learned from misses right after the data was
accepted, and from a 400 to uuid-only parts that the same request with data does not get.
`refuses_uuid_only: Callable[[str], bool]` (served model name -> whether it is known up front
to refuse uuid-only parts, e.g. a profile for `--tokenizer-mode mistral`) makes those models'
clips always go with data and uuid; `app.create_app` passes it (today: no model).

May import: `upstream`, `bridge`, `audio`, `splice`, `metrics`.
"""
