"""The object store contract, on the filesystem and on S3 (moto's S3 server on loopback)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from mosoo_core.files import FilesystemStore, ObjectStore, S3Store
from tests.support.processes import free_port


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(params=["filesystem", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "filesystem":
        return FilesystemStore(tmp_path / "objects")
    endpoint = request.getfixturevalue("s3_endpoint")
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    bucket = f"mosoo-{tmp_path.name.lower().replace('_', '-')[:40]}"
    client.create_bucket(Bucket=bucket)
    return S3Store(bucket, client)


def test_put_open_delete_round_trip(store: ObjectStore) -> None:
    data = b"x" * (3 * 1024 * 1024 + 17)  # more than one chunk
    assert store.put("app1/checkpoints/s1/workspace.tar", io.BytesIO(data)) == len(data)
    assert store.exists("app1/checkpoints/s1/workspace.tar")
    with store.open("app1/checkpoints/s1/workspace.tar") as handle:
        assert handle.read() == data
    store.delete("app1/checkpoints/s1/workspace.tar")
    assert not store.exists("app1/checkpoints/s1/workspace.tar")


def test_delete_prefix_removes_only_that_prefix(store: ObjectStore) -> None:
    for key in ("app1/s1/a", "app1/s1/b/c", "app1/s2/a"):
        store.put(key, io.BytesIO(b"1"))
    assert store.delete_prefix("app1/s1") == 2
    assert not store.exists("app1/s1/a") and store.exists("app1/s2/a")


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "./a", "a/\x00"])
def test_hostile_keys_are_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(ValueError):
        store.put(key, io.BytesIO(b"1"))
