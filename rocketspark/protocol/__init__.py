"""The RocketMQ 4.x remoting protocol as pure data: bytes in, objects out.

Frames and their codec (`codec`), `RemotingCommand` (`command`), request, response and language
codes (`codes`) and this project's extension codes (`extension`), typed headers (`header`, and one
module per domain in `headers/`), JSON bodies (`body/`), the field introspection they share
(`schema`) and `MessageQueue` (`queue`), the queue as bodies and headers name it. No module here
does I/O or imports asyncio, socket, ssl, `rocketspark.message`, `rocketspark.remoting` or
`rocketspark.client` (tests/unit/test_protocol_purity.py checks): the transport that moves these
objects is `rocketspark.remoting`.

Import the submodules directly; this package module stays empty so that `rocketspark.errors` can
depend on `.codes` without a cycle.
"""
