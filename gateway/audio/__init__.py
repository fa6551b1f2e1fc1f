"""The clip's bytes: where a path may point, reading, encoding and the encoded-audio cache.

Holds the path policy (`policy`), the chunked base64 encoder, the byte-bounded cache, header
durations, synthetic samples, and `sources/` (local files, S3 objects) behind one interface.
May import: `config`, `errors`, `metrics`, `naming`. Never the upstream, references or requests.
"""
