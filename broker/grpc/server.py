"""`GrpcServer`: the 5.x endpoint on the broker's event loop (grpc.aio), on `grpcServerPort`.

Built by the controller when grpcServerPort is not 0. It listens on the broker's bind address and
names itself in routes by brokerIP1, as the 4.x port is published; gRPC's SO_REUSEPORT is off, so a
port another process holds is an error at start, not a second listener sharing it.
"""

from __future__ import annotations

import logging
from typing import Protocol

import grpc

from broker.context import (
    HasConsumers,
    HasDelayLevels,
    HasProducers,
    HasStore,
    HasStoreConfig,
    HasSubscriptionGroups,
    HasTopics,
    HasTransactions,
)
from broker.grpc.call import Authorizer
from broker.grpc.clients import GrpcClients
from broker.grpc.consuming import ConsumingService
from broker.grpc.routes import Routes, endpoints
from broker.grpc.sending import Sending, SendingContext
from broker.grpc.servicer import MessagingServicer
from broker.grpc.tls import GrpcListener, GrpcTls
from broker.grpc.transactions import Transactions
from broker.grpc.v2 import service_pb2_grpc
from broker.processors.send import SendMessageProcessor

log = logging.getLogger(__name__)

#: how long a stopping broker lets calls under way finish
STOP_GRACE_S = 1.0


class GrpcContext(
    SendingContext,
    HasStoreConfig,
    HasTopics,
    HasSubscriptionGroups,
    HasDelayLevels,
    HasStore,
    HasTransactions,
    HasProducers,
    HasConsumers,
    Protocol,
):
    """What the 5.x endpoint reads of the broker."""


class GrpcServer:
    def __init__(
        self,
        broker: GrpcContext,
        send_processor: SendMessageProcessor,
        consuming: ConsumingService,
        authorizer: Authorizer | None = None,
    ) -> None:
        self._broker = broker
        config = broker.config
        self.transactions = Transactions(broker)
        self.clients = GrpcClients(broker.producers, broker.consumers, self.transactions.recover_command)
        self.routes = Routes(broker, endpoints(config.broker_ip1, config.grpc_server_port))
        self.consuming = consuming
        self.listener = GrpcListener(GrpcTls.of(config))
        servicer = MessagingServicer(
            broker,
            self.clients,
            self.routes,
            Sending(broker, send_processor, self.routes, self.transactions, self.clients),
            self.transactions,
            consuming,
            authorizer,
            self.listener.peer,
        )
        self._server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", config.frame_max_length),
                ("grpc.max_send_message_length", config.frame_max_length),
            ]
        )
        service_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, self._server)  # type: ignore[no-untyped-call]
        self.port = 0

    @property
    def address(self) -> str:
        """`brokerIP1:port`, the address routes name."""
        return f"{self._broker.config.broker_ip1}:{self.port}"

    async def start(self) -> None:
        config = self._broker.config
        self.port = self.listener.add_port(self._server, f"{config.listen_host}:{config.grpc_server_port}")
        self.routes.advertised = endpoints(config.broker_ip1, self.port)
        await self.consuming.start()
        await self._server.start()
        await self.listener.start()
        log.info("gRPC (RocketMQ 5.x) endpoint serving at %s (TLS %s)", self.address, self.listener.tls.mode.value)

    async def stop(self) -> None:
        self.clients.end_streams()
        await self.listener.stop_accepting()
        await self._server.stop(STOP_GRACE_S)
        self.listener.close()
        await self.consuming.stop()
