"""The embedded engine carries on a stream another upstream broke (``continue_with:
auto`` is a prefill for ``local``): the client reads the first attempt's words, then the
bundled model's, in one complete answer."""

from __future__ import annotations

import openai
import pytest

from interlingua.config import parse_config
from interlingua.core import BlockStart, StreamError, StreamStart, TextDelta, TextPart, Usage
from interlingua.errors import UpstreamError
from interlingua.server.app import create_app
from interlingua.upstreams import build_upstreams
from interlingua.upstreams.fake import FakeUpstream

from ...live_server import live_server

pytest.importorskip("llama_cpp")

PREFIX = "The capital of France is"


def test_the_bundled_model_finishes_a_broken_stream() -> None:
    config = parse_config(
        {
            "upstreams": {"a": {"kind": "fake"}, "smol": {"kind": "local", "bundled": "smollm2", "n_ctx": 512}},
            "models": [
                {"name": "main", "upstream": "a", "fallbacks": ["smollm2"],
                 "on_stream_break": "continue"},
                {"name": "smollm2", "upstream": "smol"},
            ],
            "usage": False,
        }
    )  # fmt: skip
    upstreams = build_upstreams(config, None)
    fake = upstreams["a"] = FakeUpstream("a", wire="anthropic")
    fake.enqueue(
        [
            StreamStart("msg_1", "m", 0, Usage(input_tokens=9)),
            BlockStart(0, TextPart("")),
            TextDelta(0, PREFIX + " "),
            StreamError(UpstreamError("cut", status=502)),
        ]
    )
    with live_server(create_app(config, upstreams=upstreams)) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="sk", max_retries=0, timeout=60)
        with client:
            stream = client.chat.completions.create(
                model="main",
                messages=[{"role": "user", "content": "What is the capital of France?"}],
                max_tokens=12,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert text.startswith(PREFIX + " ")  # the first attempt's words, then the model's
    assert finish and finish[-1] in ("stop", "length")
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
