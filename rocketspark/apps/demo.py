"""The demo (`rocketspark demo`, `make demo`, `python -m jobs.main`): RocketMQ into Spark and back.

1. starts the embedded name server and broker (`python -m rocketspark.dev`) on free ports, with
   their data in a temporary directory;
2. creates the topic `DemoEvents` with 8 queues and sends N synthetic clickstream events to it with
   the Arrow send, in large batches;
3. runs the `topic_metrics` query once (`availableNow`): per-minute counts per tag and revenue, sent
   to the topic `DemoMetrics` and written to Parquet;
4. prints the busiest minutes, the totals next to what was sent, the consumer group's lag per queue
   and where the Parquet output is; exits 0 when the totals match and the lag is zero.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rocketspark.apps import dev_child, topic_metrics
from rocketspark.apps.clickstream import Totals, clickstream
from rocketspark.apps.common import (
    LogLevelOption,
    QueryRun,
    create_topic,
    group_lag,
    rocketmq_options,
    run_cli,
    setup_logging,
)
from rocketspark.processes import ServerProcess

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rocketspark import SendResult

log = logging.getLogger("rocketspark.demo")

EVENTS_TOPIC = "DemoEvents"
METRICS_TOPIC = "DemoMetrics"
GROUP = "demo_topic_metrics"
QUEUES = 8
#: rows per `send_arrow` call
SEND_ROWS = 50_000
#: `send_arrow` calls in flight
SENDS_IN_FLIGHT = 2
#: the query's micro-batches: a few, so that progress shows, each still large
BATCHES = 4
MIN_BATCH_ROWS = 100_000
#: the query must finish within this
QUERY_TIMEOUT_S = 600.0
TOP_MINUTES = 5


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def start_servers(workdir: Path) -> ServerProcess:
    os.environ[dev_child.PARENT_ENV] = str(os.getpid())  # the servers stop when this process dies
    servers = ServerProcess(
        "rocketspark.apps.dev_child",
        [
            *("--namesrv-port", "0", "--broker-port", "0", "--grpc-port", "0", "--dashboard-port", "0"),
            *("--data-dir", str(workdir / "data"), "--log-level", "WARNING"),
        ],
        workdir / "servers.log",
    )
    servers.start(timeout_s=60)
    return servers


def produce(namesrv: str, events: int, err: Console) -> Totals:
    """Send `events` clickstream events to EVENTS_TOPIC, each queue its share, with a progress bar."""
    from rocketspark import Producer  # noqa: PLC0415
    from rocketspark.client.config import credentials_from_env  # noqa: PLC0415

    totals = Totals()
    started = time.monotonic()
    with (
        Producer("demo-producer", namesrv_addr=namesrv, credentials=credentials_from_env()) as producer,
        ThreadPoolExecutor(SENDS_IN_FLIGHT, thread_name_prefix="demo-send") as pool,
        _progress(err) as bar,
    ):
        queues = sorted(producer.fetch_publish_queues(EVENTS_TOPIC), key=lambda q: (q.broker_name, q.queue_id))
        task = bar.add_task("events produced", total=events, rate="")
        pending: deque[tuple[Future[list[SendResult]], int]] = deque()

        def settle(future: Future[list[SendResult]], rows: int) -> None:
            sent = sum(result.count for result in future.result(timeout=120))
            if sent != rows:
                raise RuntimeError(f"a send of {rows} events stored {sent}")
            bar.advance(task, rows)
            done = bar.tasks[task].completed
            bar.update(task, rate=f"{done / max(time.monotonic() - started, 1e-3):,.0f} events/s")

        for index, (table, batch_totals) in enumerate(clickstream(events, len(queues), SEND_ROWS)):
            queue = queues[index % len(queues)]
            pending.append((pool.submit(producer.send_arrow, table, EVENTS_TOPIC, queue=queue), table.num_rows))
            totals.add(batch_totals)
            while len(pending) >= SENDS_IN_FLIGHT:
                settle(*pending.popleft())
        while pending:
            settle(*pending.popleft())
    return totals


def demo_session() -> SparkSession:
    from rocketspark.spark.session import local_session  # noqa: PLC0415

    return local_session(
        "rocketspark-demo",
        master="local[*]",
        **{"spark.sql.shuffle.partitions": "4", "spark.ui.showConsoleProgress": "false"},
    )


def admission_control() -> bool:
    """Whether the running PySpark passes the source trigger limits (docs/spark.md, "Spark versions")."""
    from rocketspark.spark import versions  # noqa: PLC0415

    return versions.has(versions.ADMISSION_CONTROL)


def run_query(spark: SparkSession, config: topic_metrics.MetricsConfig, events: int, err: Console) -> QueryRun:
    with _progress(err) as bar:
        task = bar.add_task("rows read     ", total=events, rate="starting the query")

        def on_progress(progress: dict[str, Any], run: QueryRun) -> None:
            from rocketspark.spark.progress import lag_behind_latest  # noqa: PLC0415

            rate = float(progress.get("processedRowsPerSecond") or 0.0)
            # the progress shows the source's latest offsets from PySpark 4.2 on
            lag = f", lag {lag_behind_latest(progress):,}" if admission_control() else ""
            bar.update(task, completed=run.rows, rate=f"{rate:,.0f} rows/s{lag}")

        return topic_metrics.run(spark, config, on_progress)


def summary(
    spark: SparkSession,
    config: topic_metrics.MetricsConfig,
    produced: Totals,
    out: Console,
) -> bool:
    """Print the busiest minutes, the totals and the lag; True when totals match and lag is zero
    (where the group's offsets reach an AvailableNow run's end: PySpark 4.2 and newer)."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    from rocketspark.spark.versions import PYSPARK_VERSION  # noqa: PLC0415

    rows = topic_metrics.read_metrics(spark, config.parquet).collect()
    top = sorted(rows, key=lambda r: (-r["events"], r["minute"]))[:TOP_MINUTES]
    table = Table(title=f"Top {len(top)} minutes by events (of {len(rows)} minutes)")
    for name in ("minute (UTC)", "events", "views", "clicks", "purchases", "revenue"):
        table.add_column(name, justify="left" if name.startswith("minute") else "right")
    for row in top:
        table.add_row(
            row["minute"].strftime("%Y-%m-%d %H:%M"),
            f"{row['events']:,}",
            f"{row['views']:,}",
            f"{row['clicks']:,}",
            f"{row['purchases']:,}",
            f"{row['revenue']:,.2f}",
        )
    out.print(table)

    computed = (
        sum(r["events"] for r in rows),
        sum(r["views"] for r in rows),
        sum(r["clicks"] for r in rows),
        sum(r["purchases"] for r in rows),
        sum((r["revenue"] for r in rows), Decimal(0)),
    )
    expected = (
        produced.events,
        produced.views,
        produced.clicks,
        produced.purchases,
        Decimal(produced.revenue_cents) / 100,
    )
    totals = Table(title="Totals")
    for name in ("", "events", "views", "clicks", "purchases", "revenue"):
        totals.add_column(name, justify="left" if not name else "right")
    totals.add_row("produced", *(f"{v:,}" for v in expected[:4]), f"{expected[4]:,.2f}")
    totals.add_row("in the Parquet output", *(f"{v:,}" for v in computed[:4]), f"{computed[4]:,.2f}")
    match = computed == expected
    totals.add_row("match", *(["yes" if a == b else "NO" for a, b in zip(computed, expected, strict=True)]))
    out.print(totals)

    lags = group_lag(config.namesrv, config.group, config.topic)
    lag_table = Table(title=f"Consumer group {config.group} on {config.topic}")
    for name in ("broker", "queue", "messages", "committed", "lag"):
        lag_table.add_column(name, justify="left" if name == "broker" else "right")
    for q in lags:
        lag_table.add_row(q.broker, str(q.queue_id), f"{q.max_offset:,}", f"{q.committed:,}", f"{q.lag:,}")
    lag_table.add_row(
        "total",
        "",
        f"{sum(q.max_offset for q in lags):,}",
        f"{sum(q.committed for q in lags):,}",
        f"{sum(q.lag for q in lags):,}",
    )
    out.print(lag_table)
    caught_up = bool(lags) and all(q.lag == 0 for q in lags)
    if not admission_control():
        out.print(
            f"PySpark {PYSPARK_VERSION} runs Trigger.AvailableNow as one batch the source is not told "
            "the end of: the group's offsets reach it when the next run plans (docs/spark.md, 'Spark versions')"
        )
        caught_up = bool(lags)

    sent = (
        spark.read.format("rocketmq")
        .options(**rocketmq_options(config.namesrv, topic=METRICS_TOPIC))
        .load()
        .agg(F.count(F.lit(1)).alias("messages"), F.countDistinct("keys").alias("minutes"))
        .first()
    )
    messages, minutes = (sent["messages"], sent["minutes"]) if sent else (0, 0)
    out.print(f"Topic {METRICS_TOPIC}: {messages:,} messages for {minutes:,} minutes (one per minute per batch)")
    out.print(f"Parquet output: {config.parquet} ({len(rows):,} rows, one per minute)")
    return _report(match, caught_up, out)


def _report(match: bool, caught_up: bool, out: Console) -> bool:
    if not match:
        out.print("[bold red]The totals do not match what was produced.[/]")
    if not caught_up:
        out.print("[bold red]The consumer group has not caught up.[/]")
    return match and caught_up


def _raise_on_sigterm() -> None:
    """SIGTERM ends the demo like Ctrl-C does, through its clean-up (servers stopped, files removed)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _wait_for_interrupt(servers: ServerProcess, out: Console) -> None:
    out.print(
        f"\nThe servers keep running: export NAMESRV_ADDR={servers.address} "
        f"(for example: rocketspark topic describe {EVENTS_TOPIC}). Ctrl-C stops them."
    )
    try:
        while servers.running():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass


def run_demo(events: int = 1_000_000, keep: bool = False) -> int:
    """Run the demo with `events` events; `keep` keeps the servers running (until Ctrl-C) and the
    data directory. Returns the exit code: 0 when the totals match and the lag is zero."""
    if events < 1:
        raise ValueError("the demo needs at least one event")
    started = time.monotonic()
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    err = Console(stderr=True, highlight=False)
    _raise_on_sigterm()
    workdir = Path(tempfile.mkdtemp(prefix="rocketspark-demo-"))
    servers: ServerProcess | None = None
    spark: SparkSession | None = None
    try:
        err.print(f"[bold]rocketspark demo[/]: {events:,} clickstream events, working in {workdir}")
        servers = start_servers(workdir)
        namesrv = servers.address
        err.print(f"name server and broker running, NAMESRV_ADDR={namesrv}")
        create_topic(namesrv, EVENTS_TOPIC, QUEUES)
        create_topic(namesrv, METRICS_TOPIC, 4)
        produced = produce(namesrv, events, err)
        err.print("starting Spark")
        spark = demo_session()
        config = topic_metrics.MetricsConfig(
            namesrv=namesrv,
            topic=EVENTS_TOPIC,
            parquet=str(workdir / "metrics.parquet"),
            checkpoint=str(workdir / "checkpoint"),
            output_topic=METRICS_TOPIC,
            group=GROUP,
            # batches of a quarter of the events, where PySpark passes the source trigger limits (4.2+)
            max_messages_per_trigger=max(MIN_BATCH_ROWS, -(-events // BATCHES)) if admission_control() else None,
            timeout_s=QUERY_TIMEOUT_S,
        )
        query_run = run_query(spark, config, events, err)
        ok = summary(spark, config, produced, out)
        wall = time.monotonic() - started
        out.print(
            f"Query: {query_run.rows:,} rows in {query_run.batches} batches, {query_run.seconds:.1f} s, "
            f"{query_run.rows_per_second:,.0f} rows/s. Demo wall time {wall:.1f} s."
        )
        if keep:
            out.print(f"Kept: {workdir} (servers' data, checkpoint, Parquet output)")
            spark.stop()
            spark = None
            _wait_for_interrupt(servers, out)
        else:
            out.print(f"(removed at exit with the servers' data; --keep keeps {workdir})")
        return 0 if ok else 1
    finally:
        if spark is not None:
            spark.stop()
        if servers is not None:
            servers.stop()
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command(help=__doc__)
def command(
    events: Annotated[int, typer.Option("--events", min=1, help="how many events the demo sends")] = 1_000_000,
    keep: Annotated[bool, typer.Option("--keep", help="keep the servers running (until Ctrl-C) and the data")] = False,
    log_level: LogLevelOption = "WARNING",
) -> int:
    setup_logging(log_level)
    return run_demo(events=events, keep=keep)


def main(argv: list[str] | None = None) -> int:
    return run_cli(app, argv, "demo")
