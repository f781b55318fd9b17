"""The broker's managers, as Apache RocketMQ splits them: each owns one part of the broker's state
and never touches a socket. Topic configs (`topic_config_manager`), subscription groups
(`subscription_group_manager`), consumer offsets (`consumer_offset_manager`), the consumers and
producers connected (`consumer_manager`, `producer_manager`, with what the broker knows of one
client connection in `client_channel`) and the locks of orderly consumers (`rebalance_lock_manager`).
Processors reach them through broker/context.py."""
