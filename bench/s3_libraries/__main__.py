"""`python -m bench.s3_libraries`: see run.py."""

from __future__ import annotations

import sys

from bench.s3_libraries.run import main

sys.exit(main())
