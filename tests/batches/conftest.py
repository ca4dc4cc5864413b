"""Fixtures for the Files and Batch store tests: one PostgreSQL server for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..usage.postgres import postgres_url


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """The URL of a PostgreSQL server started for these tests (skips without one)."""
    with postgres_url() as url:
        yield url
