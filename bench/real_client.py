"""`real-client`: what a user of the real RocketMQ client `rocketmq==0.4.4` sees against the bundled broker.

The C++-based client sends 128-byte bodies into `ingest`'s topic (8 queues) and reads them back:

1. `Producer.send_sync`, one message at a time, one producer;
2. the same with 8 producers sending together, each in its own process;
3. `PullConsumer.pull(topic, max_num=32)`: pulls of 32 over every queue of the topic, reading all
   that was sent (every body is read).

8 processes, not 8 threads: within one process the C++ client shares one client instance and one
message-id generator among all threads and producers, and concurrent sends are not safe. With 8
threads, on one producer or on 8, it failed some sends with "No route info of this topic" and gave
two messages the same msg id (UNIQ_KEY) a few times per 10,000 sends. Processes started in the same
second reuse ids too (the id's random part is seeded with the time in seconds): "ids reused" counts
the acknowledged sends whose id another send had. Every body is distinct, and the broker's duplicate
window (on by default) only drops a send whose id and body it stored (docs/protocol.md), so the broker
must hold every acknowledged send: the scenario checks that.

The client runs in children (:mod:`bench.real_client_child`), each with a deadline: the C++ client
can block for minutes when something goes wrong. Their `HOME` is a scratch directory in the run's
data directory, where the C++ client writes its logs. Without the client (not installed, or its
library missing) the scenario is skipped with a line saying so.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.cluster import Cluster, cluster
from bench.ingest import BODY, QUEUES, TOPIC, prepare_topic, stored_messages
from bench.report import percentiles_ms, progress, record

PRODUCERS = 8
PULL = 32
GROUP = "bench_real_client"
#: the 8 producers start sending together this long after they are launched (start-up, route lookup)
START_S = 3.0
#: time a child gets beyond its measurement: start-up, route lookups, shutdown
CHILD_OVERHEAD_S = 30.0
ROOT = Path(__file__).resolve().parents[1]


async def run_child(target: Cluster, command: str, args: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The JSON result of `python -m bench.real_client_child <command>`, killed if still running after
    `seconds` and CHILD_OVERHEAD_S."""
    home = target.data_dir / "real-client"
    home.mkdir(exist_ok=True)
    args = {"namesrv": target.namesrv_addr, "group": GROUP, **args}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.real_client_child",
        command,
        json.dumps(args),
        cwd=ROOT,
        env=dict(os.environ, HOME=str(home)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    timeout_s = seconds + CHILD_OVERHEAD_S
    stdout = stderr = b""
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout_s)
        problem = f"exited with code {process.returncode}" if process.returncode else ""
    except TimeoutError:
        problem = f"did not finish within {timeout_s:.0f} s"
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if problem or not stdout.strip():
        log = home / "logs" / "rocketmq-cpp" / f"{process.pid}_rocketmq-cpp.log.0"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:]) if log.exists() else "(no log)"
        detail = f"{stderr.decode(errors='replace')[-2000:]}\n{tail}"
        raise RuntimeError(f"the real client's {command} {problem or 'printed nothing'}\n{detail}")
    result: dict[str, Any] = json.loads(stdout.splitlines()[-1])
    return result


async def send(target: Cluster, producers: int, seconds: float, limit: int) -> list[dict[str, Any]]:
    """The children's results of `producers` producers sending together, `limit` sends in all."""
    start_at = time.time() + START_S if producers > 1 else 0.0
    args = {"topic": TOPIC, "body_bytes": len(BODY), "start_at": start_at, "seconds": seconds}
    args["limit"] = -(-limit // producers)
    return await asyncio.gather(*(run_child(target, "produce", args, START_S + seconds) for _ in range(producers)))


async def main(seconds: float, limit: int) -> None:
    rows: list[list[Any]] = []
    ids: Counter[str] = Counter()  # msg id (the UNIQ_KEY the client set) of every acknowledged send
    with cluster() as target:
        await prepare_topic(target)
        for producers in (1, PRODUCERS):
            results = await send(target, producers, seconds, limit)
            if "skipped" in results[0]:
                why = f"{results[0]['skipped']}; pip install rocketmq==0.4.4"
                print(f"  .. real-client skipped: the client rocketmq==0.4.4 cannot be imported ({why})")
                return
            mine = Counter(i for r in results for i in r["ids"])
            reused = mine.total() - len(mine) + sum(n for i, n in mine.items() if i in ids)
            ids += mine
            latencies = [latency for r in results for latency in r["latencies_s"]]
            errors = sum((Counter(r["errors"]) for r in results), Counter())
            elapsed = max(r["ended_at"] for r in results) - min(r["started_at"] for r in results)
            what = "send_sync, 1 producer" if producers == 1 else f"send_sync, {producers} producers (processes)"
            progress(
                f"{what}: {len(latencies) / elapsed:,.0f} msg/s"
                + (f"; {reused:,} acknowledged sends reused another's msg id" if reused else "")
                + (f"; errors: {dict(errors)}" if errors else "")
            )
            rows.append([what, len(latencies), round(elapsed, 1), round(len(latencies) / elapsed)])
            rows[-1] += [*percentiles_ms(latencies, 50, 99), errors.total(), reused]
        stored = await stored_messages(target)
        if stored != ids.total():
            raise RuntimeError(f"the real client had {ids.total():,} sends acknowledged, the broker holds {stored:,}")
        args = {"topic": TOPIC, "expect": stored, "max_num": PULL, "seconds": seconds}
        pulled = await run_child(target, "pull", args, seconds)
    received, elapsed = pulled["received"], pulled["elapsed_s"]
    if pulled["body_bytes"] != received * len(BODY) or (received < stored and elapsed < seconds):
        raise RuntimeError(
            f"the pull consumer read {received:,} of {stored:,} messages, {pulled['body_bytes']:,} bytes"
        )
    what = f"PullConsumer.pull, {PULL} at a time"
    progress(f"{what}: {received:,} of {stored:,} messages, {received / elapsed:,.0f} msg/s")
    rows.append([what, received, round(elapsed, 1), round(received / elapsed)])
    rows[-1] += [*percentiles_ms(pulled["latencies_s"], 50, 99), 0, 0]
    record(
        "real-client",
        ["rocketmq==0.4.4 (C++ client)", "messages", "seconds", "msg/s", "p50 ms", "p99 ms", "errors", "ids reused"],
        rows,
        {
            "body_bytes": len(BODY),
            "queues": QUEUES,
            "latency": "of one send_sync call; of one Pull request (PULL_MESSAGE, up to 32 messages)",
            "producers": "8 processes: concurrent sends within one process are not safe with this client",
            "ids reused": "acknowledged sends whose msg id (UNIQ_KEY) another send had (stored all the same)",
        },
    )
