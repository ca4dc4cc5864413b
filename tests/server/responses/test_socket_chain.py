"""A socket's memory of its responses (server/responses/socket_chain.py): expansion and its bounds."""

from __future__ import annotations

from interlingua.server.responses.socket_chain import ChainMemory, input_items

USER = {"role": "user", "content": "hi"}
ANSWER = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "yo"}],
}


def test_a_continuation_becomes_the_whole_conversation() -> None:
    memory = ChainMemory()
    assert memory.remember("resp_1", [USER], [ANSWER], 100)
    body = {"model": "m", "previous_response_id": "resp_1", "input": "and then?"}
    assert memory.expand(body) == 100
    assert body == {
        "model": "m",
        "input": [USER, ANSWER, {"role": "user", "content": "and then?"}],
    }


def test_unknown_ids_and_bad_inputs_are_left_alone() -> None:
    memory = ChainMemory()
    memory.remember("resp_1", [USER], [ANSWER], 10)
    unknown = {"previous_response_id": "resp_other", "input": "x"}
    assert memory.expand(unknown) == 0
    assert unknown == {"previous_response_id": "resp_other", "input": "x"}
    bad = {"previous_response_id": "resp_1", "input": 42}
    assert memory.expand(bad) == 0 and bad["previous_response_id"] == "resp_1"
    none = {"input": "x"}
    assert memory.expand(none) == 0 and none == {"input": "x"}
    absent = {"previous_response_id": "resp_1"}
    assert memory.expand(absent) == 10 and absent == {"input": [USER, ANSWER]}


def test_the_oldest_goes_past_the_count() -> None:
    memory = ChainMemory(max_responses=2)
    for i in range(3):
        memory.remember(f"resp_{i}", [USER], [], 1)
    assert "resp_0" not in memory and "resp_1" in memory and "resp_2" in memory
    assert len(memory) == 2 and memory.total_bytes == 2


def test_the_oldest_goes_past_the_byte_budget_and_a_huge_one_is_not_kept() -> None:
    memory = ChainMemory(max_bytes=100)
    memory.remember("a", [USER], [], 60)
    memory.remember("b", [USER], [], 60)  # 120 > 100: "a" goes
    assert "a" not in memory and "b" in memory and memory.total_bytes == 60
    assert not memory.remember("c", [USER], [], 101)
    assert "c" not in memory and "b" in memory
    memory.remember("b", [USER, USER], [], 70)  # the same id again replaces it
    assert memory.total_bytes == 70 and len(memory) == 1


def test_input_items() -> None:
    assert input_items(None) == []
    assert input_items("hi") == [{"role": "user", "content": "hi"}]
    assert input_items([USER]) == [USER]
    assert input_items({"role": "user"}) is None
