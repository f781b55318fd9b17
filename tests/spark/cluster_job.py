"""A Spark job for tests/spark/test_sink_cluster.py, run in its own process (one SparkContext each).

On master `local-cluster[2,1,1024]` (two executor JVMs, each with its own Python workers) it streams
one topic with the rocketmq source into another with the rocketmq sink (`availableNow`). Before it
stops Spark it lists the machine's open TCP connections to the given name server and brokers and who
owns each (an executor id, "driver", or "other"), found through /proc: the connection's socket, the
process that holds it, and that process's ancestors up to an executor JVM
(`CoarseGrainedExecutorBackend --executor-id N`) or this driver process. The last stdout line is
`RESULT <json>`.

    python tests/spark/cluster_job.py NAMESRV SOURCE_TOPIC SINK_TOPIC GROUP CHECKPOINT ENDPOINT...
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rocketspark.spark.session import local_session
from tests.sockets import ESTABLISHED, socket_inodes, tcp_sockets

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MASTER = "local-cluster[2,1,1024]"
EXECUTORS = 2
TIMEOUT_S = 200.0


def _connections_to(endpoints: set[str]) -> dict[int, tuple[str, str]]:
    """Established IPv4 connections to `endpoints`, by socket inode: (local address, remote address)."""
    return {s.inode: (s.local, s.remote) for s in tcp_sockets() if s.state == ESTABLISHED and s.remote in endpoints}


def _socket_owners(inodes: set[int]) -> dict[int, int]:
    """The process that holds each socket inode."""
    owners = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            held = socket_inodes(int(proc.name))
        except OSError:  # gone meanwhile, or not ours
            continue
        owners.update(dict.fromkeys(held & inodes, int(proc.name)))
    return owners


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _owner(pid: int, driver_pid: int) -> str:
    """The executor id of the executor JVM `pid` descends from, "driver" if it descends from this
    process (the driver and the JVM it started), else "other"."""
    while pid > 1:
        if pid == driver_pid:
            return "driver"
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in args:
            return args[args.index(b"--executor-id") + 1].decode()
        pid = _parent(pid)
    return "other"


def connection_owners(endpoints: set[str]) -> list[dict[str, str | int]]:
    """Every open connection to `endpoints` on this machine, with the process that holds it."""
    connections = _connections_to(endpoints)
    owners = _socket_owners(set(connections))
    return [
        {"local": local, "remote": remote, "pid": owners[inode], "owner": _owner(owners[inode], os.getpid())}
        for inode, (local, remote) in connections.items()
        if inode in owners
    ]


def watch_owners(endpoints: set[str], stop: threading.Event, seen: dict[str, set[str]]) -> None:
    """Every owner each local address had while the job ran, sampled twice a second: a worker's
    connection may close before the end, and its port then serve another process's connection."""
    while not stop.wait(0.5):
        note_owners(connection_owners(endpoints), seen)


def note_owners(connections: list[dict[str, str | int]], seen: dict[str, set[str]]) -> None:
    for connection in connections:
        seen.setdefault(str(connection["local"]), set()).add(str(connection["owner"]))


def wait_for_executors(spark: SparkSession, count: int, timeout_s: float) -> None:
    """Until `count` executors have registered (the driver's block manager counts itself too)."""
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    deadline = time.monotonic() + timeout_s
    while status.size() < count + 1:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{status.size() - 1} of {count} executors registered in {timeout_s} s")
        time.sleep(0.5)
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()


def main(namesrv: str, source: str, sink: str, group: str, checkpoint: str, endpoints: list[str]) -> int:
    started = time.monotonic()
    spark = local_session(
        "rocketspark-cluster-test",
        master=MASTER,
        **{
            "spark.driver.host": "127.0.0.1",
            "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
            "spark.executorEnv.SPARK_LOCAL_IP": "127.0.0.1",
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        },
    )
    try:
        wait_for_executors(spark, EXECUTORS, 120.0)
        seen: dict[str, set[str]] = {}
        stop_watching = threading.Event()
        watcher = threading.Thread(target=watch_owners, args=(set(endpoints), stop_watching, seen), daemon=True)
        watcher.start()
        frame = (
            spark.readStream.format("rocketmq")
            .option("nameserver", namesrv)
            .option("topic", source)
            .option("consumerGroup", group)
            .option("startingOffsets", "earliest")
            .load()
        )
        query = (
            frame.select("body", "tags", "keys", "properties")
            .writeStream.format("rocketmq")
            .option("nameserver", namesrv)
            .option("topic", sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(TIMEOUT_S):
            query.stop()
            print(f"the query did not finish in {TIMEOUT_S} s", file=sys.stderr)
            return 1
        stop_watching.set()
        watcher.join()
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        connections = connection_owners(set(endpoints))
        note_owners(connections, seen)
        result = {
            "seconds": round(time.monotonic() - started, 1),
            "inputRows": sum(p["numInputRows"] for p in progress),
            "outputRows": sum(p["sink"]["numOutputRows"] for p in progress),
            "batchDurationsMs": [p["durationMs"] for p in progress],
            "connections": connections,
            "ownersSeen": {local: sorted(owners) for local, owners in seen.items()},
        }
    finally:
        spark.stop()
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6], sys.argv[6:]))
