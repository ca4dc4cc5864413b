"""``POST /v1/completions`` answered by the embedded engine (the bundled SmolLM2 of the
default config) through a live gateway with the openai SDK: the raw prompt continued
with no chat template (its token count is the bare text's), stream and not, token
prompts, and the fields it cannot honour refused naming each.

    openai SDK -> live gateway -> LocalUpstream (raw prompt) -> llama.cpp
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from interlingua.config import default_config
from interlingua.server import create_app
from interlingua.upstreams.local import LlamaEngine

from ..live_server import live_server
from ..local_model import loaded_engine

PROMPT = "1, 2, 3, 4, 5,"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with live_server(create_app(default_config())) as base:
        yield base


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaEngine]:
    """The same model, loaded apart, to tokenize the prompt independently."""
    with loaded_engine(512) as loaded:
        yield loaded


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


def test_the_raw_prompt_is_continued(url: str, engine: LlamaEngine) -> None:
    with _client(url) as client:
        answer = client.completions.create(
            model="smollm2", prompt=PROMPT, max_tokens=6, temperature=0
        )
    assert answer.object == "text_completion"
    text = answer.choices[0].text
    assert isinstance(text, str) and text  # (what a model samples is not asserted)
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None
    # the bare text's tokens: no chat template around it
    assert answer.usage.prompt_tokens == len(engine.tokenize_text(PROMPT))
    assert answer.usage.completion_tokens == 6


def test_a_stream_matches_the_whole_answer(url: str, engine: LlamaEngine) -> None:
    tokens = engine.tokenize_text(PROMPT)
    with _client(url) as client:
        whole = client.completions.create(
            model="smollm2", prompt=tokens, max_tokens=6, temperature=0
        )
        chunks = list(
            client.completions.create(
                model="smollm2",
                prompt=PROMPT,
                max_tokens=6,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"echo": True}, "echo"),
        ({"suffix": "x"}, "suffix"),
        ({"logprobs": 1}, "logprobs"),
        ({"n": 2}, "n"),
        ({"prompt": ["a", "b"]}, "prompt"),
    ],
)
def test_what_it_cannot_honour_is_refused(url: str, fields: dict[str, Any], param: str) -> None:
    body = {"model": "smollm2", "prompt": "p", **fields}
    answer = httpx.post(url + "/v1/completions", json=body)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param


def test_batch_run_sends_completions_lines_to_the_completions_endpoint(
    url: str, tmp_path: Path
) -> None:
    """``interlingua batch run`` takes ``/v1/completions`` lines: each body (``stream``
    dropped, the model from --model) to the server's /completions, its answer the line's
    output body."""
    rows = [
        {"custom_id": f"c{i}", "method": "POST", "url": "/v1/completions",
         "body": {"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "stream": True}}
        for i in range(3)
    ]  # fmt: skip
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    out = tmp_path / "out.jsonl"
    args = [sys.executable, "-m", "interlingua.cli", "batch", "run", str(inp), "-o", str(out),
            "--base-url", url + "/v1", "--model", "smollm2",
            "--progress", "off"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    records = {r["custom_id"]: r for r in map(orjson.loads, out.read_bytes().splitlines())}
    assert sorted(records) == ["c0", "c1", "c2"]
    for record in records.values():
        body = record["response"]["body"]
        assert record["response"]["status_code"] == 200 and record["error"] is None
        assert body["object"] == "text_completion" and body["model"] == "smollm2"
        assert body["usage"]["completion_tokens"] == 3
