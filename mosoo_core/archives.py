"""Untrusted zip archives (`.agent` packages, skill packages), checked whole before anything
is written: structure, paths, symlinks, secrets, entry count, sizes declared and inflated.

One checker for every upload that is a zip, so a rule added here holds for all of them. The
caller says what to call a refusal (`refuse`), which entries' bytes it wants back (`keep`),
and what the names must contain (`check_names`, e.g. a manifest), which is looked at before a
byte is inflated.
"""

from __future__ import annotations

import io
import re
import stat
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

from mosoo_core.errors import MosooError

MIB = 1024 * 1024
_READ_CHUNK = 64 * 1024
_EOCD = struct.Struct("<4s4H2LH")
_EOCD_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"
_DRIVE = re.compile(r"^[A-Za-z]:")
_SECRET_NAMES = {
    ".env",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    ".netrc",
    ".pgpass",
    "credentials.json",
}
_SECRET_SUFFIXES = (".env", ".pem", ".key", ".p12", ".pfx")
_SECRET_DIRS = {"secrets", ".secrets", ".ssh"}


@dataclass(frozen=True)
class ZipLimits:
    max_bytes: int  # the zip as uploaded
    max_unpacked_bytes: int  # all entries, decompressed
    max_entry_bytes: int
    max_entries: int
    # The zip's central directory, parsed before any other limit applies.
    max_directory_bytes: int = 2 * MIB
    max_path_chars: int = 255


@dataclass(frozen=True)
class ZipEntry:
    name: str
    data: bytes
    mode: int  # the Unix permission bits the zip records (0 when it records none)


@dataclass(frozen=True)
class CheckedZip:
    names: list[str]  # every entry, directories too, in the archive's order
    kept: dict[str, ZipEntry]  # the entries `keep` asked for, by name


Refuse = Callable[[str], MosooError]


def read_checked_zip(
    data: bytes,
    limits: ZipLimits,
    refuse: Refuse,
    *,
    keep: Callable[[str], int | None] = lambda _name: None,
    check_names: Callable[[list[str]], None] = lambda _names: None,
) -> CheckedZip:
    """Check the whole archive and return the bytes of the entries `keep` names (it answers
    the most bytes it accepts for that entry, or None to skip it). Every refusal is
    `refuse(reason)`, raised before anything is returned."""
    if not isinstance(data, bytes | bytearray):
        raise refuse("it is not a zip archive.")
    if len(data) > limits.max_bytes:
        raise refuse(f"it is larger than {_mib(limits.max_bytes)} MiB.")
    _check_directory(data, limits, refuse)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, struct.error):
        raise refuse("it is not a zip archive.") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > limits.max_entries:
            raise refuse(f"it has {len(infos)} files; a package has at most {limits.max_entries}.")
        seen: set[str] = set()
        declared = 0
        for info in infos:
            check_path(info, limits, refuse)
            if info.filename in seen:
                raise refuse(f"{info.filename[:80]!r} appears twice.")
            seen.add(info.filename)
            if info.flag_bits & 0x1:
                raise refuse(f"{info.filename[:80]!r} is encrypted.")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise refuse(f"{info.filename[:80]!r} uses an unsupported compression method.")
            # The declared sizes refuse an honest bomb without inflating a byte of it...
            if info.file_size > limits.max_entry_bytes:
                raise refuse(
                    f"{info.filename[:80]!r} is larger than {_mib(limits.max_entry_bytes)} MiB."
                )
            declared += info.file_size
            if declared > limits.max_unpacked_bytes:
                raise refuse(f"it unpacks to more than {_mib(limits.max_unpacked_bytes)} MiB.")
        check_names([info.filename for info in infos])
        kept: dict[str, ZipEntry] = {}
        total = 0
        for info in infos:
            if info.is_dir():
                continue
            # ...and the bytes actually inflated are counted too, in case a header lies.
            entry = 0
            keep_limit = keep(info.filename)
            chunks: list[bytes] = []
            try:
                with archive.open(info) as stream:
                    while chunk := stream.read(_READ_CHUNK):
                        entry += len(chunk)
                        total += len(chunk)
                        if entry > limits.max_entry_bytes:
                            raise refuse(
                                f"{info.filename[:80]!r} is larger than {_mib(limits.max_entry_bytes)} MiB."
                            )
                        if total > limits.max_unpacked_bytes:
                            raise refuse(
                                f"it unpacks to more than {_mib(limits.max_unpacked_bytes)} MiB."
                            )
                        if keep_limit is not None:
                            if entry > keep_limit:
                                raise refuse(
                                    f"{info.filename[:80]} is larger than {_size(keep_limit)}."
                                )
                            chunks.append(chunk)
            except (
                zipfile.BadZipFile,
                ValueError,
                OSError,
                EOFError,
                NotImplementedError,
                RuntimeError,
                struct.error,
            ):
                raise refuse(f"{info.filename[:80]!r} is damaged.") from None
            if keep_limit is not None:
                kept[info.filename] = ZipEntry(
                    info.filename, b"".join(chunks), stat.S_IMODE(info.external_attr >> 16)
                )
        return CheckedZip(names=[info.filename for info in infos], kept=kept)


def _mib(size: int) -> int:
    return size // MIB


def _size(size: int) -> str:
    return f"{size // MIB} MiB" if size >= MIB else f"{size // 1024} KiB"


def _check_directory(data: bytes, limits: ZipLimits, refuse: Refuse) -> None:
    """Read the zip's end record ourselves, so an archive declaring huge numbers of entries
    is refused before `zipfile` builds an object for each of them."""
    at = len(data) - _EOCD.size
    if not (at >= 0 and data[at : at + 4] == _EOCD_SIGNATURE and data[-2:] == b"\0\0"):
        at = data.rfind(_EOCD_SIGNATURE, max(0, len(data) - _EOCD.size - 0xFFFF))
    if at < 0 or len(data) - at < _EOCD.size:
        raise refuse("it is not a zip archive.")
    _sig, _disk, _cd_disk, entries_here, entries, cd_size, cd_offset, _comment = _EOCD.unpack_from(
        data, at
    )
    if (
        data[max(0, at - 20) : at][:4] == _ZIP64_LOCATOR_SIGNATURE
        or 0xFFFF in (entries_here, entries)
        or 0xFFFFFFFF in (cd_size, cd_offset)
    ):
        # Zip64 is only needed beyond 65,535 entries or 4 GiB, far past a package's limits.
        raise refuse(f"it has more than {limits.max_entries} files or is too large (zip64).")
    if max(entries_here, entries) > limits.max_entries:
        raise refuse(
            f"it has {max(entries_here, entries)} files; a package has at most {limits.max_entries}."
        )
    if cd_size > limits.max_directory_bytes:
        raise refuse("its file list is too large.")


def check_path(info: zipfile.ZipInfo, limits: ZipLimits, refuse: Refuse) -> None:
    """One entry's name and kind: printable, relative, normalized, no symlink, no secret."""
    name = info.orig_filename
    shown = name[:80]
    if not name or "\0" in name or any(not c.isprintable() for c in name):
        raise refuse(f"the file name {shown!r} is not allowed.")
    if len(name) > limits.max_path_chars:
        raise refuse(f"the file name {shown!r}… is longer than {limits.max_path_chars} characters.")
    if "\\" in name:
        raise refuse(f"the path {shown!r} uses backslashes.")
    if name.startswith("/") or _DRIVE.match(name):
        raise refuse(f"the path {shown!r} is absolute.")
    parts = name.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise refuse(f"the path {shown!r} leaves the package or is not normalized.")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise refuse(f"{shown!r} is a symbolic link.")
    base = parts[-1].lower()
    if (
        base in _SECRET_NAMES
        or base.endswith(_SECRET_SUFFIXES)
        or base.startswith(".env.")
        or any(part.lower() in _SECRET_DIRS for part in parts[:-1])
    ):
        raise refuse(f"{shown!r} looks like a secret; packages never carry secrets.")
