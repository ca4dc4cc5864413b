"""GET /metrics: the values after known requests, names but never keys, the upstream lines,
``metrics: false``, and one combined view across worker processes (multiprocess mode)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from interlingua.config import LimitsConfig, ServerConfig, fake_config
from interlingua.server.app import create_app
from interlingua.server.views import metrics as metrics_module
from interlingua.server.views.metrics import OTHER_MODEL, Metrics
from interlingua.server.views.multiproc import MULTIPROC_ENV, multiprocess_dir, shared_dir
from interlingua.upstreams.fake import FakeUpstream
from interlingua.upstreams.limited import LimitedUpstream
from interlingua.usage.record import CONTINUED, Record

from ..gateway_process import env as gateway_env
from ..gateway_process import serve

SECRET = "sk-team-a-do-not-show-1f2e3d"


def row(
    model: str = "m",
    *,
    key: str | None = "team-a",
    dialect: str = "openai",
    status: int = 200,
    stream: bool = False,
    error: str | None = None,
    tokens: tuple[int, int, int, int] = (0, 0, 0, 0),
    latency: float = 0.2,
    ttft: float | None = None,
    upstream: str | None = "up",
) -> Record:
    out = Record(
        at=time.time(), request_id="req_x", key=key, dialect=dialect, model=model, stream=stream
    )
    out.status, out.error, out.latency, out.ttft = status, error, latency, ttft
    out.input_tokens, out.output_tokens, out.cached_tokens, out.reasoning_tokens = tokens
    out.upstream, out.upstream_model = upstream, (model if upstream else None)
    return out


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition text: (name, labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found[(name, frozenset(labels.items()))]


def scrape(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain; version=0.0.4")
    return samples(body.decode())


def test_values_after_known_requests() -> None:
    metrics = Metrics()
    metrics.record(row(tokens=(100, 20, 60, 5), latency=0.3))
    metrics.record(row(tokens=(50, 10, 0, 0), latency=0.7))
    metrics.record(
        row(stream=True, dialect="anthropic", tokens=(7, 3, 0, 0), latency=2.0, ttft=0.04)
    )
    metrics.record(row("other-model", key="team-b", status=429, error="rate_limit", upstream=None))
    # a stream that failed after its 200 went out: counted as a 200 and as an error
    metrics.record(row(stream=True, error="upstream_error", latency=1.5, ttft=0.2))
    found = scrape(metrics)

    requests = "interlingua_requests_total"
    assert value(found, requests, model="m", key="team-a", dialect="openai", status="200") == 3
    assert value(found, requests, model="m", key="team-a", dialect="anthropic", status="200") == 1
    assert (
        value(found, requests, model="other-model", key="team-b", dialect="openai", status="429")
        == 1
    )

    errors = "interlingua_request_errors_total"
    assert value(found, errors, model="other-model", key="team-b", kind="rate_limit") == 1
    assert value(found, errors, model="m", key="team-a", kind="upstream_error") == 1
    assert not [k for k in found if k[0] == errors and ("kind", "") in k[1]]

    tokens = "interlingua_tokens_total"
    assert value(found, tokens, model="m", key="team-a", direction="input") == 157
    assert value(found, tokens, model="m", key="team-a", direction="output") == 33
    assert value(found, tokens, model="m", key="team-a", direction="cached") == 60
    assert value(found, tokens, model="m", key="team-a", direction="reasoning") == 5

    duration = "interlingua_request_duration_seconds"
    assert value(found, duration + "_count", model="m", stream="false") == 2
    assert value(found, duration + "_sum", model="m", stream="false") == pytest.approx(1.0)
    assert value(found, duration + "_bucket", model="m", stream="false", le="0.5") == 1
    assert value(found, duration + "_bucket", model="m", stream="false", le="1.0") == 2
    assert value(found, duration + "_count", model="m", stream="true") == 2
    assert value(found, duration + "_sum", model="m", stream="true") == pytest.approx(3.5)

    ttft = "interlingua_time_to_first_token_seconds"
    assert value(found, ttft + "_count", model="m") == 2  # the streams only
    assert value(found, ttft + "_sum", model="m") == pytest.approx(0.24)
    assert value(found, ttft + "_bucket", model="m", le="0.05") == 1
    assert value(found, ttft + "_count", model="other-model") == 0


def test_cost_per_key_and_model() -> None:
    """Exact dollars summed per (key, model), continued attempts included, exported as
    the counter's float; an unpriced model shows no cost series at all (not a 0)."""
    metrics = Metrics()
    priced = [row(), row(stream=True), row(key="team-b"), row(error=CONTINUED)]
    for out, cost in zip(priced, ("0.2133", "0.5615", "0.1", "0.0000001"), strict=True):
        out.cost_usd = Decimal(cost)
    for out in priced:
        metrics.record(out)
    metrics.record(row("free"))  # unpriced: cost_usd None
    found = scrape(metrics)
    cost = "interlingua_cost_usd_total"
    assert value(found, cost, key="team-a", model="m") == pytest.approx(0.7748001, abs=1e-12)
    assert value(found, cost, key="team-b", model="m") == 0.1
    assert not [k for k in found if k[0] == cost and ("model", "free") in k[1]]
    metrics.record(priced[0])  # (counted on: a counter)
    found = scrape(metrics)
    assert value(found, cost, key="team-a", model="m") == pytest.approx(0.9881001, abs=1e-12)


def test_in_flight_and_attempts() -> None:
    metrics = Metrics()
    for _ in range(3):
        metrics.request_started()
    metrics.request_ended()
    for outcome in ("ok", "ok", "rate_limit", "timeout", "rate_limit"):
        metrics.attempt("nim", outcome)
    metrics.attempt("vllm", "ok")
    found = scrape(metrics)
    assert value(found, "interlingua_in_flight") == 2
    attempts = "interlingua_upstream_attempts_total"
    assert value(found, attempts, upstream="nim", outcome="ok") == 2
    assert value(found, attempts, upstream="nim", outcome="error") == 3
    assert value(found, attempts, upstream="vllm", outcome="ok") == 1
    upstream_errors = "interlingua_upstream_errors_total"
    assert value(found, upstream_errors, upstream="nim", kind="rate_limit") == 2
    assert value(found, upstream_errors, upstream="nim", kind="timeout") == 1
    assert (
        "interlingua_upstream_errors_total",
        frozenset({("upstream", "vllm"), ("kind", "ok")}),
    ) not in found


def test_no_key_no_key_label_value() -> None:
    """No named keys: the ``key`` label is empty (Prometheus reads that as absent)."""
    metrics = Metrics()
    metrics.record(row(key=None))
    found = scrape(metrics)
    assert (
        value(
            found, "interlingua_requests_total", model="m", key="", dialect="openai", status="200"
        )
        == 1
    )


def test_model_names_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wildcard route lets clients send any name: past MAX_MODELS they share one label."""
    monkeypatch.setattr(metrics_module, "MAX_MODELS", 3)
    metrics = Metrics()
    for i in range(6):
        metrics.record(row(f"name-{i}"))
    metrics.record(row("name-0"))
    found = scrape(metrics)
    requests = {
        dict(labels)["model"]: v
        for (name, labels), v in found.items()
        if name == "interlingua_requests_total"
    }
    assert requests == {"name-0": 2, "name-1": 1, "name-2": 1, OTHER_MODEL: 3}


def test_a_broken_record_is_swallowed_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    bad = row()
    bad.latency = "slow"  # type: ignore[assignment]
    metrics.record(bad)
    metrics.record(bad)
    assert caplog.text.count("could not be counted") == 1
    metrics.record(row())  # the next good one counts; the broken ones not even in part
    assert (
        value(
            scrape(metrics),
            "interlingua_requests_total",
            model="m",
            key="team-a",
            dialect="openai",
            status="200",
        )
        == 1
    )


async def test_queue_depth_is_read_at_scrape() -> None:
    limited = LimitedUpstream(FakeUpstream("nim"), LimitsConfig(max_concurrency=1))
    metrics = Metrics({"nim": limited, "plain": FakeUpstream("plain")})
    depth = "interlingua_upstream_queue_depth"
    assert value(scrape(metrics), depth, upstream="nim") == 0
    assert not [k for k in scrape(metrics) if k[0] == depth and ("upstream", "plain") in k[1]]
    held = await limited.limiter.acquire()
    waiting = [asyncio.create_task(limited.limiter.acquire()) for _ in range(2)]
    await asyncio.sleep(0)
    assert value(scrape(metrics), depth, upstream="nim") == 2
    held.release()
    first = await waiting[0]
    assert value(scrape(metrics), depth, upstream="nim") == 1
    first.release()
    (await waiting[1]).release()
    assert value(scrape(metrics), depth, upstream="nim") == 0


async def test_the_endpoint_and_its_content_types() -> None:
    app = create_app(fake_config())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://gw"
    ) as client:
        plain = await client.get("/metrics")
        assert plain.status_code == 200
        assert plain.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert "# TYPE interlingua_requests_total counter" in plain.text
        assert "interlingua_in_flight 0.0" in plain.text
        open_metrics = await client.get(
            "/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"}
        )
        assert open_metrics.headers["content-type"].startswith("application/openmetrics-text")
        assert open_metrics.text.endswith("# EOF\n")
        assert (await client.post("/metrics")).status_code == 405


async def test_metrics_false_is_a_404() -> None:
    app = create_app(replace(fake_config(), metrics=False))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://gw"
    ) as client:
        assert (await client.get("/metrics")).status_code == 404
        assert (await client.get("/health")).status_code == 200


async def test_no_key_anywhere_in_metrics_or_status_data() -> None:
    """Clients send a secret key; /metrics and /ui/data show names, never the key. The
    records are the ones the request path hands to the sinks (key *name* only)."""
    config = fake_config(ServerConfig(api_keys=(SECRET,)))
    app = create_app(config)
    auth = {"authorization": f"Bearer {SECRET}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://gw"
    ) as client:
        for stream in (False, True):
            body = {
                "model": "fake",
                "stream": stream,
                "messages": [{"role": "user", "content": "hi"}],
            }
            answer = await client.post("/v1/chat/completions", json=body, headers=auth)
            assert answer.status_code == 200
        refused = await client.post(
            "/v1/chat/completions", json=body, headers={"authorization": "Bearer wrong"}
        )
        assert refused.status_code == 401
        sinks = [
            route.endpoint.__self__
            for route in app.app.routes
            if route.path in ("/metrics", "/ui/data")
        ]
        for sink in sinks:
            sink.record(row("fake", key="team-a", tokens=(5, 2, 0, 0)))
        text = (await client.get("/metrics")).text
        data = (await client.get("/ui/data", headers=auth)).text
    assert 'key="team-a"' in text and '"team-a"' in data
    for shown in (text, data):
        assert SECRET not in shown
        assert SECRET[3:] not in shown  # not even without its prefix


# -- several worker processes ---------------------------------------------------------

_WORKER = textwrap.dedent(
    """
    import sys, time
    from interlingua.server.views.metrics import Metrics
    from interlingua.server.views.multiproc import multiprocess_dir
    from interlingua.usage.record import Record

    assert multiprocess_dir() is not None, "multiprocess mode is off"
    dialect, count, stay = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "stay"
    metrics = Metrics()
    for i in range(count):
        row = Record(at=time.time(), request_id=f"r{i}", key="team-a", dialect=dialect, model="m")
        row.status, row.input_tokens, row.output_tokens, row.latency = 200, 10, 4, 0.5
        metrics.request_started()
        metrics.record(row)
        metrics.request_ended()
    metrics.request_started()  # one request still in flight in this process
    metrics.attempt("up", "ok")
    print("ready", flush=True)
    if stay:
        sys.stdin.readline()  # until the test is done scraping
    """
)

_SCRAPE = textwrap.dedent(
    """
    from interlingua.server.views.metrics import Metrics
    print(Metrics().render()[0].decode())
    """
)


def _python(code: str, directory: Path, *args: str, **popen: object) -> subprocess.Popen[str]:
    environment = gateway_env()
    environment[MULTIPROC_ENV] = str(directory)
    return subprocess.Popen(  # type: ignore[call-overload,no-any-return]
        [sys.executable, "-c", code, *args], env=environment, text=True, **popen
    )


def test_one_view_across_processes(tmp_path: Path) -> None:
    """Two processes write into one directory; a scrape from a third sees both. The one
    that exited no longer counts as in flight; its counts stay."""
    staying = _python(
        _WORKER, tmp_path, "openai", "3", "stay", stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert staying.stdout is not None and staying.stdout.readline().strip() == "ready"
        gone = _python(_WORKER, tmp_path, "anthropic", "5", "exit", stdout=subprocess.PIPE)
        assert gone.communicate(timeout=60)[0].strip() == "ready" and gone.returncode == 0
        scraper = _python(_SCRAPE, tmp_path, stdout=subprocess.PIPE)
        text, _ = scraper.communicate(timeout=60)
        assert scraper.returncode == 0
    finally:
        staying.communicate("done\n", timeout=60)
    found = samples(text)
    requests = "interlingua_requests_total"
    assert value(found, requests, model="m", key="team-a", dialect="openai", status="200") == 3
    assert value(found, requests, model="m", key="team-a", dialect="anthropic", status="200") == 5
    assert (
        value(found, "interlingua_tokens_total", model="m", key="team-a", direction="input") == 80
    )
    assert (
        value(found, "interlingua_request_duration_seconds_count", model="m", stream="false") == 8
    )
    assert value(found, "interlingua_upstream_attempts_total", upstream="up", outcome="ok") == 2
    assert value(found, "interlingua_in_flight") == 1  # the exited one's is forgotten


_LOOP_WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from interlingua.config import LimitsConfig
    from interlingua.server.views import metrics as m
    from interlingua.upstreams.fake import FakeUpstream
    from interlingua.upstreams.limited import LimitedUpstream
    from interlingua.usage.record import Record

    m.FLUSH_SECONDS = 0.05

    async def main():
        limited = LimitedUpstream(FakeUpstream("nim"), LimitsConfig(max_concurrency=1))
        metrics = m.Metrics({"nim": limited})
        await limited.limiter.acquire()
        waiting = [asyncio.create_task(limited.limiter.acquire()) for _ in range(3)]
        await asyncio.sleep(0)
        metrics.request_started()
        row = Record(at=0.0, request_id="r", key=None, dialect="openai", model="m")
        row.status, row.output_tokens = 200, 9
        metrics.record(row)
        await asyncio.sleep(0.5)  # no scrape here: the timer alone writes the shared files
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        for task in waiting:
            task.cancel()

    asyncio.run(main())
    """
)


def test_a_worker_flushes_on_its_own_within_a_second(tmp_path: Path) -> None:
    """In multiprocess mode a worker nobody scrapes still writes its counts, in-flight
    requests and upstream line to the shared files (on a timer after each change)."""
    worker = _python(_LOOP_WORKER, tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        scraper = _python(_SCRAPE, tmp_path, stdout=subprocess.PIPE)
        text, _ = scraper.communicate(timeout=60)
    finally:
        worker.communicate("done\n", timeout=60)
    assert worker.returncode == 0
    found = samples(text)
    assert value(found, "interlingua_upstream_queue_depth", upstream="nim") == 3
    assert value(found, "interlingua_in_flight") == 1
    assert value(found, "interlingua_tokens_total", model="m", key="", direction="output") == 9


def test_shared_dir_is_fresh_and_removed() -> None:
    before = os.environ.get(MULTIPROC_ENV)
    with shared_dir() as path:
        assert os.environ[MULTIPROC_ENV] == path and os.listdir(path) == []
        Path(path, "counter_1.db").write_bytes(b"x")
    assert not os.path.exists(path)
    assert os.environ.get(MULTIPROC_ENV) == before
    assert multiprocess_dir() is None  # this test process never was in multiprocess mode


def test_serve_workers_share_one_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve --workers 2`` points both workers at one fresh directory (in TMPDIR), where
    each writes its files; any worker's /metrics and /ui/data count both; it is gone after."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # gateway_env() passes it to the server
    config = {
        "upstreams": {"fake": {"kind": "fake"}},
        "models": [{"name": "fake", "upstream": "fake"}],
    }
    with serve(tmp_path, config, workers=2, log_level="warning") as gateway:
        [directory] = temp.glob("interlingua-metrics-*")
        pids: set[str] = set()
        deadline = time.monotonic() + 30
        while len(pids) < 2 and time.monotonic() < deadline:  # both workers loaded
            pids = {p.stem.rsplit("_", 1)[1] for p in directory.glob("gauge_livesum_*.db")}
            time.sleep(0.05)
        assert len(pids) == 2, pids
        for _ in range(6):  # whichever worker answers, it counts both
            text = httpx.get(gateway.url + "/metrics", timeout=10).text
            assert "interlingua_in_flight 0.0" in text
            assert httpx.get(gateway.url + "/ui/data", timeout=10).json()["workers"] == 2
        # real traffic, spread over both workers by the kernel: every scrape, whichever
        # worker answers it, counts all of it once each worker has flushed (within 1 s)
        body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
        for _ in range(20):  # (a connection each: new connections spread over workers)
            answer = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=10)
            assert answer.status_code == 200
        total = 0.0
        deadline = time.monotonic() + 10
        while total != 20 and time.monotonic() < deadline:
            time.sleep(0.2)
            found = samples(httpx.get(gateway.url + "/metrics", timeout=10).text)
            total = sum(
                v
                for (name, labels), v in found.items()
                if name == "interlingua_requests_total" and dict(labels)["model"] == "fake"
            )
        assert total == 20
        for _ in range(4):  # and every worker says so
            found = samples(httpx.get(gateway.url + "/metrics", timeout=10).text)
            assert (
                sum(v for (name, _), v in found.items() if name == "interlingua_requests_total")
                == 20
            )
        code, log = gateway.stop()
        assert code == 0, log
    assert not directory.exists()
