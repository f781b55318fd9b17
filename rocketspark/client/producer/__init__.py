"""Producers: `AsyncProducer` (`producer`: queue selection, batches, the Arrow send with its fallback),
the retry policy of every send (`send_retry`), the queue selectors (`queue_selector`) and transactional
messages (`transaction`, and its blocking twin `transaction_sync`). The blocking `Producer` is in
`rocketspark.client.sync`.
"""
