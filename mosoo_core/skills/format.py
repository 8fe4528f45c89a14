"""The Agent Skills format: a folder with a SKILL.md (YAML front matter, then Markdown) and
any files it refers to. Uploads are a lone `.md` (it becomes SKILL.md) or a `.zip` with
SKILL.md at its root or in one top folder, checked like every untrusted zip
(`mosoo_core.archives`). Nothing here writes anything: a skill is parsed whole, or refused
with `InvalidInput` naming the field at fault.
"""

from __future__ import annotations

import hashlib
import io
import re
import stat
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import yaml

from mosoo_core.archives import MIB, ZipEntry, ZipLimits, read_checked_zip
from mosoo_core.errors import InvalidInput

SKILL_FILE = "SKILL.md"
NAME_MAX = 64
NAME_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"
DESCRIPTION_MAX = 1024
COMPATIBILITY_MAX = 500
LICENSE_MAX = 500
ALLOWED_TOOLS_MAX = 1024
METADATA_MAX_KEYS = 64
METADATA_KEY_MAX = 128
METADATA_VALUE_MAX = 1024
SKILL_MD_MAX = 1 * MIB  # kept in the database as text, read by the agent whole
FRONT_MATTER_MAX = 64 * 1024
# A skill package is checked like an `.agent` package, with smaller totals: it travels inside
# `.agent` exports, whose limits it must leave room in.
SKILL_LIMITS = ZipLimits(
    max_bytes=16 * MIB, max_unpacked_bytes=32 * MIB, max_entry_bytes=16 * MIB, max_entries=512
)
_NAME = re.compile(NAME_PATTERN)
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
_NAME_LINE = re.compile(r"^name[ \t]*:.*$", re.MULTILINE)
# What archivers add beside the content (macOS Finder): skipped, never stored.
_JUNK_FOLDERS = ("__MACOSX/",)
_JUNK_FILES = (".DS_Store",)
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)

SkillKind = Literal["md", "zip"]


@dataclass(frozen=True)
class FrontMatter:
    name: str
    description: str
    license: str = ""
    compatibility: str = ""
    metadata: dict[str, str] | None = None
    allowed_tools: str = ""


@dataclass(frozen=True)
class SkillFile:
    path: str  # relative to the skill's folder
    data: bytes
    executable: bool = False


@dataclass(frozen=True)
class ParsedSkill:
    """A checked skill: its front matter, SKILL.md's text and every file (SKILL.md too),
    sorted by path."""

    front_matter: FrontMatter
    skill_md: str
    files: tuple[SkillFile, ...]
    kind: SkillKind

    @property
    def name(self) -> str:
        return self.front_matter.name

    @property
    def size(self) -> int:
        return sum(len(f.data) for f in self.files)

    @property
    def content_sha256(self) -> str:
        """Equal for equal files (paths, executable bits, bytes), however they were zipped."""
        digest = hashlib.sha256()
        for item in self.files:
            file_digest = hashlib.sha256(item.data).hexdigest()
            digest.update(f"{item.path}\0{int(item.executable)}\0{file_digest}\n".encode())
        return digest.hexdigest()

    def archive(self) -> bytes:
        """The files as a normalized zip (sorted, fixed dates, SKILL.md at the root): what the
        store keeps, a zip download answers and an upload reads back unchanged."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for item in self.files:
                info = zipfile.ZipInfo(item.path, date_time=_ZIP_DATE)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.create_system = 3
                mode = 0o755 if item.executable else 0o644
                info.external_attr = (stat.S_IFREG | mode) << 16
                archive.writestr(info, item.data)
        return buffer.getvalue()


def refusal(message: str) -> InvalidInput:
    return InvalidInput(f"This skill cannot be uploaded: {message}", field="file")


# --- front matter ------------------------------------------------------------------------


def _field_error(field: str, message: str) -> InvalidInput:
    return InvalidInput(f"SKILL.md front matter: {message}", field=field)


def _optional_text(values: Mapping[str, Any], key: str, limit: int) -> str:
    value = values.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _field_error(key, f"{key} must be text.")
    value = value.strip()
    if len(value) > limit:
        raise _field_error(key, f"{key} is at most {limit} characters.")
    if "\x00" in value:
        raise _field_error(key, f"{key} must not contain NUL characters.")
    return value


def _metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _field_error("metadata", "metadata must be a map of names to text.")
    if len(value) > METADATA_MAX_KEYS:
        raise _field_error("metadata", f"metadata holds at most {METADATA_MAX_KEYS} entries.")
    clean: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key or len(key) > METADATA_KEY_MAX or "\x00" in key:
            raise _field_error(
                "metadata", f"metadata names are text of 1 to {METADATA_KEY_MAX} characters."
            )
        if not isinstance(item, str):
            raise _field_error(
                "metadata",
                f'metadata values are text: quote the value of {key[:40]!r} (for example "1.0").',
            )
        if len(item) > METADATA_VALUE_MAX or "\x00" in item:
            raise _field_error(
                "metadata", f"metadata values are at most {METADATA_VALUE_MAX} characters."
            )
        clean[key] = item
    return clean


def _allowed_tools(value: Any) -> str:
    # The format's value is space-separated text; a YAML list of names says the same.
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        # Counted before joining: YAML aliases can repeat one long name many times over.
        if sum(len(item) + 1 for item in value) > ALLOWED_TOOLS_MAX + 1:
            raise _field_error(
                "allowed-tools", f"allowed-tools is at most {ALLOWED_TOOLS_MAX} characters."
            )
        value = " ".join(item.strip() for item in value)
    if not isinstance(value, str):
        raise _field_error("allowed-tools", "allowed-tools is a space-separated list of tools.")
    tools = " ".join(value.split())
    if len(tools) > ALLOWED_TOOLS_MAX or "\x00" in tools:
        raise _field_error(
            "allowed-tools", f"allowed-tools is at most {ALLOWED_TOOLS_MAX} characters."
        )
    return tools


def check_name(name: Any, field: str = "name") -> str:
    """A skill name: 1-64 lower-case letters, digits and single hyphens, not starting or
    ending with a hyphen."""
    if not isinstance(name, str) or not name:
        raise InvalidInput("A skill needs a name.", field=field)
    if len(name) > NAME_MAX or not _NAME.match(name):
        raise InvalidInput(
            f"Skill names are 1 to {NAME_MAX} lower-case letters, digits and single hyphens, "
            "not starting or ending with a hyphen.",
            field=field,
        )
    return name


def parse_front_matter(text: str) -> FrontMatter:
    """SKILL.md's front matter, checked as the Agent Skills format says. Fields the format
    does not define (some tools add their own) are left in SKILL.md and not read."""
    match = _FRONT_MATTER.match(text)
    if match is None:
        raise InvalidInput(
            "SKILL.md must start with YAML front matter between two --- lines "
            "(with name and description).",
            field="front_matter",
        )
    raw = match.group(1)
    if len(raw) > FRONT_MATTER_MAX:
        raise InvalidInput(
            f"SKILL.md's front matter is larger than {FRONT_MATTER_MAX // 1024} KiB.",
            field="front_matter",
        )
    try:
        values = yaml.safe_load(raw)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        raise InvalidInput(
            f"SKILL.md's front matter is not valid YAML{where}.", field="front_matter"
        ) from None
    except RecursionError:
        raise InvalidInput(
            "SKILL.md's front matter is not valid YAML (nested too deeply).", field="front_matter"
        ) from None
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise InvalidInput(
            "SKILL.md's front matter must be a YAML map (name: ..., description: ...).",
            field="front_matter",
        )
    if "name" not in values or values["name"] in (None, ""):
        raise _field_error("name", "name is missing.")
    try:
        name = check_name(values["name"])
    except InvalidInput as error:
        raise _field_error("name", error.message) from None
    description = values.get("description")
    if description is None or (isinstance(description, str) and not description.strip()):
        raise _field_error("description", "description is missing.")
    if not isinstance(description, str):
        raise _field_error("description", "description must be text.")
    description = description.strip()
    if len(description) > DESCRIPTION_MAX:
        raise _field_error("description", f"description is at most {DESCRIPTION_MAX} characters.")
    if "\x00" in description:
        raise _field_error("description", "description must not contain NUL characters.")
    return FrontMatter(
        name=name,
        description=description,
        license=_optional_text(values, "license", LICENSE_MAX),
        compatibility=_optional_text(values, "compatibility", COMPATIBILITY_MAX),
        metadata=_metadata(values.get("metadata")),
        allowed_tools=_allowed_tools(values.get("allowed-tools")),
    )


def _skill_md_text(data: bytes) -> str:
    if len(data) > SKILL_MD_MAX:
        raise refusal(f"SKILL.md is larger than {SKILL_MD_MAX // MIB} MiB.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise refusal("SKILL.md is not UTF-8 text.") from None
    text = text.removeprefix("\ufeff")
    if "\x00" in text:
        raise refusal("SKILL.md is not text (it contains NUL characters).")
    return text


# --- packages ----------------------------------------------------------------------------


def _junk(name: str) -> bool:
    return name.startswith(_JUNK_FOLDERS) or name.rsplit("/", 1)[-1] in _JUNK_FILES


def skill_root(names: list[str]) -> str:
    """Where SKILL.md is: "" at the root, or "<folder>/" when everything is in one folder."""
    names = [name for name in names if not _junk(name)]
    if SKILL_FILE in names:
        return ""
    tops = {name.split("/", 1)[0] for name in names}
    if len(tops) == 1 and all("/" in name for name in names):
        top = tops.pop()
        if f"{top}/{SKILL_FILE}" in names:
            return f"{top}/"
    raise refusal(f"it has no {SKILL_FILE} at its root or in one top folder.")


def parse_files(files: Mapping[str, ZipEntry], kind: SkillKind = "zip") -> ParsedSkill:
    """A skill from its files, by path relative to the skill's folder (SKILL.md among them),
    checked: SKILL.md's front matter, the totals of SKILL_LIMITS, no path both a file and a
    folder."""
    if SKILL_FILE not in files:
        raise refusal(f"it has no {SKILL_FILE}.")
    if len(files) > SKILL_LIMITS.max_entries:
        raise refusal(f"it has {len(files)} files; a skill has at most {SKILL_LIMITS.max_entries}.")
    total = sum(len(entry.data) for entry in files.values())
    if total > SKILL_LIMITS.max_unpacked_bytes:
        raise refusal(f"it unpacks to more than {SKILL_LIMITS.max_unpacked_bytes // MIB} MiB.")
    folders = {path.rsplit("/", 1)[0] for path in files if "/" in path}
    parents = {
        "/".join(folder.split("/")[: i + 1])
        for folder in folders
        for i in range(folder.count("/") + 1)
    }
    clash = sorted(parents & set(files))
    if clash:
        raise refusal(f"{clash[0][:80]!r} is both a file and a folder.")
    skill_md = _skill_md_text(files[SKILL_FILE].data)
    front_matter = parse_front_matter(skill_md)
    return ParsedSkill(
        front_matter=front_matter,
        skill_md=skill_md,
        files=tuple(
            SkillFile(path, entry.data, bool(entry.mode & 0o111))
            for path, entry in sorted(files.items())
        ),
        kind=kind,
    )


def parse_upload(data: bytes, filename: str) -> ParsedSkill:
    """An uploaded `.md` (it becomes SKILL.md) or `.zip`, checked whole."""
    lowered = (filename or "").lower()
    is_zip = lowered.endswith(".zip") or (
        not lowered.endswith((".md", ".markdown")) and data[:2] == b"PK"
    )
    if not is_zip:
        if not lowered.endswith((".md", ".markdown")) and not data.lstrip(
            b"\xef\xbb\xbf"
        ).startswith(b"---"):
            raise refusal("upload a SKILL.md (.md) or a .zip holding one.")
        return parse_files({SKILL_FILE: ZipEntry(SKILL_FILE, data, 0o644)}, kind="md")
    root = ""

    def check_layout(names: list[str]) -> None:
        nonlocal root
        root = skill_root([name for name in names if not name.endswith("/")])

    checked = read_checked_zip(
        data,
        SKILL_LIMITS,
        refusal,
        keep=lambda name: None if _junk(name) else SKILL_LIMITS.max_entry_bytes,
        check_names=check_layout,
    )
    files = {
        name[len(root) :]: entry
        for name, entry in checked.kept.items()
        if name.startswith(root) and not name.endswith("/")
    }
    outside = sorted(name for name in checked.kept if not name.startswith(root))
    if outside:  # skill_root only allows this for junk, which is not kept
        raise refusal(f"{outside[0][:80]!r} is outside the skill's folder.")
    return parse_files(files, kind="zip")


def renamed(skill: ParsedSkill, name: str) -> ParsedSkill:
    """The same skill under another name: SKILL.md's `name:` line rewritten, nothing else."""
    check_name(name)
    match = _FRONT_MATTER.match(skill.skill_md)
    assert match is not None  # a parsed skill has front matter
    block = match.group(1)
    new_block, count = _NAME_LINE.subn(f"name: {name}", block, count=1)
    text = skill.skill_md[: match.start(1)] + new_block + skill.skill_md[match.end(1) :]
    try:
        front_matter = parse_front_matter(text)
    except InvalidInput:
        front_matter = None
    if count != 1 or front_matter is None or front_matter.name != name:
        raise InvalidInput(
            "This skill's name line could not be rewritten (write `name:` on one line).",
            field="name",
        )
    data = text.encode("utf-8")
    files = tuple(
        replace(item, data=data) if item.path == SKILL_FILE else item for item in skill.files
    )
    return ParsedSkill(front_matter=front_matter, skill_md=text, files=files, kind=skill.kind)


def read_archive(data: bytes, kind: SkillKind) -> ParsedSkill:
    """A stored version's files back from its normalized zip (checked again: the store is
    outside the database's transaction, so read it as untrusted too)."""
    checked = read_checked_zip(
        data, SKILL_LIMITS, refusal, keep=lambda _n: SKILL_LIMITS.max_entry_bytes
    )
    return parse_files(
        {name: entry for name, entry in checked.kept.items() if not name.endswith("/")}, kind
    )
