"""Drive the official openai and anthropic SDKs and classify what they saw.

Every call consumes the answer fully (a stream to its end) and reduces the outcome to a
:class:`Seen`: a normal answer (text and finish reason), an HTTP status error, an in-band
stream error the SDK raised, or a ``failure`` -- anything a caller could not act on: a raw
transport exception, ``JSONDecodeError``, a validation error on a 200, or a stream still
running at the deadline (a hang). Judging a :class:`Seen` against what a fault demands is
the matrix's job (:mod:`.test_fault_matrix`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anthropic
import openai

OPENAI_CLIENT = "openai"
ANTHROPIC_CLIENT = "anthropic"
#: the key clients present to the gateway (the gateway has no client keys configured)
CLIENT_KEY = "sk-client-fault-matrix"


@dataclass
class Seen:
    """What one SDK call ended in."""

    #: "answer" | "status" (APIStatusError before the stream) | "inband" | "failure"
    kind: str
    status: int | None = None
    text: str = ""
    finish: str | None = None
    retry_after: str | None = None
    detail: str = ""

    def describe(self) -> str:
        """One line for a failure message (long texts abbreviated)."""
        if self.kind == "answer":
            text = (
                self.text
                if len(self.text) < 80
                else f"{self.text[:60]!r}...({len(self.text)} chars)"
            )
            return f"normal answer, finish={self.finish!r}, text={text!r}"
        if self.kind == "status":
            return f"APIStatusError {self.status} (retry-after={self.retry_after!r}): {self.detail}"
        return f"{self.kind}: {self.detail}"


class Hang(Exception):
    """The stream was still going at the deadline."""


def _short(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__name__}: {str(exc)[:160]}"


def _status(exc: openai.APIStatusError | anthropic.APIStatusError) -> Seen:
    return Seen(
        "status",
        status=exc.status_code,
        retry_after=exc.response.headers.get("retry-after"),
        detail=str(exc)[:160],
    )


def call_openai(
    url: str, model: str, stream: bool, timeout: float, deadline: float, prompt: str = "Hi"
) -> Seen:
    """One chat completion through the openai SDK against the gateway at ``url``.

    ``timeout`` is the SDK's (per read); a stream must also end within ``deadline``."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=CLIENT_KEY, max_retries=0, timeout=timeout)
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "user", "content": prompt}
    ]
    started = False
    try:
        if not stream:
            answer = client.chat.completions.create(model=model, messages=messages, max_tokens=50)
            choice = answer.choices[0]
            return Seen("answer", text=choice.message.content or "", finish=choice.finish_reason)
        end = time.monotonic() + deadline
        pieces: list[str] = []
        finish = None
        with client.chat.completions.create(
            model=model, messages=messages, max_tokens=50, stream=True
        ) as chunks:
            started = True
            for chunk in chunks:
                if time.monotonic() > end:
                    raise Hang(f"still streaming after {deadline}s ({len(pieces)} pieces)")
                for c in chunk.choices:
                    pieces.append(c.delta.content or "")
                    finish = c.finish_reason or finish
        return Seen("answer", text="".join(pieces), finish=finish)
    except openai.APIStatusError as exc:
        return _status(exc)
    except (openai.APIConnectionError, openai.APIResponseValidationError) as exc:
        return Seen("failure", detail=_short(exc))
    except openai.APIError as exc:
        # The SDK raises a bare APIError for a `data: {"error": ...}` event mid-stream.
        return (
            Seen("inband", detail=_short(exc)) if started else Seen("failure", detail=_short(exc))
        )
    except Exception as exc:  # JSONDecodeError, httpx errors, Hang: all failures
        return Seen("failure", detail=_short(exc))
    finally:
        client.close()


def call_anthropic(
    url: str, model: str, stream: bool, timeout: float, deadline: float, prompt: str = "Hi"
) -> Seen:
    """One message through the anthropic SDK against the gateway at ``url`` (arguments
    as for :func:`call_openai`)."""
    client = anthropic.Anthropic(base_url=url, api_key=CLIENT_KEY, max_retries=0, timeout=timeout)
    messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": prompt}]
    started = False
    try:
        if not stream:
            message = client.messages.create(model=model, max_tokens=50, messages=messages)
            text = "".join(block.text for block in message.content if block.type == "text")
            return Seen("answer", text=text, finish=message.stop_reason)
        end = time.monotonic() + deadline
        pieces: list[str] = []
        finish = None
        stopped = False
        # The raw event stream, not messages.stream(): its snapshot grows by string
        # concatenation, quadratic on the many-MB streams.
        with client.messages.create(
            model=model, max_tokens=50, messages=messages, stream=True
        ) as events:
            started = True
            for event in events:
                if time.monotonic() > end:
                    raise Hang(f"still streaming after {deadline}s ({len(pieces)} pieces)")
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    pieces.append(event.delta.text)
                elif event.type == "message_delta":
                    finish = event.delta.stop_reason
                elif event.type == "message_stop":
                    stopped = True
        # A stop reason without message_stop is a stream that ended early.
        return Seen("answer", text="".join(pieces), finish=finish if stopped else None)
    except anthropic.APIStatusError as exc:
        # An `event: error` mid-stream raises APIStatusError carrying the stream's 200.
        return Seen("inband", detail=_short(exc)) if started else _status(exc)
    except (anthropic.APIConnectionError, anthropic.APIResponseValidationError) as exc:
        return Seen("failure", detail=_short(exc))
    except Exception as exc:  # JSONDecodeError, httpx errors, Hang: all failures
        return Seen("failure", detail=_short(exc))
    finally:
        client.close()


def call(
    client: str,
    url: str,
    model: str,
    stream: bool,
    timeout: float,
    deadline: float,
    prompt: str = "Hi",
) -> Seen:
    """:func:`call_openai` or :func:`call_anthropic` by client name."""
    fn = call_openai if client == OPENAI_CLIENT else call_anthropic
    return fn(url, model, stream, timeout, deadline, prompt)
