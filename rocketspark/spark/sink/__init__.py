"""The sink: `df.writeStream.format("rocketmq")` and `df.write.format("rocketmq")`.

Its options (`options`), the rows turned into messages (`rows`), the deterministic ids of
exactly-once writes (`ids`), the tasks' sends (`writing`) and the writers Spark calls (`writers`);
`transactional/` holds the transactional sink (half messages ended when Spark commits a batch).
"""
