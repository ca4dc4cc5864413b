"""The ``interlingua`` command: help, ``--print-config``, ``models``, config errors, and a
real ``serve --fake`` subprocess answering both dialects and stopping on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from interlingua.cli import build_parser, main
from interlingua.config import fake_config, load_config

from ..mock_upstream import free_port

SERVE_FLAGS = [
    "--config",
    "-c",
    "--host",
    "--port",
    "-p",
    "--fake",
    "--workers",
    "-w",
    "--print-config",
    "--log-level",
]
# A child interpreter in which the ``local`` extra is not importable, whatever is installed.
WITHOUT_LOCAL = (
    "import sys; sys.modules['llama_cpp'] = None; "
    "sys.modules['interlingua.upstreams.local'] = None; "
    "from interlingua.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _run(*args: str, timeout: float = 15) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=_env())


def _env() -> dict[str, str]:
    # No stray proxy or provider keys from the caller's environment.
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def test_help_mentions_every_command_and_flag() -> None:
    top = _run(sys.executable, "-m", "interlingua.cli", "--help")
    assert top.returncode == 0, top.stderr
    assert "serve" in top.stdout and "models" in top.stdout
    serve = _run(sys.executable, "-m", "interlingua.cli", "serve", "--help")
    assert serve.returncode == 0, serve.stderr
    for flag in SERVE_FLAGS:
        assert flag in serve.stdout, flag
    # Nothing the parser knows is missing from the list above (the list is the contract).
    commands: Any = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    serve_parser = commands["serve"]
    known = {o for a in serve_parser._actions for o in a.option_strings} - {"-h", "--help"}
    assert known == set(SERVE_FLAGS)


def test_models_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["models", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--config" in out and "--fake" in out


def test_print_config_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--fake", "--print-config", "--port", "9123", "--host", "0.0.0.0"]) == 0
    printed = capsys.readouterr().out
    path = tmp_path / "printed.yaml"
    path.write_text(printed, encoding="utf-8")
    loaded = load_config(path)
    assert loaded.server.port == 9123 and loaded.server.host == "0.0.0.0"
    expected = fake_config()
    assert loaded.upstreams == expected.upstreams
    assert loaded.models == expected.models


def test_models_fake(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--fake"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["fake\tfake\tfake", "default\tfake\tdefault"]  # no wildcard line


def test_models_from_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "upstreams:\n  v: {kind: openai, base_url: 'http://127.0.0.1:1/v1'}\n"
        "models:\n  - {name: claude-x, upstream: v, model: qwen3}\n  - {name: '*', upstream: v}\n",
        encoding="utf-8",
    )
    assert main(["models", "-c", str(path)]) == 0
    assert capsys.readouterr().out == "claude-x\tv\tqwen3\n"


@pytest.mark.parametrize("command", ["serve", "models"])
def test_missing_config_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    missing = tmp_path / "nope.yaml"
    assert main([command, "--config", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("interlingua: config error: ")
    assert str(missing) in err and "No such file" in err
    assert "Traceback" not in err


def test_invalid_config_names_the_bad_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("server: {prot: 1}\n", encoding="utf-8")
    assert main(["serve", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert "server: unknown key 'prot'" in err and "port" in err


@pytest.mark.parametrize("command", ["serve", "serve --print-config", "models"])
def test_an_entry_its_kind_refuses_is_a_config_error_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # config.py leaves kind-specific keys to the kinds; every command runs their checks.
    path = tmp_path / "bad.yaml"
    path.write_text(
        "upstreams:\n  f: {kind: fake, wire: grpc}\nmodels:\n  - {name: m, upstream: f}\n",
        encoding="utf-8",
    )
    assert main([*command.split(), "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"interlingua: config error: {path}: upstreams.f.wire: must be openai, anthropic or responses, "
        "got 'grpc'\n"
    )


def test_unset_api_key_env_is_a_clear_error_before_serving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INTERLINGUA_TEST_UNSET_KEY", raising=False)
    path = tmp_path / "c.yaml"
    path.write_text(
        "upstreams:\n  v: {kind: openai, base_url: 'http://127.0.0.1:1/v1', "
        "api_key_env: INTERLINGUA_TEST_UNSET_KEY}\nmodels:\n  - {name: m, upstream: v}\n",
        encoding="utf-8",
    )
    # Returns instead of starting uvicorn: the check runs before the server exists.
    assert main(["serve", "-c", str(path), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert "INTERLINGUA_TEST_UNSET_KEY is not set" in err


def test_serve_without_local_extra_is_a_clear_error() -> None:
    result = _run(sys.executable, "-c", WITHOUT_LOCAL, "serve", "--port", str(free_port()))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "the local engine needs the 'local' extra" in result.stderr
    assert "--fake" in result.stderr  # says how to get going without it


def test_serve_fake_subprocess_answers_both_dialects() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "interlingua.cli",
            "serve",
            "--fake",
            "--port",
            str(port),
            "--log-level",
            "info",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(proc, base, 15)
        with httpx.Client(base_url=base, timeout=10) as client:
            resp = client.post(
                "/v1/chat/completions",
                json={"model": "any-model", "messages": [{"role": "user", "content": "ping"}]},
            )
            assert resp.status_code == 200, resp.text
            assert resp.json()["choices"][0]["message"]["content"] == "echo: ping"
            assert resp.json()["model"] == "any-model"
            resp = client.post(
                "/v1/messages",
                headers={"anthropic-version": "2023-06-01"},
                json={
                    "model": "fake",
                    "max_tokens": 20,
                    "messages": [{"role": "user", "content": "pong"}],
                },
            )
            assert resp.status_code == 200, resp.text
            assert resp.json()["content"] == [{"type": "text", "text": "echo: pong"}]
        proc.send_signal(signal.SIGTERM)
        # A drained shutdown is a clean exit (server/process/serve.py), not "killed by SIGTERM".
        assert proc.wait(timeout=10) == 0
        _, err = proc.communicate(timeout=5)
        assert "Application shutdown complete" in err
        assert "Traceback" not in err and "Unclosed" not in err
        # One access line per request, with our request id.
        assert err.count('"POST /v1/') == 2 and "req_" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


def _wait_healthy(proc: subprocess.Popen[str], base: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited early ({proc.returncode}): {proc.stderr.read()}")  # type: ignore[union-attr]
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"serve was not healthy within {timeout}s")


def test_serve_with_two_workers_answers_from_both() -> None:
    """--workers 2: both worker processes serve the config the parent resolved."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "interlingua.cli",
            "serve",
            "--fake",
            "--workers",
            "2",
            "--port",
            str(port),
            "--log-level",
            "info",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(proc, base, 30)
        for i in range(10):
            resp = httpx.post(
                base + "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": f"n{i}"}]},
                timeout=10,
            )
            assert resp.json()["choices"][0]["message"]["content"] == f"echo: n{i}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate(timeout=5)
    # Each worker process logs its own start; the access lines come from the workers.
    assert err.count("Started server process") == 2, err
    assert err.count('"POST /v1/chat/completions"') == 10, err


def test_workers_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--fake", "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err


_FREEZE_PROBE = """
import gc, sys
from interlingua.config import fake_config
from interlingua.server.process.serve import GatewayServerConfig
config = GatewayServerConfig(fake_config(), freeze_gc=sys.argv[1] == "1", port=0)
config.load()
print(gc.get_freeze_count())
"""


@pytest.mark.parametrize("freeze", [True, False])
def test_a_serving_process_freezes_what_it_built(freeze: bool) -> None:
    # `interlingua serve` (serve.run) moves the app and everything imported out of the
    # collector's sight once built; a process that only builds one (tests) does not.
    probe = [sys.executable, "-c", _FREEZE_PROBE, "1" if freeze else "0"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=True)
    frozen = int(done.stdout.split()[-1])
    assert frozen > 10_000 if freeze else frozen == 0


def test_serve_run_asks_for_the_freeze(monkeypatch: pytest.MonkeyPatch) -> None:
    from interlingua.server.process import serve

    made: list[dict[str, Any]] = []

    class Stop(Exception):
        pass

    def config(*args: Any, **kwargs: Any) -> Any:
        made.append(kwargs)
        raise Stop

    monkeypatch.setattr(serve, "GatewayServerConfig", config)
    with pytest.raises(Stop):
        serve.run(fake_config())
    assert made and made[0]["freeze_gc"] is True
