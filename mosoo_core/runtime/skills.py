"""Skills in sandboxes: each bound version's files, mounted read-only at
/opt/mosoo/skills/<name>.

A version is extracted once from the object store into a host directory,
`<data>/skills/<version id>`, as environment layers are (`runtime.builds`): both backends
mount a directory the same way, versions never change so neither does the directory, and
every sandbox of any Agent binding that version shares it. Extraction writes a partial
directory and renames it into place, so a sandbox never mounts half a skill; its files and
folders are read-only (and so is the mount).

Each sandbox a run creates is labelled with the versions it mounts (`LABEL_SKILLS`): a Pet's
runs list the skills its sandbox has (not the ones bound since, which wait for Apply), and
`collect_skill_files` (beat) removes a version's directory once no sandbox mounts it and no
run used it for MOSOO_SKILL_CACHE_KEEP_HOURS; the next run that needs it extracts it again.
The directory's mtime is when a run last used it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path

from driver.protocol import SKILLS_DIR
from mosoo_core import skills
from mosoo_core.errors import MosooError
from mosoo_core.logs import get_logger
from mosoo_core.runtime.labels import LABEL_SKILLS, installation_label
from mosoo_core.runtime.sandbox import (
    LABEL_SUBJECT,
    Mount,
    SandboxBackend,
    SandboxError,
    get_backend,
    remove_read_only_tree,
)
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
    with contextlib.suppress(FileNotFoundError):
        os.utime(final)  # used now: collection goes by it (a folder it took is extracted again)
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


def skills_label(bound: Sequence[skills.BoundSkill]) -> dict[str, str]:
    """The label of a sandbox mounting these versions ("" when it mounts none)."""
    return {LABEL_SKILLS: ",".join(item.version_id for item in bound)}


def mounted_versions(labels: Mapping[str, str]) -> list[str] | None:
    """The version ids a sandbox with these labels mounts; None for a sandbox made before
    sandboxes were labelled with them (what it mounts is unknown)."""
    value = labels.get(LABEL_SKILLS)
    return None if value is None else [item for item in value.split(",") if item]


def _run_sandbox(labels: Mapping[str, str]) -> bool:
    """Run sandboxes (Pet or Cattle) are the ones that mount skills; build sandboxes do not."""
    return labels.get(LABEL_SUBJECT, "").startswith(("agent:", "session:"))


def collect_skill_files(
    backend: SandboxBackend | None = None, *, unused_for: timedelta | None = None
) -> int:
    """Delete the extracted versions no sandbox of this installation mounts and no run used
    for `unused_for` (settings: skill_cache_keep_hours), and partial folders a dead worker
    left as long ago. Nothing is deleted while a run sandbox made before the skills label
    exists (it may mount any of them). Returns the folders removed."""
    root = skills_root()
    if not root.is_dir():
        return 0  # no skill ever extracted here: no backend to ask
    backend = backend or get_backend()
    unused_for = unused_for or timedelta(hours=get_settings().skill_cache_keep_hours)
    mounted: set[str] = set()
    for ref in backend.list_by_label(installation_label()):
        versions = mounted_versions(ref.labels)
        if versions is None and _run_sandbox(ref.labels):
            log.info("skill.collection_skipped", sandbox=ref.name, reason="unlabelled sandbox")
            return 0
        mounted.update(versions or ())
    cutoff = time.time() - unused_for.total_seconds()
    removed = 0
    for entry in list(root.iterdir()):
        try:
            if entry.name in mounted or entry.lstat().st_mtime >= cutoff:
                continue
            if entry.name.startswith("."):  # a partial or a collection a dead worker left
                remove_read_only_tree(entry)
                removed += 1
            elif _take(root, entry, cutoff):
                removed += 1
        except FileNotFoundError:  # gone meanwhile (another sweep)
            continue
        except OSError as error:  # one folder that will not go must not stop the others
            log.warning("skill.collect_failed", folder=entry.name, error=str(error)[:300])
    log.info("skill.files_collected", removed=removed, kept=len(list(root.iterdir())))
    return removed


def _take(root: Path, folder: Path, cutoff: float) -> bool:
    """Remove an unused version folder: first renamed away (a sandbox never mounts a half
    deleted skill), then put back if a run used it between the look and the rename."""
    taken = root / f".{folder.name}.{secrets.token_hex(4)}.collecting"
    folder.rename(taken)
    if taken.stat().st_mtime >= cutoff:
        try:
            taken.rename(folder)
            return False
        except OSError:  # extracted again meanwhile: that copy stays, this one goes
            pass
    remove_read_only_tree(taken)
    return True
