"""Modules the broker's libraries import on first use, imported before it serves.

pyarrow imports pandas the first time it converts Python or numpy values (`pa.array` of a list or
an ndarray, a compute function given a Python scalar), which the broker does on its event loop: a
round of more than 16 single sends (their keys made into one array), the first Arrow send with
user properties, a take by row numbers. That import took 0.2 s on a quiet machine (0.4-1.2 s with
the other cores busy) and stalled every request in flight once per broker start (issue 24:
overlapping sends at 1,000 msg/s had p99 104-224 ms, all of it in one cluster about a second in).
Importing it here costs about 38 MiB of resident memory and that time at start-up instead.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def preload() -> None:
    """Run pyarrow's first conversion of numpy values now, so it imports what it imports lazily."""
    pa.array(np.zeros(1, dtype=np.int64))
