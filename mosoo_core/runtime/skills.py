"""Skills in sandboxes: each bound version's files, mounted read-only at
/opt/mosoo/skills/<name>.

A version is extracted once from the object store into a host directory,
`<data>/skills/<version id>`, as environment layers are (`runtime.builds`): both backends
mount a directory the same way, versions never change so neither does the directory, and
every sandbox of any Agent binding that version shares it. Extraction writes a partial
directory and renames it into place, so a sandbox never mounts half a skill; its files and
folders are read-only (and so is the mount).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from driver.protocol import SKILLS_DIR
from mosoo_core import skills
from mosoo_core.errors import MosooError
from mosoo_core.logs import get_logger
from mosoo_core.runtime.sandbox import Mount, SandboxError, remove_read_only_tree
from mosoo_core.settings import get_settings

log = get_logger(__name__)


def skills_root() -> Path:
    """Where extracted skill versions live on the host: one directory per version id."""
    return (get_settings().data_dir / "skills").resolve()


def skill_path(bound: skills.BoundSkill) -> str:
    """Where the skill's SKILL.md is inside a sandbox."""
    return f"{SKILLS_DIR}/{bound.name}/{skills.SKILL_FILE}"


def _write(root: Path, parsed: skills.ParsedSkill) -> None:
    for item in parsed.files:
        target = root.joinpath(*item.path.split("/"))
        # Paths were checked at upload (relative, normalized, no links); check again anyway.
        if root not in target.parents:
            raise SandboxError(f"the skill file {item.path[:80]!r} leaves its folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.data)
        target.chmod(0o555 if item.executable else 0o444)
    for folder, dirs, _names in os.walk(root, topdown=False):
        for name in dirs:
            (Path(folder) / name).chmod(0o555)
    root.chmod(0o555)


def extracted_skill(bound: skills.BoundSkill) -> Path:
    """The host directory with the version's files, extracted now if it is not there yet.
    SandboxError when the store cannot give them (a run cannot start without them)."""
    root = skills_root()
    final = root / bound.version_id
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # the sandbox user (another uid under Docker) must reach below it
    partial = root / f".{bound.version_id}.{secrets.token_hex(4)}.partial"
    try:
        parsed = skills.load_version(bound.object_key, bound.kind)
        partial.mkdir()
        _write(partial, parsed)
        try:
            partial.rename(final)
        except OSError:
            if not final.is_dir():  # else another worker extracted it first: use theirs
                raise
    except (OSError, MosooError) as error:
        message = getattr(error, "message", None) or str(error)
        raise SandboxError(
            f"the files of skill {bound.name} version {bound.version} could not be prepared: "
            f"{message[:300]}"
        ) from error
    finally:
        with contextlib.suppress(OSError):
            remove_read_only_tree(partial)
    log.info("skill.extracted", skill_id=bound.skill_id, version=bound.version)
    return final


def skill_mounts(bound: Sequence[skills.BoundSkill]) -> tuple[Mount, ...]:
    """The read-only mounts of the bound versions, at /opt/mosoo/skills/<name>."""
    return tuple(
        Mount(source=extracted_skill(item), target=f"{SKILLS_DIR}/{item.name}", read_only=True)
        for item in bound
    )
