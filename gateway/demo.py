"""`audio-gateway demo`: the gateway and the stub upstream on local ports, all three
sidechannel forms sent through, and what the upstream decoded printed beside the files."""

from __future__ import annotations

import asyncio
import hashlib
import signal
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import pybase64
from aiohttp import web

from .app import create_app
from .audio.samples import write_tone
from .config import Config
from .stub_upstream import create_stub_app

CLIPS = {
    "tone_440hz.wav": (1.0, 440.0),
    "tone_660hz.wav": (0.5, 660.0),
    "tone_880hz.wav": (2.0, 880.0),
}


async def start_site(app: web.Application, port: int = 0) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    return runner, runner.addresses[0][1]


PROMPT = [{"role": "user", "content": "Transcribe the audio."}]


def demo_sidechannels(audio_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """One request's metadata per sidechannel form."""
    inline = pybase64.b64encode((audio_dir / "tone_440hz.wav").read_bytes()).decode()
    return [
        ("audio_path", {"audio_path": "tone_440hz.wav"}),
        ("audio_paths", {"audio_paths": ["tone_660hz.wav", "tone_880hz.wav"]}),
        ("audio_data", {"audio_data": f"data:audio/wav;base64,{inline}"}),
    ]


async def run_demo(port: int = 0, keep_running: bool = False) -> int:
    # Installed first: a Ctrl-C or SIGTERM while the demo requests run still shuts down cleanly.
    interrupted = _interrupt_event() if keep_running else None
    with tempfile.TemporaryDirectory(prefix="audio-gateway-demo-") as tmp:
        audio_dir = Path(tmp)
        for name, (seconds, frequency) in CLIPS.items():
            write_tone(audio_dir / name, seconds, frequency)
        digests = {
            hashlib.sha256((audio_dir / name).read_bytes()).hexdigest(): name for name in CLIPS
        }
        stub_runner, stub_port = await start_site(create_stub_app())
        config = Config.model_validate(
            {
                "server": {"port": port},
                "upstream": {"url": f"http://127.0.0.1:{stub_port}"},
                "audio": {"root": str(audio_dir)},
            }
        )
        gateway_runner, gateway_port = await start_site(create_app(config), port)
        gateway_url = f"http://127.0.0.1:{gateway_port}"
        print(f"stub upstream (vLLM-faithful) on http://127.0.0.1:{stub_port}")
        print(f"audio-gateway on {gateway_url}, audio root {audio_dir}\n")
        try:
            ok = await _send_all(gateway_url, audio_dir, digests)
            if interrupted is not None:
                _print_try_it(gateway_url)
                await interrupted.wait()
        finally:
            await gateway_runner.cleanup()
            await stub_runner.cleanup()
    print("demo finished: every clip arrived byte-identical" if ok else "demo FAILED")
    return 0 if ok else 1


async def _send_all(gateway_url: str, audio_dir: Path, digests: dict[str, str]) -> bool:
    ok = True
    async with aiohttp.ClientSession() as session:
        for form, metadata in demo_sidechannels(audio_dir):
            body = {"model": "demo", "messages": PROMPT, "metadata": metadata}
            async with session.post(f"{gateway_url}/v1/chat/completions", json=body) as response:
                answer = await response.json()
            print(f"metadata.{form} -> HTTP {response.status}")
            if response.status != 200:
                print(f"  error: {answer}")
                ok = False
                continue
            for clip in answer["stub"]["clips"]:
                name = digests.get(clip["sha256"], "NO MATCHING FILE")
                ok &= name != "NO MATCHING FILE"
                print(
                    f"  upstream decoded {name}: {clip['mime']}, {clip['bytes']} bytes, "
                    f"{clip['duration_seconds']:.2f} s at {clip['sample_rate']} Hz, sha256 matches"
                    if name in CLIPS
                    else f"  upstream decoded bytes matching no file: {clip}"
                )
    print()
    return ok


def _interrupt_event() -> asyncio.Event:
    """An event set by Ctrl-C or SIGTERM, so both servers shut down cleanly either way."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return stop


def _print_try_it(gateway_url: str) -> None:
    print(
        "Both servers stay up; try, then press Ctrl-C:\n"
        f"  curl -s {gateway_url}/v1/chat/completions -H 'Content-Type: application/json' \\\n"
        """    -d '{"model": "demo", "messages": [{"role": "user", "content": "Hi"}], """
        """"metadata": {"audio_path": "tone_440hz.wav"}}'\n"""
        f"  curl -s {gateway_url}/gateway/metrics | grep audio_gateway_cache\n",
        flush=True,
    )
