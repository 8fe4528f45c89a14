"""Hostile and broken zips, built around the entries a valid package of some kind needs
(`manifest.json` for `.agent` packages, `SKILL.md` for skills): one suite of archive attacks
that every zip upload must refuse, whatever it carries. `mosoo_core.archives` is the one
checker; the tests of each upload run all of these against it."""

from __future__ import annotations

import io
import stat
import warnings
import zipfile
from collections.abc import Callable

Entries = list[tuple[str | zipfile.ZipInfo, bytes]]


def make_zip(entries: Entries) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        warnings.simplefilter("ignore", UserWarning)  # a duplicate name is one of the hostile cases
        for name, body in entries:
            archive.writestr(name, body)
    return buffer.getvalue()


def symlink(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def zip_attacks(base: Entries) -> dict[str, tuple[Callable[[], bytes], str]]:
    """Each case: (the archive, what the refusal says), around a valid package's `base`
    entries (the first one is the entry every package of the kind has)."""

    def around(*extra: tuple[str | zipfile.ZipInfo, bytes]) -> Callable[[], bytes]:
        return lambda: make_zip([*base, *extra])

    first = base[0][0]
    first_name = first if isinstance(first, str) else first.filename
    return {
        "not_a_zip": (lambda: b"just some text, not a zip", "not a zip archive"),
        "empty_bytes": (lambda: b"", "not a zip archive"),
        "truncated_zip": (lambda: make_zip(base)[:-30], "not a zip archive"),
        "path_traversal": (around(("../evil.sh", b"x")), "leaves the package"),
        "nested_traversal": (around(("skills/../../evil", b"x")), "leaves the package"),
        "absolute_path": (around(("/etc/cron.d/evil", b"x")), "is absolute"),
        "windows_drive_path": (around(("C:\\Windows\\evil", b"x")), "backslashes|is absolute"),
        "windows_drive_forward_slash": (around(("C:/evil", b"x")), "is absolute"),
        "backslash_path": (around(("skills\\evil.md", b"x")), "backslashes"),
        "symlink": (around((symlink("skills/passwd"), b"/etc/passwd")), "symbolic link"),
        "too_many_entries": (
            around(*[(f"skills/{i}.md", b"") for i in range(513 - len(base))]),
            "at most 512",
        ),
        "dotenv": (around((".env", b"OPENAI_API_KEY=sk-x")), "looks like a secret"),
        "named_env": (around(("config/production.env", b"A=1")), "looks like a secret"),
        "secrets_dir": (around(("secrets/token.txt", b"t")), "looks like a secret"),
        "ssh_key": (around(("home/id_rsa", b"-----BEGIN")), "looks like a secret"),
        "pem": (around(("certs/server.pem", b"-----BEGIN")), "looks like a secret"),
        "key_file": (around(("tls.key", b"-----BEGIN")), "looks like a secret"),
        "duplicate_entry": (around((first_name, b"{}")), "appears twice"),
    }


def declaring_huge_entry_counts(package: bytes) -> bytes:
    """The package with its end record claiming 60,000 entries."""
    data = bytearray(package)
    end = data.rfind(b"PK\x05\x06")
    # entries on this disk, entries in total
    data[end + 8 : end + 12] = (60_000).to_bytes(2, "little") * 2
    return bytes(data)


def hiding_entries(base: Entries, count: int = 40_000) -> bytes:
    """Tens of thousands of entries behind an end record that claims a single one."""
    data = bytearray(make_zip([*base, *[(f"s/{i}", b"") for i in range(count)]]))
    end = data.rfind(b"PK\x05\x06")
    data[end + 8 : end + 12] = (1).to_bytes(2, "little") * 2
    return bytes(data)


def compression_bomb(base: Entries, name: str = "skills/zeros.md") -> bytes:
    """1 GiB of zeros deflated to about 4.5 MiB, next to the valid `base`."""
    size = 1024 * 1024 * 1024
    buffer = io.BytesIO()
    # Level 1: half the time of level 9 (about 2 s a bomb), and still well under every
    # package and skill limit on the compressed size.
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for entry, body in base:
            archive.writestr(entry, body)
        with archive.open(name, "w") as stream:
            block = b"\0" * (4 * 1024 * 1024)
            for _ in range(size // len(block)):
                stream.write(block)
    return buffer.getvalue()


def lying(package: bytes, name: bytes, declared: int) -> bytes:
    """The package with `name`'s uncompressed size rewritten to `declared` in both headers."""
    data = bytearray(package)
    for signature, size_at, name_len_at, name_at in (
        (b"PK\x03\x04", 22, 26, 30),
        (b"PK\x01\x02", 24, 28, 46),
    ):
        start = 0
        while (start := data.find(signature, start)) >= 0:
            length = int.from_bytes(data[start + name_len_at : start + name_len_at + 2], "little")
            if bytes(data[start + name_at : start + name_at + length]) == name:
                data[start + size_at : start + size_at + 4] = declared.to_bytes(4, "little")
            start += 4
    return bytes(data)
