"""The main job (until the "Main job" issue replaces it): a name server tour over TCP.

Starts a name server on a free loopback port, then, as any RocketMQ client would, asks it for
its cluster info and topic list, and does a KV config round trip (put, get, list, delete, get).
Run with `make demo` or `python -m jobs.main`.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

from rocketspark.logs import configure_logging
from rocketspark.processes import namesrv_process
from rocketspark.remoting.body.kv import KVTable
from rocketspark.remoting.body.route import ClusterInfo
from rocketspark.remoting.body.topic import TopicList
from rocketspark.remoting.codes import RequestCode, ResponseCode, code_name
from rocketspark.remoting.command import RemotingCommand
from rocketspark.remoting.header import CommandHeader
from rocketspark.remoting.headers.namesrv import (
    DeleteKVConfigRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    PutKVConfigRequestHeader,
)
from rocketspark.remoting.sync import SyncRemotingClient
from rocketspark.tables import format_table

log = logging.getLogger("jobs.main")

NAMESPACE = "rocketspark.demo"


def step(message: str) -> None:
    print(f"\n== {message}", flush=True)


def call(
    client: SyncRemotingClient, address: str, code: RequestCode, header: CommandHeader | None = None
) -> RemotingCommand:
    response = client.invoke(address, RemotingCommand.request(code, header), timeout_s=5)
    status = code_name(response.code, ResponseCode)
    print(f"   {code_name(code):<45} -> {status}{'  ' + response.remark if response.remark else ''}")
    return response


def tour(client: SyncRemotingClient, address: str) -> None:
    step(f"cluster info from the name server at {address}")
    cluster = ClusterInfo.from_json(call(client, address, RequestCode.GET_BROKER_CLUSTER_INFO).body)
    rows = [
        (name, data.cluster, broker_id, broker_addr)
        for name, data in cluster.broker_addr_table.items()
        for broker_id, broker_addr in sorted(data.broker_addrs.items())
    ]
    print(format_table(["broker", "cluster", "id", "address"], rows) if rows else "   (no broker has registered yet)")
    topics = TopicList.from_json(call(client, address, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)
    print(f"   topics: {', '.join(topics.topic_list) or '(none)'}")

    step(f"KV config round trip in namespace {NAMESPACE!r}")
    entries = {"owner": "rocketspark", "purpose": "demo", "retention.hours": "72"}
    for key, value in entries.items():
        call(client, address, RequestCode.PUT_KV_CONFIG, PutKVConfigRequestHeader(NAMESPACE, key, value))
    got = call(client, address, RequestCode.GET_KV_CONFIG, GetKVConfigRequestHeader(NAMESPACE, "purpose"))
    print(f"   purpose = {got.decode_header(GetKVConfigResponseHeader).value}")
    listed = KVTable.from_json(
        call(client, address, RequestCode.GET_KVLIST_BY_NAMESPACE, GetKVListByNamespaceRequestHeader(NAMESPACE)).body
    )
    print(format_table(["key", "value"], sorted(listed.table.items())))
    if listed.table != entries:
        raise RuntimeError(f"KV round trip returned {listed.table}, expected {entries}")
    call(client, address, RequestCode.DELETE_KV_CONFIG, DeleteKVConfigRequestHeader(NAMESPACE, "purpose"))
    gone = call(client, address, RequestCode.GET_KV_CONFIG, GetKVConfigRequestHeader(NAMESPACE, "purpose"))
    if gone.code != ResponseCode.QUERY_NOT_FOUND:
        raise RuntimeError(f"deleted key still answered with {code_name(gone.code, ResponseCode)}")


def main() -> int:
    configure_logging("WARNING")
    with tempfile.TemporaryDirectory(prefix="rocketspark-demo-") as tmp:
        step("starting a name server")
        with namesrv_process(Path(tmp) / "namesrv") as namesrv, SyncRemotingClient() as client:
            print(f"   listening on {namesrv.address} (pid {namesrv.pid})")
            tour(client, namesrv.address)
            step("stopping the name server")
        print(f"   exit code {namesrv.stop()}")
    print("\nDone.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
