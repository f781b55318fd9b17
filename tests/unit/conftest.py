"""Fixtures shared by the unit tests that drive broker processors in process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.unit.processor_parts import BrokerParts, open_parts


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[BrokerParts]:
    """The broker's managers and store on `tmp_path`, wired as the controller wires them, closed after."""
    async with open_parts(tmp_path) as opened:
        yield opened
