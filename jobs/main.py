"""The main job: the demo (rocketspark.apps.demo). `make demo`, `python -m jobs.main [--events N] [--keep]`."""

from __future__ import annotations

import sys

from rocketspark.apps.demo import main

if __name__ == "__main__":
    sys.exit(main())
