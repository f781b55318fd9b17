"""The official RocketMQ 5.x Node.js client (`rocketmq-client-nodejs@1.0.8`, in `.node-rmq5`, made by the
Makefile's test install) against the gRPC endpoint: it sends messages a 4.x pull reads, and its
SimpleConsumer receives and acks what our 4.x producer sent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rocketspark import AsyncProducer, Message
from tests.interop.v5.conftest import Grpc5Cluster

pytestmark = pytest.mark.interop

REPO_ROOT = Path(__file__).resolve().parents[3]
NODE_MODULES = REPO_ROOT / ".node-rmq5" / "node_modules"
SCRIPT = Path(__file__).with_name("node_client.js")


def run_node(args: dict[str, object], home: Path, timeout_s: float = 60.0) -> dict[str, list[dict[str, object]]]:
    node = shutil.which("node")
    if node is None or not (NODE_MODULES / "rocketmq-client-nodejs").is_dir():
        raise RuntimeError(f"node and {NODE_MODULES}/rocketmq-client-nodejs are needed: `make .node-rmq5/.installed`")
    home.mkdir(parents=True, exist_ok=True)
    args_file = home / "args.json"
    args_file.write_text(json.dumps(args))
    done = subprocess.run(
        [node, str(SCRIPT), str(args_file)],
        cwd=home,
        env={**os.environ, "HOME": str(home), "NODE_PATH": str(NODE_MODULES)},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, f"the Node.js client failed ({done.returncode}):\n{done.stderr[-4000:]}"
    result: dict[str, list[dict[str, object]]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def test_nodejs_client_sends_and_receives(grpc_cluster: Grpc5Cluster, tmp_path: Path) -> None:
    async with AsyncProducer("node_feed", namesrv_addr=grpc_cluster.namesrv.address) as producer:
        for i in range(3):
            await producer.send(Message("node_in", f"from 4.x {i}".encode(), tags="T", keys=f"k{i}"))
    args = {
        "endpoint": grpc_cluster.endpoint,
        "topic": "node_out",
        "group": "node_group",
        "send": [{"body": f"from node {i}", "tag": "N", "keys": [f"n{i}"]} for i in range(3)],
        "receive": 3,
        "receiveTopic": "node_in",
    }
    result = run_node(args, tmp_path / "node-home")
    stored = {message.msg_id: message for message in await grpc_cluster.pull_all("node_out")}
    assert set(stored) == {str(sent["messageId"]) for sent in result["sent"]}
    assert sorted(m.body.decode() for m in stored.values()) == [f"from node {i}" for i in range(3)]
    assert {(m.tags, m.keys) for m in stored.values()} == {("N", f"n{i}") for i in range(3)}
    received = sorted(result["received"], key=lambda m: str(m["body"]))
    assert [m["body"] for m in received] == [f"from 4.x {i}" for i in range(3)]
    assert [(m["tag"], m["keys"]) for m in received] == [("T", [f"k{i}"]) for i in range(3)]
