"""The message store: commit log of Arrow record batches, consume queues, key index, recovery."""
