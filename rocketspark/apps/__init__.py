"""Applications built on rocketspark: the demo and the jobs that `python -m jobs.<name>`,
`spark-submit jobs/<name>.py` and `rocketspark demo` run (docs/jobs.md).

- :mod:`rocketspark.apps.demo`: servers, synthetic clickstream, the metrics query, a summary;
- :mod:`rocketspark.apps.topic_metrics`: per-minute counts per tag and revenue of a clickstream topic;
- :mod:`rocketspark.apps.archive_topic`: incremental export of a topic to Parquet partitioned by date;
- :mod:`rocketspark.apps.replay_range`: copy the messages stored between two times to another topic.
"""
