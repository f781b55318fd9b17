"""The RocketMQ client: `ClientInstance` (`instance`: connections, routes, heartbeats), shared by
`producer/` and `consumer/` (lite pull and push); `api/` holds one module per request family,
`sync` the blocking facades, `config`, `lifecycle`, `namesrv` and `routes` what they all use.
"""
