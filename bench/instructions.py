"""Instructions per request under callgrind: the one gateway cost this noisy machine cannot blur.

    python -m bench.instructions --team off,on --scenario passthrough-stream

Paired wall-clock runs (``bench.ab``) swing by 10 % and more between sittings on a
shared two-core machine; user-space instruction counts do not (two runs agree within
0.2 %). For each team variant (``scenarios.team_sections``) the gateway runs under
``valgrind --tool=callgrind`` twice, answering ``--first`` and then ``--second``
requests of the scenario against the nginx mock; the difference of the two totals over
the difference of the counts is the instructions one request costs, start-up excluded.
Kernel work (the sockets) is not counted, so the ratio between variants overstates
their wall-clock ratio; it says where Python work was added, and by how much. Each
run's callgrind files stay under the printed directory for ``callgrind_annotate``.

Needs Debian's ``valgrind``; a run takes a minute or two per variant.
"""

from __future__ import annotations

import argparse
import glob
import http.client
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from .nginx import Nginx
from .procs import ensure_tools, free_port, start, wait_ready
from .scenarios import (
    BY_NAME,
    CLIENT_KEY,
    TEAM_KEY_ENV,
    TEAMS,
    Scenario,
    gateway_config_yaml,
    request_body,
    team_sections,
)
from .servers import serve_command

#: client connections driving the gateway (a few: under callgrind it serves ~200 req/s)
CONNECTIONS = 4


def drive(port: int, scenario: Scenario, count: int) -> None:
    """``count`` requests of ``scenario``, each read to its end; any non-200 fails."""
    payload = request_body(scenario)
    headers = {"content-type": "application/json"}
    headers.update(line.split(": ", 1) for line in scenario.headers)
    failures: list[str] = []

    def client(n: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            for _ in range(n):
                conn.request("POST", scenario.path, payload, headers)
                answer = conn.getresponse()
                answer.read()
                if answer.status != 200:
                    failures.append(f"status {answer.status}")
                    return
        finally:
            conn.close()

    share = [count // CONNECTIONS + (i < count % CONNECTIONS) for i in range(CONNECTIONS)]
    threads = [threading.Thread(target=client, args=(n,)) for n in share]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"requests failed: {failures[:3]}")


def instructions(
    nginx_base: str,
    tmp: Path,
    src: str,
    scenario: Scenario,
    team: str,
    count: int,
    on_break: str = "",
) -> int:
    """Instructions the gateway ran (every thread, start to stop) answering ``count``
    (``on_break``: every model's ``on_stream_break``, with a fallback each)."""
    port = free_port()
    where = tmp / f"{team}-{on_break}-{count}"
    where.mkdir()
    config = where / "gateway.yaml"
    sections = team_sections(team, where)
    config.write_text(gateway_config_yaml(nginx_base, port, [scenario], sections, on_break))
    env = {**os.environ, "PYTHONPATH": src, TEAM_KEY_ENV: CLIENT_KEY, "PYTHONHASHSEED": "0"}
    out = where / "callgrind.out"
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    proc = start([*command, *serve_command(config, port, 1, False)], where / "log", env=env)
    try:
        wait_ready(f"http://127.0.0.1:{port}/health", proc.proc, 900, team)
        drive(port, scenario, count)
        time.sleep(2)  # the usage log's last flush
    finally:
        # (callgrind writes its files at exit, slowly on a busy machine: a SIGKILL after
        # the usual grace would leave them without totals)
        proc.stop(grace=300)
    return callgrind_total(out)


def callgrind_total(out: Path) -> int:
    """The instructions counted in ``out`` and its per-process/thread siblings
    (``out.<pid>``...); RuntimeError for a file without totals (callgrind was stopped
    before it wrote them)."""
    total = 0
    for path in glob.glob(f"{out}*"):
        totals = [
            line for line in Path(path).read_text().splitlines() if line.startswith("totals:")
        ]
        if not totals:
            raise RuntimeError(f"{path} has no totals: callgrind did not finish writing it")
        total += int(totals[0].split()[1])
    return total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.instructions", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--scenario", default="passthrough", choices=sorted(BY_NAME))
    parser.add_argument("--team", default="off,on", help=f"variants, from {', '.join(TEAMS)}")
    parser.add_argument("--first", type=int, default=200, help="requests of the first run")
    parser.add_argument("--second", type=int, default=1000, help="requests of the second run")
    parser.add_argument("--src", default=str(Path(__file__).parents[1] / "src"))
    parser.add_argument(
        "--break",
        dest="breaks",
        default="",
        help="on_stream_break variants to compare (error,continue: every model gets a "
        "fallback), each with every --team variant",
    )
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    teams = args.team.split(",")
    for team in teams:
        if team not in TEAMS:
            parser.error(f"unknown team variant {team!r}")
    tools = ensure_tools()
    tmp = Path(tempfile.mkdtemp(prefix="bench-instructions-"))
    print(f"callgrind files under {tmp}", flush=True)
    scenario = BY_NAME[args.scenario]
    variants = [(team, on_break) for on_break in args.breaks.split(",") for team in teams]
    per: dict[tuple[str, str], float] = {}
    with Nginx(tools["nginx"], tmp) as nginx:
        for variant in variants:
            team, on_break = variant
            low, high = (
                instructions(nginx.base, tmp, args.src, scenario, team, count, on_break)
                for count in (args.first, args.second)
            )
            per[variant] = (high - low) / (args.second - args.first)
            first = variants[0]
            ratio = f" ({per[variant] / per[first]:.3f}x the first)" if variant != first else ""
            named = f" on_stream_break={on_break}" if on_break else ""
            print(
                f"{args.scenario} team={team}{named}: "
                f"{per[variant]:,.0f} instructions/request{ratio}"
            )


if __name__ == "__main__":
    main()
