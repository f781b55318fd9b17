"""Dispatch of incoming requests to processors, keyed by request code.

A handler receives the connection the request came on and the request. It may answer
synchronously (return the response, or None for no response) or return an awaitable that
produces it; the synchronous form saves a task per request on hot paths. The handler types are
declared next to `Connection`, which calls the handlers.
"""

from __future__ import annotations

from collections.abc import Iterable

from rocketspark.remoting.connection import RequestHandler


class ProcessorTable:
    """Request code -> handler. Codes without a handler are answered REQUEST_CODE_NOT_SUPPORTED."""

    def __init__(self) -> None:
        self._handlers: dict[int, RequestHandler] = {}

    def register(self, codes: int | Iterable[int], handler: RequestHandler) -> None:
        for code in [codes] if isinstance(codes, int) else codes:
            self._handlers[int(code)] = handler

    def unregister(self, code: int) -> None:
        self._handlers.pop(int(code), None)

    def get(self, code: int) -> RequestHandler | None:
        return self._handlers.get(code)

    def __contains__(self, code: int) -> bool:
        return code in self._handlers
