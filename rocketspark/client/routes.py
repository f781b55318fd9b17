"""What a topic route means to clients: the queues they may write to and read from."""

from __future__ import annotations

from rocketspark.protocol.body.route import TopicRouteData
from rocketspark.protocol.queue import MessageQueue


def master_addresses(route: TopicRouteData) -> dict[str, str]:
    """Broker name -> master address, for brokers of the route that have a master."""
    return {b.broker_name: b.master_address for b in route.broker_datas if b.master_address}


def publish_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Writable queues of brokers with a master, ordered by broker name then queue id."""
    masters = master_addresses(route)
    return [
        MessageQueue(topic, data.broker_name, queue_id)
        for data in sorted(route.queue_datas, key=lambda d: d.broker_name)
        if data.writable and data.broker_name in masters
        for queue_id in range(data.write_queue_nums)
    ]


def subscribe_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Readable queues, sorted as Java sorts them before allocation."""
    return sorted(
        MessageQueue(topic, data.broker_name, queue_id)
        for data in route.queue_datas
        if data.readable
        for queue_id in range(data.read_queue_nums)
    )


def with_queue_limit(route: TopicRouteData, queue_nums: int) -> TopicRouteData:
    """A route whose brokers offer at most `queue_nums` queues (sending to a topic that does not
    exist yet, through the route of TBW102, as Java's producer does)."""
    return TopicRouteData(
        queue_datas=[
            type(q)(q.broker_name, min(q.read_queue_nums, queue_nums), min(q.write_queue_nums, queue_nums), q.perm)
            for q in route.queue_datas
        ],
        broker_datas=route.broker_datas,
        filter_server_table=route.filter_server_table,
    )
