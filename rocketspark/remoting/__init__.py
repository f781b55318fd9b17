"""The transport of the RocketMQ 4.x remoting protocol: asyncio connections, server and client.

`connection` (one framed socket, both directions, opaque matching, deadlines), `server` and
`processor` (accepting connections, request code -> handler), `client` (one reused connection per
address, oneway requests, server-to-client requests), `signing` (the ACL 1.0 hook every request
passes), `tls` and `sync` (a client for callers without an event loop). The bytes and objects they
carry are `rocketspark.protocol`'s.

Import the submodules directly (`rocketspark.remoting.client`, `.server`, ...).
"""
