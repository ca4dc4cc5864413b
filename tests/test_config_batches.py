"""The Files and Batch store's config sections, ``files`` and ``batches``, as
docs/config.md ("Files and batches") spells them: parsed, checked, printed back."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
import yaml

from interlingua.config import (
    BatchesConfig,
    ConfigError,
    FilesConfig,
    config_to_yaml,
    parse_config,
)

MB = 1024 * 1024


def test_the_defaults_and_how_they_print() -> None:
    config = parse_config({})
    assert config.files == FilesConfig(max_bytes=200 * MB, expire_after=30 * 24 * 3600)
    assert config.batches == BatchesConfig(url=None, share=0.5)
    doc = yaml.safe_load(config_to_yaml(config))
    assert doc["files"] == {"max_bytes": "200MB", "expire_after": "30d"}
    assert doc["batches"] == {
        "share": 0.5, "concurrency": 32, "max_concurrency": 128, "lease": "30s",
        "completion_window": "1d",
    }  # fmt: skip


def test_the_documented_sections_parse_and_print_back() -> None:
    config = parse_config(
        yaml.safe_load(
            textwrap.dedent(
                """
                files: {max_bytes: 1GB, expire_after: 12h}
                batches: {url: "postgresql://gw@db:5432/gateway", share: 0.25, concurrency: 4,
                          max_concurrency: 16, lease: 10s, completion_window: 2s}
                """
            )
        )
    )
    assert config.files == FilesConfig(max_bytes=1024 * MB, expire_after=12 * 3600)
    assert config.batches == BatchesConfig(
        "postgresql://gw@db:5432/gateway", share=0.25, concurrency=4, max_concurrency=16,
        lease=10, completion_window=2,
    )  # fmt: skip
    assert parse_config(yaml.safe_load(config_to_yaml(config))) == config


@pytest.mark.parametrize(
    ("written", "seconds"),
    [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("45s", 45), ("1.5h", 5400), (600, 600)],
)
def test_durations(written: Any, seconds: float) -> None:
    config = parse_config({"files": {"expire_after": written}})
    assert config.files.expire_after == seconds
    assert parse_config(yaml.safe_load(config_to_yaml(config))) == config


@pytest.mark.parametrize(
    ("written", "size"),
    [("200MB", 200 * MB), ("512KB", 512 * 1024), ("2GB", 2048 * MB), ("1mb", MB), (12345, 12345)],
)
def test_sizes(written: Any, size: int) -> None:
    config = parse_config({"files": {"max_bytes": written}})
    assert config.files.max_bytes == size
    assert parse_config(yaml.safe_load(config_to_yaml(config))) == config


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"files": {"expire_after": "soon"}}, "files.expire_after: expected a duration"),
        ({"files": {"expire_after": 0}}, "above 0"),
        ({"files": {"expire_after": True}}, "expected a duration"),
        ({"files": {"max_bytes": "200 parsecs"}}, "files.max_bytes: expected a size"),
        ({"files": {"max_bytes": 0}}, "above 0"),
        ({"files": {"max_byte": 1}}, "did you mean 'max_bytes'"),
        ({"batches": {"url": "mysql://x"}}, "batches.url: expected sqlite:///"),
        ({"batches": {"shares": 0.5}}, "did you mean 'share'"),
        ({"batches": {"share": 0}}, "batches.share: expected a positive number"),
        ({"batches": {"share": 1.5}}, "batches.share: expected a number in"),
        ({"batches": {"share": "half"}}, "batches.share: expected a positive number"),
        ({"batches": {"concurrency": 0}}, "batches.concurrency"),
        ({"batches": {"lease": "soon"}}, "batches.lease: expected a duration"),
    ],
)
def test_bad_values_name_their_path(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)
