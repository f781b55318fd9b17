"""The message store: a commit log of records (Arrow record batches or RocketMQ's message records),
consume queues, the key index, the duplicate window, recovery and retention.

`message_store.MessageStore` is the facade the broker uses; `config` holds its settings, `results`
what it hands back and `retention` how old segments leave. Its parts: `log/` (the commit log and
what its records hold), `writer/` (group commit: the one writer and its commit rounds),
`duplicates/` (the duplicate window, behind one entry point the writer calls once per commit round)
and `queues/` (consume queues, the key index, and how written records reach them). Imports between
the parts point one way (writer -> duplicates -> log, writer -> log, queues -> log) and none
imports message_store.
"""
