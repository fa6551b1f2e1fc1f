"""`python -m bench.audio_models`: see run.py."""

from __future__ import annotations

import sys

from bench.audio_models.run import main

sys.exit(main())
