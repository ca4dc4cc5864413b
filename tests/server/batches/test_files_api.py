"""The Files API through the official openai SDK against a live gateway, on both stores
(SQLite with a directory; PostgreSQL with chunk rows): upload, list (purpose, limit and
``after`` pages, order), retrieve, content, delete; the size limit (413, nothing kept);
owners (another key's file is the same 404 as an unknown one; an open gateway shares
one owner); expiry (bytes and row deleted by the sweep); ``expires_after`` on upload.

The store's own rules are tested without HTTP in tests/batches/test_file_store.py.
"""

from __future__ import annotations

import hashlib
import io
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from interlingua.batches.schema import CHUNKS, FILES
from interlingua.config import parse_config
from interlingua.server import create_app

from ...live_server import live_server
from ...request_ids import without_request_id
from ...usage.postgres import postgres_url

KEY_A = "sk-files-team-a-0123456789"
KEY_B = "sk-files-team-b-abcdefghij"
#: the fields of the API's ``file`` object (openai/types/file_object.py)
FILE_FIELDS = {
    "id", "object", "bytes", "created_at", "expires_at", "filename", "purpose", "status",
    "status_details",
}  # fmt: skip
LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_url() as url:
        yield url


@dataclass
class Served:
    """A running gateway and where its store keeps things."""

    url: str
    store_url: str
    files_dir: Path

    def client(self, key: str = KEY_A) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0)

    def rows(self) -> tuple[list[Any], list[Any], list[str]]:
        """(file rows, chunk rows, files in the directory), read straight from the store."""
        import asyncio

        from interlingua.usage import connect

        async def read() -> tuple[list[Any], list[Any]]:
            db = connect(self.store_url)
            try:
                files = await db.fetch(f"SELECT id, status FROM {FILES}")
                chunks = await db.fetch(f"SELECT file_id, seq FROM {CHUNKS}")
            finally:
                await db.aclose()
            return files, chunks

        files, chunks = asyncio.run(read())
        listed = sorted(os.listdir(self.files_dir)) if self.files_dir.exists() else []
        return files, chunks, listed


def _gateway(
    request: pytest.FixtureRequest, tmp: Path, *, keys: bool = True, **files: Any
) -> Iterator[Served]:
    if request.param == "sqlite":
        store_url = f"sqlite://{tmp}/batches.db"
    else:
        store_url = request.getfixturevalue("postgres")
        _empty(store_url)
    raw: dict[str, Any] = {
        "upstreams": {"fake": {"kind": "fake"}},
        "models": [{"name": "m", "upstream": "fake"}],
        "usage": False,
        "files": {"max_bytes": LIMIT, **files},
        "batches": {"url": store_url},
    }
    if keys:
        raw["keys"] = [
            {"name": name, "key_sha256": hashlib.sha256(key.encode()).hexdigest()}
            for name, key in (("team-a", KEY_A), ("team-b", KEY_B))
        ]
    with live_server(create_app(parse_config(raw))) as url:
        yield Served(url, store_url, tmp / "files")


def _empty(store_url: str) -> None:
    """Each test starts with no files (one PostgreSQL serves the module)."""
    import asyncio

    from interlingua.batches import open_batch_store

    async def clear() -> None:
        store = open_batch_store(store_url)
        await store.open()
        await store.db.execute(f"DELETE FROM {FILES}")
        await store.db.execute(f"DELETE FROM {CHUNKS}")
        await store.aclose()

    asyncio.run(clear())


@pytest.fixture(params=["sqlite", "postgresql"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    yield from _gateway(request, tmp_path)


@pytest.fixture(params=["sqlite", "postgresql"])
def open_gateway(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    yield from _gateway(request, tmp_path, keys=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def expiring(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    yield from _gateway(request, tmp_path, expire_after="1s")


def test_upload_retrieve_download_delete(served: Served) -> None:
    client = served.client()
    data = b"".join(b'{"custom_id": "r%d", "body": {}}\n' % i for i in range(20_000))
    created = client.files.create(file=("requests.jsonl", io.BytesIO(data)), purpose="batch")
    assert created.id.startswith("file-") and created.object == "file"
    assert (created.bytes, created.filename, created.purpose) == (
        len(data),
        "requests.jsonl",
        "batch",
    )
    assert created.status == "processed" and created.status_details is None
    # 30 days by default (files.expire_after)
    assert created.expires_at == created.created_at + 30 * 24 * 3600
    raw = client.files.with_raw_response.retrieve(created.id)
    assert set(raw.http_response.json()) == FILE_FIELDS
    assert raw.parse() == created
    content = client.files.content(created.id)
    assert content.content == data
    assert content.response.headers["content-type"] == "application/octet-stream"
    assert content.response.headers["content-length"] == str(len(data))
    deleted = client.files.delete(created.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (created.id, "file", True)
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.files.delete(created.id)
    assert served.rows() == ([], [], [])


def test_list_filters_pages_and_orders(served: Served) -> None:
    client = served.client()
    made = [
        client.files.create(
            file=(f"f{i}.jsonl", io.BytesIO(b"%d\n" % i)),
            purpose="batch" if i % 2 == 0 else "user_data",
        ).id
        for i in range(5)
    ]
    newest_first = made[::-1]
    first = client.files.list(limit=2)
    assert [f.id for f in first.data] == newest_first[:2] and first.has_more
    # the SDK follows ``after`` (the last id of each page) to the end
    assert [f.id for f in client.files.list(limit=2)] == newest_first
    assert [f.id for f in client.files.list(order="asc")] == made
    page = client.files.list(order="asc", limit=2, after=made[1])
    assert [f.id for f in page.data] == made[2:4] and page.has_more
    assert [f.id for f in client.files.list(purpose="user_data")] == [made[3], made[1]]
    body = client.files.with_raw_response.list(limit=3).http_response.json()
    assert body["object"] == "list" and body["has_more"] is True
    assert (body["first_id"], body["last_id"]) == (newest_first[0], newest_first[2])
    assert client.files.list(purpose="batch", limit=10_000).data[0].id == made[4]
    for bad in ({"limit": 0}, {"limit": 10_001}, {"order": "up"}, {"after": "file-nope"}):
        with pytest.raises(openai.BadRequestError) as info:
            client.files.list(**bad)  # type: ignore[arg-type]
        assert info.value.body["param"] == next(iter(bad))  # type: ignore[index]


def test_a_file_over_the_limit_is_413_and_nothing_stays(served: Served) -> None:
    client = served.client()
    with pytest.raises(openai.APIStatusError) as info:
        client.files.create(file=("big.jsonl", io.BytesIO(b"x" * (3 * LIMIT))), purpose="batch")
    assert info.value.status_code == 413
    assert info.value.body["code"] == "file_too_large"  # type: ignore[index]
    assert "files.max_bytes" in info.value.body["message"]  # type: ignore[index]

    # No Content-Length (chunked): refused when the file passes the limit, mid-body.
    def body() -> Iterator[bytes]:
        yield b'--B\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        yield b'--B\r\nContent-Disposition: form-data; name="file"; filename="x"\r\n\r\n'
        for _ in range(4 * LIMIT // 65536):
            yield b"y" * 65536
        yield b"\r\n--B--\r\n"

    answer = httpx.post(
        served.url + "/v1/files",
        content=body(),
        headers={
            "content-type": "multipart/form-data; boundary=B",
            "authorization": f"Bearer {KEY_A}",
        },
    )
    assert answer.status_code == 413 and answer.json()["error"]["param"] == "file"
    # exactly at the limit is accepted
    fits = client.files.create(file=("fits", io.BytesIO(b"z" * LIMIT)), purpose="user_data")
    files, chunks, listed = served.rows()
    assert files == [(fits.id, "processed")]
    assert {c[0] for c in chunks} <= {fits.id} and set(listed) <= {fits.id}


def test_refused_forms_name_what_is_accepted(served: Served) -> None:
    client = served.client()
    with pytest.raises(openai.BadRequestError) as info:
        client.files.create(file=("a", io.BytesIO(b"a")), purpose="fine-tune")
    message = info.value.body["message"]  # type: ignore[index]
    assert "batch or user_data" in message and info.value.body["param"] == "purpose"  # type: ignore[index]
    for seconds in (60, 3_000_000):
        with pytest.raises(openai.BadRequestError) as info:
            client.files.create(
                file=("a", io.BytesIO(b"a")),
                purpose="batch",
                expires_after={"anchor": "created_at", "seconds": seconds},
            )
        assert info.value.body["param"] == "expires_after.seconds"  # type: ignore[index]
    headers = {"authorization": f"Bearer {KEY_A}"}
    no_file = httpx.post(
        served.url + "/v1/files", data={"purpose": "batch"}, files={"x": b""}, headers=headers
    )
    assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file"
    not_a_form = httpx.post(served.url + "/v1/files", json={"purpose": "batch"}, headers=headers)
    assert not_a_form.status_code == 400 and "multipart/form-data" in not_a_form.text
    assert served.rows() == ([], [], [])


def test_expires_after_on_upload(served: Served) -> None:
    created = served.client().files.create(
        file=("a", io.BytesIO(b"a")),
        purpose="user_data",
        expires_after={"anchor": "created_at", "seconds": 7200},
    )
    assert created.expires_at == created.created_at + 7200


def test_another_keys_file_is_the_same_404_as_an_unknown_one(served: Served) -> None:
    mine = served.client(KEY_A).files.create(file=("a", io.BytesIO(b"secret")), purpose="batch")
    theirs = served.client(KEY_B)
    for call in (theirs.files.retrieve, theirs.files.content, theirs.files.delete):
        with pytest.raises(openai.NotFoundError) as foreign:
            call(mine.id)
        unknown_id = "file-" + "x" * 24
        with pytest.raises(openai.NotFoundError) as unknown:
            call(unknown_id)
        assert without_request_id(foreign.value.body["message"]).replace(mine.id, "ID") == (  # type: ignore[index]
            without_request_id(unknown.value.body["message"]).replace(unknown_id, "ID")  # type: ignore[index]
        )
    assert theirs.files.list().data == []
    assert served.client(KEY_A).files.retrieve(mine.id) == mine  # (still there for its owner)
    with pytest.raises(openai.AuthenticationError):
        served.client("sk-wrong").files.list()


def test_an_open_gateway_shares_its_files(open_gateway: Served) -> None:
    made = open_gateway.client("anything").files.create(
        file=("a", io.BytesIO(b"a")), purpose="batch"
    )
    other = open_gateway.client("something-else")
    assert [f.id for f in other.files.list()] == [made.id]
    assert other.files.delete(made.id).deleted


def test_expiry_deletes_bytes_and_row(expiring: Served) -> None:
    client = expiring.client()
    made = client.files.create(file=("a", io.BytesIO(b"a" * 1000)), purpose="batch")
    assert made.expires_at is not None and made.expires_at - made.created_at == 1
    deadline = time.monotonic() + 10
    while expiring.rows() != ([], [], []):
        assert time.monotonic() < deadline, f"not swept: {expiring.rows()}"
        time.sleep(0.1)
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(made.id)


def test_an_upload_cut_off_midway_leaves_nothing(served: Served) -> None:
    import socket
    from urllib.parse import urlsplit

    address = urlsplit(served.url)
    head = (
        "POST /v1/files HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {KEY_A}\r\n"
        "Content-Type: multipart/form-data; boundary=B\r\nContent-Length: 900000\r\n\r\n"
    ).encode()
    part = b'--B\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
    part += b'--B\r\nContent-Disposition: form-data; name="file"; filename="x"\r\n\r\n'
    with socket.create_connection((address.hostname, address.port)) as sock:
        sock.sendall(head + part + b"q" * 300_000)
        deadline = time.monotonic() + 10
        while not served.rows()[0]:  # (the upload has begun)
            assert time.monotonic() < deadline
            time.sleep(0.02)
    deadline = time.monotonic() + 10
    while served.rows() != ([], [], []):
        assert time.monotonic() < deadline, f"left behind: {served.rows()}"
        time.sleep(0.05)
