"""JSON bodies: Java's fastjson dialect in, standard JSON out."""

from __future__ import annotations

import orjson
import pytest

from rocketspark.protocol.body.jsonbody import loads
from rocketspark.protocol.body.register import RegisterBrokerBody
from rocketspark.protocol.body.route import BrokerData, ClusterInfo, QueueData, TopicRouteData
from rocketspark.protocol.body.topic import (
    DataVersion,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicFilterType,
)

FASTJSON_ROUTE = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
    b'"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
)
FASTJSON_CLUSTER = (
    b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"broker-a",'
    b'"cluster":"c1"}},"clusterAddrTable":{"c1":["broker-a"]}}'
)


def test_fastjson_unquoted_numeric_keys() -> None:
    route = TopicRouteData.from_json(FASTJSON_ROUTE)
    assert route.broker_datas[0].broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert route.broker_datas[0].master_address == "10.0.0.1:10911"
    assert route.queue_datas == [QueueData("broker-a", 4, 4, 6, 0)]
    cluster = ClusterInfo.from_json(FASTJSON_CLUSTER)
    assert cluster.cluster_addr_table == {"c1": ["broker-a"]}


def test_quoting_leaves_string_contents_alone() -> None:
    text = '{"a":"x,{1:2}",3:"y\\",4:"}'
    assert loads(text) == {"a": "x,{1:2}", "3": 'y",4:'}


def test_output_is_standard_json_with_string_keys() -> None:
    route = TopicRouteData.from_json(FASTJSON_ROUTE)
    parsed = orjson.loads(route.to_json())
    assert parsed["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}
    assert TopicRouteData.from_json(route.to_json()) == route


def test_enum_by_name_or_ordinal_and_null_fields() -> None:
    config = TopicConfig.from_dict({"topicName": "T", "topicFilterType": 1, "attributes": None})
    assert config.topic_filter_type is TopicFilterType.MULTI_TAG
    assert config.attributes == {}
    assert TopicConfig.from_dict({"topicName": "T", "topicFilterType": "SINGLE_TAG"}).read_queue_nums == 16
    with pytest.raises(ValueError, match="topicName"):
        TopicConfig.from_dict({"readQueueNums": 1})


@pytest.mark.parametrize("compressed", [False, True])
def test_register_body_round_trip(compressed: bool) -> None:
    body = RegisterBrokerBody(
        TopicConfigSerializeWrapper(
            {
                "T1": TopicConfig("T1", 8, 8, 6, attributes={"+message.type": "NORMAL"}),
                "T2": TopicConfig("T2", 1, 1, 7),
            },
            DataVersion(5, 0, 1_700_000_000_000),
        ),
        ["10.0.0.9:1"],
    )
    assert RegisterBrokerBody.decode(body.encode(compressed), compressed) == body


def test_broken_compressed_register_body() -> None:
    with pytest.raises(ValueError, match="inflate"):
        RegisterBrokerBody.decode(b"not zlib", compressed=True)


def test_broker_data_defaults() -> None:
    assert BrokerData("c", "b").master_address is None
