"""``/v1/embeddings`` lines in the batch runner: JSONL through the CLI, Parquet with the
vector in its own ``list<float32>`` column."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from interlingua.batch import BatchOptions, BatchRunner
from interlingua.batch.parquet import read_records, schema
from interlingua.batch.records import parse_line
from interlingua.batch.runner import make_client
from interlingua.client import decode_vector

from ..embeddings_server import EmbeddingsServer, vector_for
from .conftest import read_output, write_jsonl

CLI = [sys.executable, "-m", "interlingua.cli"]


@pytest.fixture
def embedder() -> Iterator[EmbeddingsServer]:
    srv = EmbeddingsServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def line(cid: str, text: Any, **body: Any) -> dict[str, Any]:
    return {"custom_id": cid, "method": "POST", "url": "/v1/embeddings",
            "body": {"input": text, **body}}  # fmt: skip


def test_embeddings_lines_through_the_cli(embedder: EmbeddingsServer, tmp_path: Path) -> None:
    """Each line's body goes as it is (the model from --model when it has none) to the
    server's /embeddings; the answer is the line's output body; a failing line is an
    error line and the others are untouched."""
    rows = [line(f"e{i}", f"text {i}") for i in range(20)]
    rows.append(line("many", ["a", "b", "c"], model="own", encoding_format="base64"))
    rows.append(line("small", "short", dimensions=3))
    rows.append(line("boom", "boom"))
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    args = [*CLI, "batch", "run", str(inp), "-o", str(out), "--base-url", embedder.v1,
            "--model", "emb", "--retries", "0", "--progress", "off"]  # fmt: skip
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "22 ok, 1 failed" in proc.stderr and "tokens: in 44" in proc.stderr
    records = {r["custom_id"]: r for r in read_output(out)}
    assert len(records) == 23
    for i in range(20):
        body = records[f"e{i}"]["response"]["body"]
        assert body["data"][0]["embedding"] == vector_for(f"text {i}")
        assert body["usage"]["prompt_tokens"] == 2
    many = records["many"]["response"]["body"]["data"]
    assert [decode_vector(d["embedding"]) for d in many] == [vector_for(t) for t in "abc"]
    assert len(records["small"]["response"]["body"]["data"][0]["embedding"]) == 3
    assert records["boom"]["error"]["code"] == "upstream_error"
    assert records["boom"]["response"]["status_code"] == 500
    assert set(embedder.paths) == {"/v1/embeddings"}
    models = {b["model"] for b in embedder.bodies}
    assert models == {"emb", "own"}


def test_the_url_is_checked() -> None:
    item = parse_line(orjson.dumps(line("a", "x")), 1)
    assert (item.endpoint, item.dialect) == ("embeddings", None)
    with pytest.raises(ValueError, match="/v1/embeddings"):
        parse_line(orjson.dumps({**line("a", "x"), "url": "/v1/embedding"}), 1)


async def test_parquet_rows_in_vectors_out_as_a_float32_column(
    embedder: EmbeddingsServer, tmp_path: Path
) -> None:
    rows = [{**line(f"p{i}", f"row {i}"), "body": orjson.dumps({"input": f"row {i}"}).decode()}
            for i in range(12)]  # fmt: skip
    rows.append({**rows[0], "custom_id": "pair", "body": '{"input": ["x", "y"]}'})
    inp = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), inp)
    out = tmp_path / "out.parquet"
    options = BatchOptions(inp, out, base_url=embedder.v1, model="emb", progress="off")
    client = make_client(options)
    try:
        await BatchRunner(options, client=client, stream=io.StringIO()).run()
    finally:
        await client.aclose()
    table = pq.read_table(out)
    assert table.schema == schema()
    assert table.schema.field("embedding").type == pa.list_(pa.float32())
    vectors = dict(zip(table.column("custom_id").to_pylist(),
                       table.column("embedding").to_pylist(), strict=True))  # fmt: skip
    assert vectors == {**{f"p{i}": vector_for(f"row {i}") for i in range(12)}, "pair": None}
    # The vector is stored once: the body text holds null in its place...
    bodies = [orjson.loads(r["body"]) for r in table.column("response").to_pylist()]
    assert all(b["data"][0]["embedding"] is None for b in bodies if len(b["data"]) == 1)
    # ...and reading the records back gives the JSONL output's bodies.
    records = {r["custom_id"]: r for r in read_records(out)}
    assert records["p3"]["response"]["body"]["data"][0]["embedding"] == vector_for("row 3")
    pair = records["pair"]["response"]["body"]["data"]
    assert [d["embedding"] for d in pair] == [vector_for("x"), vector_for("y")]
