"""The archive_topic job: `python -m jobs.archive_topic` or `spark-submit jobs/archive_topic.py`.

The code is rocketspark.apps.archive_topic (installed, so the job runs from any directory); docs/jobs.md.
"""

from __future__ import annotations

import sys

from rocketspark.apps.archive_topic import main

if __name__ == "__main__":
    sys.exit(main())
