"""Namespaced key/value configuration of the name server, persisted as one JSON file."""

from __future__ import annotations

import logging

import orjson

from rocketspark.errors import ConfigError
from rocketspark.fileutil import AtomicFileWriter

log = logging.getLogger(__name__)


class KVConfigManager:
    """`namespace -> key -> value`, written atomically after every change, on the writer's I/O thread.

    The file has the shape of Java's `KVConfigSerializeWrapper`: `{"configTable": {...}}`.
    """

    def __init__(self, writer: AtomicFileWriter) -> None:
        self.writer = writer
        self.path = writer.path
        self._table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        if not self.path.exists():
            return
        try:
            content = orjson.loads(self.path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"KV config file {self.path} is not valid JSON: {exc}") from None
        table = content.get("configTable") or {}
        self._table = {str(ns): {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items()}
        log.info("loaded %d KV config namespaces from %s", len(self._table), self.path)

    def put(self, namespace: str, key: str, value: str) -> None:
        namespace_table = self._table.setdefault(namespace, {})
        previous = namespace_table.get(key)
        namespace_table[key] = value
        log.info("KV config %s %s: %s -> %s", namespace, key, previous, value)
        self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> bool:
        namespace_table = self._table.get(namespace)
        if namespace_table is None or key not in namespace_table:
            return False
        del namespace_table[key]
        if not namespace_table:
            del self._table[namespace]
        log.info("KV config %s %s deleted", namespace, key)
        self._persist()
        return True

    def namespace(self, namespace: str) -> dict[str, str] | None:
        table = self._table.get(namespace)
        return dict(table) if table is not None else None

    def _persist(self) -> None:
        self.writer.write(orjson.dumps({"configTable": self._table}, option=orjson.OPT_INDENT_2))
