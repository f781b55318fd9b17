"""RocketMQ 4.x remoting: frames, commands, typed headers, JSON bodies, asyncio server and client.

Import the submodules directly (`rocketspark.remoting.command`, `.codec`, `.client`, ...); this
package module stays empty so that `rocketspark.errors` can depend on `.codes` without a cycle.
"""
