"""File names and media types: what a caller (or an agent) says is never trusted as a path."""

from __future__ import annotations

import mimetypes
import re
import unicodedata

from mosoo_core.errors import InvalidInput

MAX_NAME_BYTES = 255
DEFAULT_MEDIA_TYPE = "application/octet-stream"
MAX_MEDIA_TYPE = 200  # the column's size (RFC 6838 would allow 127 + 1 + 127)
# Bidi embeddings/overrides and isolates: they make "evil\u202egpj.exe" read as "evilexe.jpg".
_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}
# Zero-width characters hide differences between names that look the same.
_ZERO_WIDTH = {"\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u180e"}
# RFC 6838 restricted names: `type/subtype`, parameters dropped.
_MEDIA_TYPE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$"
)


def _dropped(char: str) -> bool:
    # Cc: control characters (NUL included); Cf covers other invisible format characters.
    return char in _BIDI or char in _ZERO_WIDTH or unicodedata.category(char) in ("Cc", "Cf")


def clean_name(raw: str) -> str:
    """The base name, NFC, without control, bidi and zero-width characters, trimmed; "" when
    nothing usable is left (the caller decides whether that is an error)."""
    base = re.split(r"[\\/]", raw or "")[-1]
    base = unicodedata.normalize("NFC", base)
    base = "".join(char for char in base if not _dropped(char)).strip()
    if base in ("", ".", ".."):
        return ""
    return _cap_bytes(base, MAX_NAME_BYTES)


def sanitize_name(raw: str) -> str:
    """A safe file name, or InvalidInput(field="name") when nothing usable is left."""
    name = clean_name(raw)
    if not name:
        raise InvalidInput(
            "The file name is empty once unsafe characters are removed.", field="name"
        )
    return name


def _cap_bytes(name: str, limit: int) -> str:
    if len(name.encode()) <= limit:
        return name
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem or len(extension.encode()) > 32:
        stem, extension = name, ""
    suffix = f".{extension}" if extension else ""
    budget = limit - len(suffix.encode())
    # Cut on a character boundary, never in the middle of a UTF-8 sequence.
    kept = stem.encode()[:budget].decode("utf-8", "ignore").rstrip()
    return f"{kept}{suffix}"


def media_type_for(name: str, given: str | None) -> str:
    """The caller's type when it is a valid `type/subtype`, else a guess from the name."""
    if given:
        candidate = given.split(";", 1)[0].strip().lower()
        if len(candidate) <= MAX_MEDIA_TYPE and _MEDIA_TYPE.match(candidate):
            return candidate
    guessed, _ = mimetypes.guess_type(name, strict=False)
    return guessed or DEFAULT_MEDIA_TYPE
