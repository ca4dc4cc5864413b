"""One model name, a Responses deployment and a Chat one under a weighted draw.

A request whose ``previous_response_id`` only the Responses upstream holds can be served
by that deployment alone: it never reaches the Chat one (which would get the new input
without its conversation and answer 200), stream or not, whichever deployment the draw
or the config puts first; when the Responses deployment fails, the client gets its
failure, not the Chat deployment's answer. A request that needs no relay is still shared
by both deployments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from interlingua.config import parse_config
from interlingua.errors import UpstreamError

from .test_state import _client, _create, _fakes, _serve

HELD = "resp_held_upstream"


def _mixed(tmp_path: Path, **routing: Any) -> Any:
    return parse_config(
        {
            "upstreams": {name: {"kind": "fake"} for name in ("oai", "ant", "rsp")},
            "models": [
                {"name": "m", "upstream": "rsp", "model": "x"},
                {"name": "m", "upstream": "oai", "model": "x"},
            ],
            "routing": routing,
            "server": {"api_keys": ["sk-test"]},
            "responses": {"url": f"sqlite://{tmp_path}/responses.db"},
        }
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_relay_goes_to_the_responses_deployment_and_the_rest_to_both(
    tmp_path: Path, stream: bool
) -> None:
    fakes = _fakes()
    with _serve(_mixed(tmp_path), fakes) as url, _client(url) as gpt:
        for _ in range(12):
            answer = _create(gpt, stream, model="m", input="and?", previous_response_id=HELD)
            assert answer.output_text == "echo: and?"
        assert fakes["via-chat"].requests == []
        sent = fakes["via-responses"].wire_requests
        assert [wire["previous_response_id"] for wire in sent] == [HELD] * 12
        # Without a foreign id the draw shares the requests (1 - 2 * 2**-40 of the time).
        for _ in range(40):
            assert _create(gpt, stream, model="m", input="hi").output_text == "echo: hi"
        assert fakes["via-chat"].requests and len(fakes["via-responses"].requests) > 12


def test_a_failed_responses_deployment_is_the_answer_not_the_chat_one(tmp_path: Path) -> None:
    fakes = _fakes()
    with _serve(_mixed(tmp_path), fakes) as url, _client(url) as gpt:
        fakes["via-responses"].enqueue(UpstreamError("rsp is down", status=503))
        with pytest.raises(openai.InternalServerError) as caught:
            gpt.responses.create(model="m", input="and?", previous_response_id=HELD)
        assert caught.value.status_code == 503
        assert fakes["via-chat"].requests == []


def test_a_cooling_responses_deployment_is_still_tried_for_the_relay(tmp_path: Path) -> None:
    # One failure cools rsp for a minute. The next plans hold oai alone, but a relay has
    # no one else to go to: rsp is tried as the last resort, as when every deployment of
    # a name is cooling, rather than refusing the request untried.
    config = _mixed(tmp_path, cooldown={"failures": 1, "window": 60, "duration": 60})
    fakes = _fakes()
    with _serve(config, fakes) as url, _client(url) as gpt:
        fakes["via-responses"].enqueue(UpstreamError("rsp is down", status=503))
        with pytest.raises(openai.InternalServerError):
            gpt.responses.create(model="m", input="and?", previous_response_id=HELD)
        for _ in range(3):  # (rsp cooling: a plain request goes to oai only)
            assert gpt.responses.create(model="m", input="hi").output_text == "echo: hi"
        assert len(fakes["via-responses"].requests) == 1
        answer = gpt.responses.create(model="m", input="and?", previous_response_id=HELD)
        assert answer.output_text == "echo: and?"
        assert fakes["via-responses"].wire_requests[-1]["previous_response_id"] == HELD
        assert len(fakes["via-chat"].requests) == 3


def test_no_responses_deployment_at_all_is_a_400(tmp_path: Path) -> None:
    config = parse_config(
        {
            "upstreams": {name: {"kind": "fake"} for name in ("oai", "ant", "rsp")},
            "models": [
                {"name": "m", "upstream": "oai", "model": "x", "fallbacks": ["n"]},
                {"name": "n", "upstream": "ant", "model": "y"},
            ],
            "server": {"api_keys": ["sk-test"]},
            "responses": {"url": f"sqlite://{tmp_path}/responses.db"},
        }
    )
    fakes = _fakes()
    with _serve(config, fakes) as url, _client(url) as gpt:
        with pytest.raises(openai.BadRequestError) as caught:
            gpt.responses.create(model="m", input="and?", previous_response_id=HELD)
        assert caught.value.code == "previous_response_not_found"
        assert fakes["via-chat"].requests == fakes["via-anthropic"].requests == []
