"""Pop-style consumption, as RocketMQ 5.x consumers use it: the engine, independent of gRPC.

A consumer group receives messages of a topic (from every queue of it); each delivered message is
invisible to the group until its invisible time passes, and is named by a receipt handle that the
consumer acknowledges, or whose invisible time it changes. An unacknowledged message is delivered
again with a growing delivery attempt, and after the group's maximum attempts it goes to the
group's dead-letter topic `%DLQ%<group>` (the one 4.x consumers use). Messages of one message group
(FIFO messages) are delivered one at a time, in order. The group's consumer offsets advance as
acknowledgements complete a prefix of a queue, so 4.x tooling shows 5.x consumers' progress.

Modules: `service` (PopService, the engine's interface: start, stop, receive, ack, change invisible
duration, forward to the dead-letter topic, renewal), `receiving` (what a receive gets), `core`
(the state both share and the changes both make), `queue_state` (the in-flight window of one
queue, pure), `handles` (receipt handles), `records` (journal records, snapshots, replay),
`journal` (their files), `reading` (messages from the store), `filtering` (TAG and SQL92
expressions; `sql92` parses and evaluates the latter), `ranges` (sets of offsets as ranges),
`waiters` (long polling), `settings` (broker.conf's bounds and times), `errors` (refusals, named
like the 5.x status codes).
"""
