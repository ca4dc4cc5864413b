"""The live gateway serving the bundled SmolLM2 (the default config), its SDK clients and the
helpers its end-to-end tests share (test_local_end_to_end, test_local_options_end_to_end):
a module imports the fixtures it uses, each module then starts its own gateway."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from interlingua.config import default_config, parse_config
from interlingua.server import create_app
from interlingua.upstreams.local import LlamaEngine

from ..live_server import live_server
from ..local_model import loaded_engine

QUESTION = "What is the capital of France?"
COUNT = "Count from 1 to 10, separated by commas."
COUNTED = "1, 2, 3, 4, 5"
STORY = "Write a very long story about a dragon."
#: Long enough that a forced answer cannot end within the max_tokens of these tests.
LONG = "Once upon a time, a dragon lived alone on a high and windy mountain. " * 3
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "population": {"type": "integer"},
    },
    "required": ["city", "population"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with live_server(create_app(default_config())) as base:
        yield base


@pytest.fixture(scope="module")
def tight_url() -> Iterator[str]:
    """A gateway whose model has a 256-token context, one place and no wait line."""
    config = parse_config(
        {
            "upstreams": {
                "local": {
                    "kind": "local",
                    "bundled": "smollm2",
                    "n_ctx": 256,
                    "parallel": 1,
                    "max_queue": 0,
                }
            },
            "models": [{"name": "smollm2", "upstream": "local"}],
        }
    )
    with live_server(create_app(config)) as base:
        yield base


@pytest.fixture(scope="module")
def tokenizer() -> Iterator[LlamaEngine]:
    """The same model, loaded apart, to count tokens independently of the gateway."""
    with loaded_engine(512) as engine:
        yield engine


@pytest.fixture
def gpt(url: str) -> Iterator[openai.OpenAI]:
    with openai_client(url) as client:
        yield client


@pytest.fixture
def claude(url: str) -> Iterator[anthropic.Anthropic]:
    with anthropic_client(url) as client:
        yield client


def openai_client(url: str, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=retries)


def anthropic_client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)


def prompt_tokens(tokenizer: LlamaEngine, messages: list[dict[str, str]]) -> int:
    return len(tokenizer.tokenize(tokenizer.render(messages)))


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def openai_forced(text: str) -> dict[str, Any]:
    """An OpenAI ``response_format`` that allows exactly the JSON string ``text``.

    llama.cpp compiles a ``const`` to a grammar with no optional whitespace: the model
    cannot end its turn before the last character, and the text is known on any CPU.
    """
    return {"type": "json_schema", "json_schema": {"name": "forced", "schema": {"const": text}}}


def anthropic_forced(text: str) -> dict[str, Any]:
    """The same as :func:`openai_forced`, as an Anthropic ``output_config``."""
    return {"format": {"type": "json_schema", "schema": {"const": text}}}


def check_city(data: Any) -> None:
    """Validate against SCHEMA by hand (jsonschema is not a dependency)."""
    assert isinstance(data, dict)
    assert set(data) == {"city", "population"}
    assert isinstance(data["city"], str) and len(data["city"]) <= 40
    assert isinstance(data["population"], int) and not isinstance(data["population"], bool)
