"""The topic_metrics job: `python -m jobs.topic_metrics` or `spark-submit jobs/topic_metrics.py`.

The code is rocketspark.apps.topic_metrics (installed, so the job runs from any directory); docs/jobs.md.
"""

from __future__ import annotations

import sys

from rocketspark.apps.topic_metrics import main

if __name__ == "__main__":
    sys.exit(main())
