"""What the model sees with and without `[normalize]` (`python -m bench.normalize.quality`).

Run it in the vLLM compatibility venv (`.ci/vllm-compat` builds it): it needs vLLM 0.33's own
code. For 44.1 and 48 kHz stereo sources (WAV, FLAC, MP3) of a test signal whose ideal 16 kHz
mono form is known exactly (sinusoids below 7 kHz, slow envelopes, plus tones above 8 kHz that
must vanish), it compares:

- vLLM: the original clip through vLLM's media loader (`AudioMediaIO.load_bytes`: decode,
  mean of the channels) and its resampler (`AudioResampler`, each method it offers; its
  default is torchaudio);
- gateway: the gateway's normalized clip (`gateway.normalize.convert`: soxr, streamed in
  blocks) through the same loader (no resampling left to do).

Each waveform goes through a WhisperFeatureExtractor with 128 mel bins (Qwen2-Audio's). Per
row: the log-mel features' largest and mean absolute difference and the waveform SNR, between
the gateway and each vLLM method, and each path against the ideal; and the CPU of the
decode + resample (best of --repeats). Prints a Markdown table (and --json).
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import soundfile

from gateway.normalize.convert import convert
from gateway.normalize.form import TargetForm

TARGET_HZ = 16_000
GATEWAY = "gateway (soxr HQ, streamed)"  # what [normalize] ships; the other rows against it
FORMATS = {"WAV": ("WAV", "PCM_16"), "FLAC": ("FLAC", "PCM_16"), "MP3": ("MP3", None)}


def test_signal(rate: int, seconds: float, seed: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """(stereo source at `rate`, the ideal 16 kHz mono mean of its in-band part)."""
    rng = np.random.default_rng(seed)
    tones = [
        (rng.uniform(60, 7000), rng.uniform(0.02, 0.08), rng.uniform(0, 6.3)) for _ in range(24)
    ]
    high = [(rng.uniform(8500, min(20000, rate / 2 - 500)), 0.05, 0.0) for _ in range(4)]

    def render(at: int, parts: list[tuple[float, float, float]], channel: int) -> np.ndarray:
        t = np.arange(int(seconds * at)) / at
        out = np.zeros_like(t)
        for i, (freq, amp, phase) in enumerate(parts):
            if i % 2 == channel:
                envelope = 0.6 + 0.4 * np.sin(2 * np.pi * (0.5 + i / 10) * t + phase)
                out += amp * envelope * np.sin(2 * np.pi * freq * t + phase)
        return out

    source = np.stack([render(rate, tones + high, c) for c in (0, 1)], axis=1)
    ideal = (render(TARGET_HZ, tones, 0) + render(TARGET_HZ, tones, 1)) / 2
    return source.astype(np.float32), ideal.astype(np.float32)


def encoded(samples: np.ndarray, rate: int, name: str) -> bytes:
    container, subtype = FORMATS[name]
    out = io.BytesIO()
    soundfile.write(out, samples, rate, format=container, subtype=subtype)
    return out.getvalue()


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    n = min(len(reference), len(other))
    noise = np.sum((reference[:n] - other[:n]) ** 2)
    return float(10 * np.log10(np.sum(reference[:n] ** 2) / max(noise, 1e-30)))


def best_ms(work: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.process_time()
        result = work()
        best = min(best, time.process_time() - started)
    return best * 1000, result


def measure(
    rates: list[int], formats: list[str], seconds: float, repeats: int
) -> list[dict[str, Any]]:
    from transformers import WhisperFeatureExtractor
    from vllm.multimodal.audio import AudioResampler
    from vllm.multimodal.media.audio import AudioMediaIO

    extractor = WhisperFeatureExtractor(feature_size=128)  # Qwen2-Audio's: 128 mel bins, 16 kHz
    loader = AudioMediaIO()

    def features(wave: np.ndarray) -> np.ndarray:
        out = extractor(wave, sampling_rate=TARGET_HZ, return_tensors="np")
        return np.asarray(out["input_features"][0])

    def vllm_path(data: bytes, method: str) -> np.ndarray:
        audio, rate = loader.load_bytes(data)
        return np.asarray(AudioResampler(TARGET_HZ, method=method).resample(audio, orig_sr=rate))

    def gateway_path(data: bytes, quality: str) -> np.ndarray:
        from gateway.normalize import convert as module

        module.RESAMPLE_QUALITY = quality  # the measured alternative; the shipped one is HQ
        out = io.BytesIO()
        convert(io.BytesIO(data), TargetForm(TARGET_HZ, 1, "PCM_16"), out, max_seconds=3600)
        module.RESAMPLE_QUALITY = "HQ"
        audio, rate = loader.load_bytes(out.getvalue())
        assert rate == TARGET_HZ
        return np.asarray(audio)

    rows = []
    for rate in rates:
        source, ideal = test_signal(rate, seconds)
        ideal_mel = features(ideal)
        for name in formats:
            data = encoded(source, rate, name)
            paths: dict[str, Callable[[], np.ndarray]] = {
                GATEWAY: functools.partial(gateway_path, data, "HQ"),
                "gateway (soxr VHQ, streamed)": functools.partial(gateway_path, data, "VHQ"),
            }
            for method in ("torchaudio", "soxr", "scipy", "pyav"):
                label = f"vLLM {method}" + (" (default)" if method == "torchaudio" else "")
                paths[label] = functools.partial(vllm_path, data, method)
            waves = {label: best_ms(work, repeats) for label, work in paths.items()}
            gateway_wave = waves[GATEWAY][1]
            gateway_mel = features(gateway_wave)
            for label, (ms, wave) in waves.items():
                mel = features(wave)
                rows.append(
                    {
                        "source": f"{rate / 1000:g} kHz stereo {name}",
                        "path": label,
                        "cpu_ms": round(ms, 2),
                        "vs_gateway_mel_max": round(float(np.max(np.abs(mel - gateway_mel))), 4),
                        "vs_gateway_mel_mean": round(float(np.mean(np.abs(mel - gateway_mel))), 5),
                        "vs_gateway_snr_db": round(snr_db(wave, gateway_wave), 1),
                        "vs_ideal_mel_max": round(float(np.max(np.abs(mel - ideal_mel))), 4),
                        "vs_ideal_mel_mean": round(float(np.mean(np.abs(mel - ideal_mel))), 5),
                        "vs_ideal_snr_db": round(snr_db(ideal, wave), 1),
                    }
                )
    return rows


def markdown(rows: list[dict[str, Any]], seconds: float) -> str:
    head = (
        f"| source ({seconds:g} s) | path | CPU ms | log-mel max / mean vs gateway | "
        "SNR vs gateway dB | log-mel max / mean vs ideal | SNR vs ideal dB |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n"
    )
    lines = []
    for r in rows:
        versus = (
            f"{r['vs_gateway_mel_max']} / {r['vs_gateway_mel_mean']} | {r['vs_gateway_snr_db']}"
        )
        if r["path"] == GATEWAY:
            versus = "(the reference) | -"
        lines.append(
            f"| {r['source']} | {r['path']} | {r['cpu_ms']} | {versus} | "
            f"{r['vs_ideal_mel_max']} / {r['vs_ideal_mel_mean']} | {r['vs_ideal_snr_db']} |"
        )
    return head + "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.normalize.quality",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rates", type=int, nargs="+", default=[44100, 48000])
    parser.add_argument("--formats", nargs="+", choices=sorted(FORMATS), default=list(FORMATS))
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each source")
    parser.add_argument("--repeats", type=int, default=3, help="CPU: the best of this many runs")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead")
    args = parser.parse_args(argv)
    rows = measure(args.rates, args.formats, args.seconds, args.repeats)
    print(json.dumps(rows, indent=1) if args.json else markdown(rows, args.seconds))


if __name__ == "__main__":
    main()
