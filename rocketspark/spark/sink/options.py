"""The sink's options and input columns, checked once on the driver before any task starts
(docs/spark.md, "Writing", describes each)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from rocketspark.errors import ConfigError, ValidationError
from rocketspark.message.validation import validate_group, validate_send_topic
from rocketspark.remoting.signing import SessionCredentials
from rocketspark.spark.option_values import (
    CREDENTIAL_OPTIONS,
    TLS_OPTIONS,
    bool_option,
    credentials_option,
    int_option,
    lowered_options,
    namesrv_option,
    tls_option,
)
from rocketspark.spark.sink.transactional.options import transaction_log_option

DEFAULT_PRODUCER_GROUP = "spark-rocketmq-producer"
#: transactional writes default to a group of their own: brokers send checks to any producer of a
#: half message's group, and only transactional writers can answer them
DEFAULT_TRANSACTIONAL_GROUP = "spark-rocketmq-txn-producer"
#: transactionMaxOpenSeconds: one of Apache's check rounds (transactionCheckInterval, 60 s): Apache
#: writes an immune half message back once a round until the time passed, also after it was committed
DEFAULT_TRANSACTION_MAX_OPEN_S = 60
#: longer than a producer's 3 s: a write waits out a busy broker rather than fail the task
DEFAULT_SEND_TIMEOUT_MS = 30_000
DEFAULT_RETRIES = 2
DEFAULT_BATCH_SIZE = 4_096

#: every option the sink reads (lower case), and those Spark itself passes to writers
KNOWN_SINK_OPTIONS = frozenset(
    {
        "nameserver",
        "namesrvaddr",
        "topic",
        "producergroup",
        "sendtimeoutms",
        "retries",
        "batchsize",
        "idempotentwrites",
        "txnappid",
        "txnversion",
        "delaylevel",
        "transactional",
        "transactionlog",
        "transactionmaxopenseconds",
        "checkpointlocation",  # Spark's, for streaming writes: the default place of transactionLog
        "queryname",  # Spark's, for a streaming query given a name: not used
        "path",  # what save(path) / start(path) passes: not used
    }
    | CREDENTIAL_OPTIONS
    | TLS_OPTIONS
)

_STRING = "string"
#: the columns a written DataFrame may have, and the Spark types each accepts
ACCEPTED_COLUMNS: dict[str, tuple[str, ...]] = {
    "body": ("binary", _STRING),
    "topic": (_STRING,),
    "tags": (_STRING,),
    "keys": (_STRING, "array<string>"),
    "properties": ("map<string,string>",),
    "queueId": ("int", "smallint", "bigint"),
    "shardingKey": (_STRING,),
    "delayLevel": ("int", "smallint", "bigint"),
}


@dataclass(frozen=True, slots=True)
class SinkOptions:
    namesrv_addr: str
    topic: str | None = None  # None: every row names its topic in the `topic` column
    producer_group: str = DEFAULT_PRODUCER_GROUP
    send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS
    retries: int = DEFAULT_RETRIES
    batch_size: int = DEFAULT_BATCH_SIZE
    #: deterministic ids (docs/spark.md, "Idempotent writes"); None: the default of the write's kind
    idempotent_writes: bool | None = None
    txn_app_id: str | None = None
    txn_version: int | None = None
    #: the delay level of rows whose `delayLevel` column is null or missing (0: not delayed)
    delay_level: int = 0
    #: signs every request (ACL 1.0); its repr shows the access key only
    credentials: SessionCredentials | None = None
    #: every connection is TLS, the servers' certificates verified against `tls_trust` (useTLS, tlsTrust)
    use_tls: bool = False
    tls_trust: str | None = None
    #: rows sent as half messages, committed by the driver (rocketspark.spark.sink.transactional); the
    #: directory of the batch records, when one is named (transactionLog, else in checkpointLocation)
    transactional: bool = False
    transaction_log: str | None = None
    #: how long a batch's half messages may stay open (transactionMaxOpenSeconds): their
    #: CHECK_IMMUNITY_TIME_IN_SECONDS, brokers do not check them before; 0: checked after the broker's
    #: transactionTimeOut
    transaction_max_open_s: int = DEFAULT_TRANSACTION_MAX_OPEN_S

    def idempotent(self, streaming: bool) -> bool:
        """Whether this write sends deterministic ids: by default streaming writes do, and batch
        writes that name a transaction (`txnAppId` and `txnVersion`), but not transactional ones,
        whose batch record gives exactly once (the ids cost a fifth to a third of a write's speed)."""
        if self.idempotent_writes is not None:
            return self.idempotent_writes
        if self.transactional:
            return False
        return streaming or self.txn_app_id is not None

    def check_kind(self, streaming: bool) -> None:
        """ConfigError for a batch write asked for deterministic ids or a transactional write without
        naming a transaction."""
        if not streaming and self.transactional and self.txn_app_id is None:
            raise ConfigError(
                "option transactional=true needs the options txnAppId and txnVersion in a batch write: they "
                "name the batch's transaction record, so a run that failed mid-commit is finished by the next "
                "run of the same txnAppId and txnVersion instead of staying partly visible"
            )
        if not streaming and self.idempotent(streaming) and self.txn_app_id is None:
            raise ConfigError(
                "option idempotentWrites=true needs the options txnAppId and txnVersion in a batch write: "
                "they name what a run writes, as the query and batch ids of a streaming write do"
            )


def parse_sink(options: Mapping[str, str]) -> SinkOptions:
    """Check every option; ConfigError (a ValueError) says which one is wrong and why."""
    lowered = lowered_options(options, KNOWN_SINK_OPTIONS)
    use_tls, tls_trust = tls_option(lowered)
    namesrv = namesrv_option(lowered)
    topic = lowered.get("topic")
    if topic is not None:
        topic = topic.strip()
        try:
            validate_send_topic(topic)
        except ValidationError as exc:
            raise ConfigError(f"option topic: {exc}") from None
    transactional = bool_option(lowered, "transactional", False)
    group = lowered.get(
        "producergroup", DEFAULT_TRANSACTIONAL_GROUP if transactional else DEFAULT_PRODUCER_GROUP
    ).strip()
    try:
        validate_group(group)
    except ValidationError as exc:
        raise ConfigError(f"option producerGroup: {exc}") from None
    retries = int_option(lowered, "retries", minimum=0)
    app_id = lowered.get("txnappid")
    version = int_option(lowered, "txnVersion", minimum=0)
    if app_id is not None and not app_id.strip():
        raise ConfigError("option txnAppId: must not be empty")
    if (app_id is None) != (version is None):
        raise ConfigError("options txnAppId and txnVersion go together: set both or neither")
    delay_level = int_option(lowered, "delayLevel", minimum=0) or 0
    if transactional and delay_level:
        raise ConfigError("option delayLevel: transactional writes cannot delay rows")
    return SinkOptions(
        namesrv_addr=namesrv,
        topic=topic,
        producer_group=group,
        send_timeout_ms=int_option(lowered, "sendTimeoutMs", minimum=1) or DEFAULT_SEND_TIMEOUT_MS,
        retries=DEFAULT_RETRIES if retries is None else retries,
        batch_size=int_option(lowered, "batchSize", minimum=1) or DEFAULT_BATCH_SIZE,
        idempotent_writes=bool_option(lowered, "idempotentWrites", True) if "idempotentwrites" in lowered else None,
        txn_app_id=app_id.strip() if app_id is not None else None,
        txn_version=version,
        delay_level=delay_level,
        credentials=credentials_option(lowered),
        use_tls=use_tls,
        tls_trust=tls_trust,
        transactional=transactional,
        transaction_log=transaction_log_option(lowered),
        transaction_max_open_s=_max_open(lowered),
    )


def _max_open(lowered: Mapping[str, str]) -> int:
    seconds = int_option(lowered, "transactionMaxOpenSeconds", minimum=0)
    return DEFAULT_TRANSACTION_MAX_OPEN_S if seconds is None else seconds


def _type_name(data_type: DataType) -> str:
    if isinstance(data_type, BinaryType):
        return "binary"
    if isinstance(data_type, StringType):
        return _STRING
    if isinstance(data_type, IntegerType):
        return "int"
    if isinstance(data_type, ShortType):
        return "smallint"
    if isinstance(data_type, LongType):
        return "bigint"
    if isinstance(data_type, ArrayType) and isinstance(data_type.elementType, StringType):
        return "array<string>"
    if (
        isinstance(data_type, MapType)
        and isinstance(data_type.keyType, StringType)
        and isinstance(data_type.valueType, StringType)
    ):
        return "map<string,string>"
    return str(data_type.simpleString())


def check_input(schema: StructType, options: SinkOptions) -> None:
    """The written DataFrame's columns are ones the sink knows, of types it takes; ConfigError
    naming what is wrong otherwise."""
    names = list(schema.fieldNames())
    unexpected = [n for n in names if n not in ACCEPTED_COLUMNS]
    accepted = ", ".join(f"{n} ({' or '.join(t)})" for n, t in ACCEPTED_COLUMNS.items())
    if unexpected:
        raise ConfigError(
            f"format rocketmq cannot write the column{'s' if len(unexpected) > 1 else ''} "
            f"{', '.join(unexpected)}; it writes the columns {accepted}: select those"
        )
    if "body" not in names:
        raise ConfigError(f"format rocketmq needs a body column to write; it writes the columns {accepted}")
    if options.topic is None and "topic" not in names:
        raise ConfigError("format rocketmq needs a topic to write to: set the option topic or give a topic column")
    for field in schema.fields:
        found, allowed = _type_name(field.dataType), ACCEPTED_COLUMNS[field.name]
        if found not in allowed:
            raise ConfigError(f"column {field.name} is {found}; format rocketmq writes it as {' or '.join(allowed)}")
