"""The replay_range job: `python -m jobs.replay_range` or `spark-submit jobs/replay_range.py`.

The code is rocketspark.apps.replay_range (installed, so the job runs from any directory); docs/jobs.md.
"""

from __future__ import annotations

import sys

from rocketspark.apps.replay_range import main

if __name__ == "__main__":
    sys.exit(main())
