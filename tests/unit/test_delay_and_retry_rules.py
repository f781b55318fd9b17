"""The pure rules of delayed messages and retries: delay level tables, parking a message in
SCHEDULE_TOPIC_XXXX and taking it out again, the DELAY property, the reconsume limit."""

from __future__ import annotations

import pytest

from broker.managers.subscription_group_manager import SubscriptionGroupConfig
from broker.retry import exhausted
from broker.schedule.delay_levels import DelayLevels, due_message
from broker.store.config import StoreConfig
from broker.store.writer.append_requests import StandardMessage
from rocketspark.errors import ValidationError
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import SCHEDULE_TOPIC, delay_level_of, group_of_retry_topic


def test_default_levels_are_apaches() -> None:
    delays = StoreConfig().delay_levels_ms()
    assert len(delays) == 18
    assert delays[:4] == (1_000, 5_000, 10_000, 30_000) and delays[-1] == 2 * 3_600_000


def test_levels_take_seconds_minutes_hours_days() -> None:
    config = StoreConfig(message_delay_level="1s 2m  1h 1d")
    assert config.delay_levels_ms() == (1_000, 120_000, 3_600_000, 86_400_000)


@pytest.mark.parametrize("text", ["", "1x", "0s", "s", "1.5s", "-1s"])
def test_bad_level_tables_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="messageDelayLevel"):
        StoreConfig(message_delay_level=text)


def test_a_parked_message_comes_back_as_it_was_sent() -> None:
    levels = DelayLevels((1_000, 2_000))
    sent = StandardMessage(b"body", props.encode_properties({"TAGS": "t", "UNIQ_KEY": "U", "DELAY": "7"}), tags="t")
    topic, queue_id, parked = levels.schedule("Orders", 3, sent, 7)
    assert (topic, queue_id) == (SCHEDULE_TOPIC, 1)  # level 7 counts as the last one, 2
    stored = props.decode_properties(parked.properties)
    assert stored[props.REAL_TOPIC] == "Orders" and stored[props.REAL_QUEUE_ID] == "3" and stored["DELAY"] == "2"
    assert levels.delay_ms(7) == 2_000
    row = {
        "msg_id": "U",
        "body": b"body",
        "properties": parked.properties,
        "tags": "t",
        "keys": None,
        "flag": 0,
        "sys_flag": 0,
        "born_timestamp": 1,
        "born_host": "127.0.0.1:1",
        "reconsume_times": 2,
        "queue_offset": 41,
    }
    real_topic, real_queue, message = due_message(row, 2)
    assert (real_topic, real_queue, message.uniq_key, message.reconsume_times) == ("Orders", 3, "U", 2)
    assert props.DELAY_TIME_LEVEL not in props.decode_properties(message.properties)
    assert props.decode_properties(message.properties)["SCHEDULE_ORIGIN"] == "2:41"
    with pytest.raises(ValueError, match="no real topic"):
        due_message({**row, "properties": props.encode_properties({"DELAY": "1"})}, 1)


def test_the_delay_property() -> None:
    assert delay_level_of({}) == 0 and delay_level_of({"DELAY": " 3 "}) == 3 and delay_level_of({"DELAY": "-2"}) == 0
    with pytest.raises(ValidationError, match="delay level"):
        delay_level_of({"DELAY": "soon"})


def test_the_reconsume_limit_is_the_requests_else_the_groups() -> None:
    group = SubscriptionGroupConfig("g", retry_max_times=3)
    assert not exhausted(group, 2, None) and exhausted(group, 3, None)
    assert exhausted(group, 1, 1) and not exhausted(group, 5, 6)
    assert group_of_retry_topic("%RETRY%g") == "g" and group_of_retry_topic("%DLQ%g") is None
