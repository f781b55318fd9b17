"""The real client rocketmq==0.4.4 (plain TCP only) against servers in permissive mode."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.harness import ServerFactory
from tests.interop.driver import OutgoingMessage, RealClient, Send
from tests.tls.certs import Certificates


@pytest.mark.slow
async def test_real_client_works_over_plain_tcp_in_permissive_mode(
    servers: ServerFactory, certs: Certificates, tmp_path: Path
) -> None:
    tls = ("--tls.server.mode", "permissive", "--tls.server.certPath", str(certs.cert))
    namesrv = servers.namesrv(*tls, "--tls.server.keyPath", str(certs.key))
    broker_tls = ["tls.server.mode=permissive", f"tls.server.certPath={certs.cert}", f"tls.server.keyPath={certs.key}"]
    broker = servers.broker(namesrv.address, *(arg for item in broker_tls for arg in ("--set", item)))
    home = tmp_path / "client-home"
    home.mkdir()
    client = RealClient(namesrv.address, home, [namesrv, broker])
    try:
        messages = [OutgoingMessage("TlsInterop", f"plain {i}", tags="TagP", keys=f"k{i}") for i in range(20)]
        outcomes = await asyncio.to_thread(client.produce, "PID_tls_interop", [Send("sync", messages)])
        assert [o.status for o in outcomes] == ["OK"] * len(messages), client.diagnostics()
        consumed = await asyncio.to_thread(client.consume, "CID_tls_interop", "TlsInterop", expect=len(messages))
        assert sorted(m.body for m in consumed.messages) == sorted(m.body for m in messages)
    finally:
        client.close()
