"""The web dashboard (`rocketspark dashboard`, docs/dashboard.md): the cluster, topics, consumer
groups with their lag over time, and messages, read through the 4.x admin requests alone, so it
works against Apache RocketMQ 4.9 brokers as against the bundled ones.

Layout: `admin` (the one admin session: name-server failover, per-broker answers or failures),
`cluster_view`, `topic_view`, `group_view`, `message_view` (what each page shows), `actions` (what a
POST changes), `history` and `sampler` (lag and throughput kept over time in SQLite), `security`
(password and CSRF), `pages` (the routes), `app` (the Starlette application), `server` (uvicorn).
"""
