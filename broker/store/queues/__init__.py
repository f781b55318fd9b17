"""What makes stored messages findable: the consume queues (`consume_queue`) with their block cache
(`block_cache`), the key index (`index`), how written records reach both (`dispatch`), which entries
a pull takes (`entry_selection`), and recovery's check of the queues against the log
(`recovery_check`). It builds on the log and knows nothing of the writer: a written commit round of
standard sends reaches it as plain values and a protocol defined here."""
