"""Consumers: the lite pull consumer (`lite_pull`), the push consumer (`push/`) and what both use:
one pull of one queue (`puller`), rebalancing and the allocation strategies (`rebalance`,
`allocation`), offset stores (`offset_store`), where a queue without an offset starts
(`start_offset`) and skipping a message that cannot be decoded (`undecodable`). The blocking
`LitePullConsumer` and `PushConsumer` are in `rocketspark.client.sync`.
"""
