"""An independent OpenAI-compatible server as upstream: llama-cpp-python's own server.

``python -m llama_cpp.server`` serves the bundled SmolLM2 GGUF; the gateway routes to it
as an ordinary ``openai`` upstream. The ``anthropic`` SDK then talks to it through the
gateway's translation (Anthropic Messages -> OpenAI Chat -> Anthropic Messages), and the
``openai`` SDK through the passthrough path. Nobody here wrote that server, so this is
the check that our OpenAI codec meets a real implementation, not only our own reading of
the spec.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from interlingua.config import parse_config
from interlingua.server import create_app
from interlingua.upstreams.local import bundled_model_path

from ..live_server import free_port, live_server

STARTUP_TIMEOUT = 60.0


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL (``.../v1``) of a llama_cpp.server subprocess on a free port."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        bundled_model_path("smollm2"),
        "--model_alias",
        "smollm2",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
    ]
    # llama.cpp logs ~200 KB at startup: into a file, since an unread pipe would fill up
    # and block the server.
    log_path = tmp_path_factory.mktemp("llama_server") / "stderr.log"
    log = log_path.open("wb")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if process.poll() is not None:
                tail = log_path.read_bytes()[-2000:].decode(errors="replace")
                pytest.fail(f"llama_cpp.server exited with {process.returncode}: {tail}")
            try:
                if httpx.get(base + "/models", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not answer within {STARTUP_TIMEOUT:g} s")
            time.sleep(0.1)
        yield base
    finally:
        _stop(process)
        log.close()


@pytest.fixture(scope="module")
def gateway(llama_server: str) -> Iterator[str]:
    config = parse_config(
        {
            "upstreams": {"llama": {"kind": "openai", "base_url": llama_server}},
            "models": [
                {"name": "claude-haiku-4-5", "upstream": "llama", "model": "smollm2"},
                {"name": "smollm2", "upstream": "llama"},
            ],
        }
    )
    with live_server(create_app(config)) as url:
        yield url


@pytest.fixture
def claude(gateway: str) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=gateway, api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture
def gpt(gateway: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=0) as client:
        yield client


MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def test_anthropic_sdk_through_translation(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="claude-haiku-4-5",
        max_tokens=40,
        system="Answer in one sentence.",
        messages=MESSAGES,  # type: ignore[arg-type]
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.model == "claude-haiku-4-5"
    assert message.content[0].type == "text" and message.content[0].text.strip()
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens <= 40


def test_anthropic_sdk_streaming_through_translation(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="claude-haiku-4-5",
        max_tokens=40,
        messages=MESSAGES,  # type: ignore[arg-type]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.strip()
    assert final.content[0].text == text  # type: ignore[union-attr]
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens > 0


def test_anthropic_max_tokens_through_translation(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="claude-haiku-4-5",
        max_tokens=5,
        messages=[{"role": "user", "content": "Write a long story about a dragon."}],
    )
    # Its sampler may end the turn within 5 tokens on some CPU (we cannot force its
    # output through translation): then the count must say so.
    if message.stop_reason == "max_tokens":
        assert message.usage.output_tokens == 5
    else:
        assert message.stop_reason == "end_turn"
        assert 0 < message.usage.output_tokens < 5


def test_openai_sdk_passthrough(gpt: openai.OpenAI) -> None:
    completion = gpt.chat.completions.create(
        model="smollm2",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=30,
    )
    choice = completion.choices[0]
    assert (choice.message.content or "").strip()
    assert choice.finish_reason in ("stop", "length")
    assert completion.usage is not None and completion.usage.prompt_tokens > 0


def test_openai_sdk_passthrough_streaming(gpt: openai.OpenAI) -> None:
    stream = gpt.chat.completions.create(
        model="smollm2",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=30,
        stream=True,
    )
    pieces: list[str] = []
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(pieces).strip()
    assert finish in ("stop", "length")
