"""One request each, by domain: the RPCs the client sends to name servers and brokers.

Functions take a :class:`~rocketspark.remoting.client.RemotingClient` and an address, send one
request, and return typed results; a response code that means failure raises the matching
:class:`~rocketspark.errors.ResponseError`. They hold no state.
"""
