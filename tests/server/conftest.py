"""Fixtures for the server tests: the scripted upstream ``stub`` (tests/stub_upstream.py)."""

from __future__ import annotations

from ..stub_upstream import stub

# Re-exported: a fixture is found where it is imported.
__all__ = ["stub"]
