"""Object storage: one interface, a filesystem store (the embedded default) and an S3 store
(S3, R2, MinIO through boto3). Objects stream in and out; nothing is held whole in memory."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol, cast

from botocore.exceptions import ClientError

from mosoo_core.settings import get_settings

if TYPE_CHECKING:  # the stubs are a dev dependency: the running code never imports them
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef

CHUNK = 1024 * 1024


class ObjectStore(Protocol):
    def put(self, key: str, source: IO[bytes]) -> int: ...
    def open(self, key: str) -> IO[bytes]: ...
    def exists(self, key: str) -> bool: ...
    def delete(self, key: str) -> None: ...
    def delete_prefix(self, prefix: str) -> int: ...


def _check_key(key: str) -> str:
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\x00" in key:
        raise ValueError(f"invalid object key {key!r}")
    return key


class FilesystemStore:
    """Objects as files under a root folder; writes land atomically (temp file + rename)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, key: str) -> Path:
        return self.root / _check_key(key)

    def put(self, key: str, source: IO[bytes]) -> int:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
        size = 0
        try:
            with os.fdopen(fd, "wb") as target:
                while chunk := source.read(CHUNK):
                    target.write(chunk)
                    size += len(chunk)
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
        return size

    def open(self, key: str) -> IO[bytes]:
        return open(self._path(key), "rb")

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def delete_prefix(self, prefix: str) -> int:
        folder = self._path(prefix.rstrip("/"))
        if not folder.is_dir():
            return 0
        count = sum(1 for p in folder.rglob("*") if p.is_file())
        shutil.rmtree(folder)
        return count


class S3Store:
    """Objects in an S3-compatible bucket; boto3 streams multipart uploads and downloads."""

    def __init__(self, bucket: str, client: S3Client) -> None:
        self.bucket = bucket
        self.client = client

    def put(self, key: str, source: IO[bytes]) -> int:
        counter = _CountingReader(source)
        self.client.upload_fileobj(counter, self.bucket, _check_key(key))
        return counter.count

    def open(self, key: str) -> IO[bytes]:
        answer = self.client.get_object(Bucket=self.bucket, Key=_check_key(key))
        # botocore's StreamingBody is file-like (read, close), not an io class.
        return cast(IO[bytes], answer["Body"])

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=_check_key(key))
        except ClientError:
            return False
        return True

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=_check_key(key))

    def delete_prefix(self, prefix: str) -> int:
        paginator = self.client.get_paginator("list_objects_v2")
        count = 0
        for page in paginator.paginate(
            Bucket=self.bucket, Prefix=_check_key(prefix.rstrip("/")) + "/"
        ):
            keys: list[ObjectIdentifierTypeDef] = [
                {"Key": item["Key"]} for item in page.get("Contents", []) if "Key" in item
            ]
            if keys:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys})
                count += len(keys)
        return count


class _CountingReader:
    def __init__(self, source: IO[bytes]) -> None:
        self.source = source
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size)
        self.count += len(data)
        return data


class ChunkReader:
    """A file-like view of a chunk iterator (a sandbox's tar stream), so the store and
    tarfile's streaming mode can read it without holding it whole."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks: Iterator[bytes] = iter(chunks)
        self.buffer = b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.buffer) < size:
            try:
                self.buffer += next(self.chunks)
            except StopIteration:
                break
        if size < 0:
            data, self.buffer = self.buffer, b""
        else:
            data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data


def iter_chunks(handle: IO[bytes]) -> Iterator[bytes]:
    with contextlib.closing(handle):
        while chunk := handle.read(CHUNK):
            yield chunk


def get_store() -> ObjectStore:
    """The configured store: S3 when MOSOO_S3_BUCKET is set, else the data folder."""
    settings = get_settings()
    if settings.s3_bucket:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=settings.s3_endpoint_url or None,
            region_name=settings.s3_region or None,
            aws_access_key_id=settings.s3_access_key_id or None,
            aws_secret_access_key=settings.s3_secret_access_key or None,
        )
        return S3Store(settings.s3_bucket, client)
    return FilesystemStore(settings.resolved_object_dir)
