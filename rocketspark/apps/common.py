"""What the jobs share: logging, the SparkSession, topic administration, a consumer group's lag, and
running an `availableNow` query to its end with a deadline."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from rocketspark.logs import configure_logging

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from rocketspark.remoting.client import RemotingClient

T = TypeVar("T")
log = logging.getLogger(__name__)

#: one administrative request (route, topic creation, consume stats)
ADMIN_TIMEOUT_S = 30.0
#: how often a running query's progress is looked at
POLL_S = 0.25


#: the flags every job takes alike
NamesrvOption = Annotated[str, typer.Option(envvar="NAMESRV_ADDR", help="name servers host:port[;host:port]")]
MasterOption = Annotated[
    str | None, typer.Option(envvar="SPARK_MASTER", help="Spark master when not run by spark-submit")
]
LogLevelOption = Annotated[str, typer.Option(envvar="LOG_LEVEL", help="DEBUG, INFO, WARNING or ERROR")]


class JobError(Exception):
    """A job failed for a reason worth one line (the entry point exits 1)."""


def setup_logging(level: str) -> None:
    """Logs on stderr with their levels; py4j's chatter stays at WARNING."""
    configure_logging(level.upper())
    logging.getLogger().setLevel(level.upper())
    logging.getLogger("py4j").setLevel(logging.WARNING)


def parse_time(value: str) -> int:
    """Milliseconds since the epoch from ms digits or ISO 8601 (a time without zone is UTC)."""
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{value!r} is neither milliseconds since the epoch nor an ISO 8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def format_ms(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@contextmanager
def job_session(app_name: str, master: str | None = None, **conf: str) -> Iterator[SparkSession]:
    """The SparkSession a job runs on.

    An active session (a test's, a notebook's) is used as it is and left running. Under
    `spark-submit` the session comes from its settings; otherwise a local one (`master`, default
    `local[*]`) is started. A session started here is stopped at the end; its time zone is UTC unless
    the Spark configuration sets one.
    """
    from pyspark.sql import SparkSession  # noqa: PLC0415 - Spark starts only when a job runs

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # started by spark-submit (or pyspark): use its settings
        builder = SparkSession.builder.appName(app_name)
        for key, value in conf.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        if not session.sparkContext.getConf().contains("spark.sql.session.timeZone"):
            session.conf.set("spark.sql.session.timeZone", "UTC")
    else:
        from rocketspark.spark.session import local_session  # noqa: PLC0415

        session = local_session(app_name, master=master or "local[*]", **conf)
    try:
        yield session
    finally:
        session.stop()


def run_async(work: Callable[[RemotingClient], Awaitable[T]], timeout_s: float = ADMIN_TIMEOUT_S) -> T:
    """`work(client)` on a new event loop, with a deadline."""
    from rocketspark.client.config import credentials_from_env  # noqa: PLC0415
    from rocketspark.remoting.client import RemotingClient  # noqa: PLC0415

    async def main() -> T:
        client = RemotingClient(connect_timeout_s=5.0, request_timeout_s=10.0, credentials=credentials_from_env())
        try:
            async with asyncio.timeout(timeout_s):
                return await work(client)
        finally:
            await client.close()

    try:
        return asyncio.run(main())
    except TimeoutError:
        raise JobError(f"administrative requests did not finish within {timeout_s:g} s") from None


def _namesrv(namesrv: str) -> str:
    return namesrv.split(";", maxsplit=1)[0].strip()


def create_topic(namesrv: str, topic: str, queues: int, timeout_s: float = ADMIN_TIMEOUT_S) -> None:
    """Create `topic` with `queues` read and write queues on every master broker; wait until routed."""
    from rocketspark.client.api import admin  # noqa: PLC0415
    from rocketspark.client.api.route import get_cluster_info, get_route  # noqa: PLC0415
    from rocketspark.errors import TopicNotExistError  # noqa: PLC0415
    from rocketspark.protocol.body.topic import TopicConfig  # noqa: PLC0415

    async def work(client: RemotingClient) -> None:
        address = _namesrv(namesrv)
        while True:  # a broker that has just started may not have registered yet (the caller's deadline)
            info = await get_cluster_info(client, address)
            masters = {n: data.master_address for n, data in info.broker_addr_table.items() if data.master_address}
            if masters:
                break
            await asyncio.sleep(0.1)
        config = TopicConfig(topic, read_queue_nums=queues, write_queue_nums=queues)
        await asyncio.gather(*(admin.create_topic(client, broker, config) for broker in masters.values()))
        while True:
            try:
                route = await get_route(client, address, topic)
                if set(masters) <= {q.broker_name for q in route.queue_datas}:
                    return
            except TopicNotExistError:
                pass
            await asyncio.sleep(0.05)

    run_async(work, timeout_s)
    log.info("topic %s has %d queues on every broker", topic, queues)


def topic_exists(namesrv: str, topic: str) -> bool:
    from rocketspark.client.api.route import get_route  # noqa: PLC0415
    from rocketspark.errors import TopicNotExistError  # noqa: PLC0415

    async def work(client: RemotingClient) -> bool:
        try:
            await get_route(client, _namesrv(namesrv), topic)
        except TopicNotExistError:
            return False
        return True

    return run_async(work)


@dataclass(frozen=True, slots=True)
class QueueLag:
    """A consumer group on one queue: the queue's end, the group's committed offset, the difference."""

    broker: str
    queue_id: int
    max_offset: int
    committed: int

    @property
    def lag(self) -> int:
        return max(0, self.max_offset - self.committed)


def group_lag(namesrv: str, group: str, topic: str) -> list[QueueLag]:
    """`group`'s committed offsets on every queue of `topic` (GET_CONSUME_STATS), sorted by queue."""
    from rocketspark.client.api.admin import get_consume_stats  # noqa: PLC0415
    from rocketspark.client.api.route import get_route  # noqa: PLC0415
    from rocketspark.client.routes import master_addresses  # noqa: PLC0415

    async def work(client: RemotingClient) -> list[QueueLag]:
        route = await get_route(client, _namesrv(namesrv), topic)
        brokers = master_addresses(route)
        stats = await asyncio.gather(*(get_consume_stats(client, a, group, topic) for a in brokers.values()))
        return sorted(
            (
                QueueLag(queue.broker_name, queue.queue_id, wrapper.broker_offset, wrapper.consumer_offset)
                for s in stats
                for queue, wrapper in s.offset_table.items()
            ),
            key=lambda q: (q.broker, q.queue_id),
        )

    return run_async(work)


@dataclass(slots=True)
class QueryRun:
    """What one `availableNow` run of a query did."""

    batches: int = 0
    rows: int = 0
    seconds: float = 0.0
    last_progress: dict[str, Any] | None = None

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def await_query(
    query: StreamingQuery,
    timeout_s: float,
    on_progress: Callable[[dict[str, Any], QueryRun], None] | None = None,
) -> QueryRun:
    """Wait for an `availableNow` query to end, at most `timeout_s` (then stop it and fail).

    Every batch's progress is logged (INFO) and passed to `on_progress`; a query that failed raises.
    """
    run = QueryRun()
    started = time.monotonic()
    deadline = started + timeout_s
    seen: set[tuple[int, str]] = set()

    def collect() -> None:
        for progress in query.recentProgress:
            entry: dict[str, Any] = json.loads(progress.json)
            key = (int(entry["batchId"]), str(entry.get("timestamp")))
            if key in seen:
                continue
            seen.add(key)
            rows = int(entry.get("numInputRows") or 0)
            if "addBatch" in (entry.get("durationMs") or {}):
                run.batches += 1
            run.rows += rows
            run.last_progress = entry
            run.seconds = time.monotonic() - started
            log.info(
                "batch %d: %d rows read, %.0f rows/s (%d rows so far)",
                key[0],
                rows,
                float(entry.get("processedRowsPerSecond") or 0.0),
                run.rows,
            )
            if on_progress is not None:
                on_progress(entry, run)

    while query.isActive:
        collect()
        if time.monotonic() > deadline:
            query.stop()
            raise JobError(f"query {query.name or query.id} did not finish within {timeout_s:g} s")
        query.awaitTermination(POLL_S)  # type: ignore[arg-type]  # seconds, a float works
    collect()
    run.seconds = time.monotonic() - started
    error = query.exception()
    if error is not None:
        raise JobError(f"query {query.name or query.id} failed: {error}")
    return run


def rocketmq_options(namesrv: str, **options: str | int | None) -> dict[str, str]:
    """The options of a read or a write without the unset ones, signed with the credentials of the
    environment (ROCKETMQ_ACCESS_KEY, ROCKETMQ_SECRET_KEY, ROCKETMQ_SECURITY_TOKEN) when it has them."""
    return {
        "nameserver": namesrv,
        **credential_options(),
        **{k: str(v) for k, v in options.items() if v is not None},
    }


def credential_options() -> dict[str, str]:
    """The Spark options `accessKey`, `secretKey` and `securityToken` of the environment's
    credentials; empty without ROCKETMQ_ACCESS_KEY."""
    from rocketspark.client.config import credentials_from_env  # noqa: PLC0415

    credentials = credentials_from_env()
    if credentials is None:
        return {}
    options = {"accessKey": credentials.access_key, "secretKey": credentials.secret_key}
    if credentials.security_token:
        options["securityToken"] = credentials.security_token
    return options


def run_cli(app: Any, argv: list[str] | None, prog: str) -> int:
    """Run a typer app as a job's entry point: 0 when it succeeded, 1 when it failed (the error is
    logged), 2 on bad flags."""
    import typer  # noqa: PLC0415

    from rocketspark.extras import MissingExtraError, require_pyspark  # noqa: PLC0415

    try:
        if not {"-h", "--help"} & set(sys.argv[1:] if argv is None else argv):
            require_pyspark(prog)
        result = app(args=argv, prog_name=prog, standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        return 1
    except typer.TyperException as exc:  # bad flags: exit code 2
        print(f"{prog}: {exc.format_message()} (see --help)", file=sys.stderr)
        return exc.exit_code
    except (JobError, MissingExtraError) as exc:
        logging.getLogger(prog).error("%s", exc)  # noqa: TRY400 - one line, no traceback
        return 1
    except Exception:
        logging.getLogger(prog).exception("%s failed", prog)
        return 1
    return result if isinstance(result, int) else 0
