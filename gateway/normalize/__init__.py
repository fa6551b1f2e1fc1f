"""Clips normalized to the model's form (`[normalize]`): its sample rate, channel count and
sample format, as WAV, so vLLM's API server neither resamples nor mixes channels.

form.py     pure: the target form, and whether a WAV header is already in it
convert.py  blocking: decode, mix and resample in blocks (libsndfile, soxr), write the WAV
source.py   `NormalizedSource`: any `AudioSource` seen through the normalization (the cache
            holds what it gives), and `Normalizer`, which makes them

A clip already a WAV in the form is sent byte for byte; any other is decoded and converted.
Inline `audio_data` and presigned URLs are not touched: the gateway does not read them.
May import: `audio`, `chunking` (its `reading`: a source's bytes as a file for libsndfile),
`config`, `errors`, `metrics`, `naming`. The pipeline and the dataset tools import it.
"""
