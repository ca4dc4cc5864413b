"""bench.client_instructions: its arguments are checked before anything starts."""

from __future__ import annotations

import pytest

from bench import client_instructions


@pytest.mark.parametrize(
    "argv",
    [["--path", "generate,nope"], ["--low", "500", "--high", "500"], ["--low", "0"]],
)
def test_bad_arguments_stop_before_any_run(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        client_instructions.main(argv)
    assert stopped.value.code == 2  # argparse's usage error, not a run that failed
