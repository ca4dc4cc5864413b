"""The batch runner: thousands of requests from a JSONL or Parquet file, concurrent, resumable.

::

    interlingua batch run in.jsonl -o out.jsonl --base-url http://127.0.0.1:8400/v1 \\
        --model qwen3 --concurrency 256

or from Python::

    from interlingua.batch import BatchOptions, run_batch
    run_batch(BatchOptions(Path("in.jsonl"), Path("out.jsonl"), model="qwen3"))

Modules: ``records`` (input lines, output lines), ``output`` (the append-only output file,
scan and repair on resume, compaction), ``runner`` (the engine), ``calls`` (one line ->
one call), ``progress`` (bar, log lines, summary), ``idset`` (the compact set of ids),
``command`` (the ``interlingua batch`` command line), ``files`` (JSONL or Parquet, column
names), ``parquet`` (Parquet rows in, a directory of parts out; needs pyarrow), ``ray``
and ``ray_limits`` (``--engine ray``: a Ray Data actor pool; imported only then).
"""

from .output import OutputScan, OutputWriter, compact
from .progress import BatchStats, Progress, format_summary
from .records import BatchItem, LineError, parse_line, parse_shard
from .runner import BatchOptions, BatchResult, BatchRunner
from .terminal import run_batch

__all__ = [
    "BatchItem",
    "BatchOptions",
    "BatchResult",
    "BatchRunner",
    "BatchStats",
    "LineError",
    "OutputScan",
    "OutputWriter",
    "Progress",
    "compact",
    "format_summary",
    "parse_line",
    "parse_shard",
    "run_batch",
]
