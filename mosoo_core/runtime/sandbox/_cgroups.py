"""Per-sandbox cgroups for the process backend: memory, pids and CPU limits that hold for
every process of a sandbox together, and a way to kill them all at once.

cgroup v1 (separate hierarchies): one group per controller, nested under the group this
process already lives in, so the sandboxes stay inside whatever limits the host gave us.
cgroup v2 (one hierarchy): a group under /sys/fs/cgroup/mosoo.sandboxes, because v2 forbids
adding controllers below a group that holds processes (ours). Not available (no root, a
read-only /sys/fs/cgroup): `create` returns None and the backend falls back to rlimits.
Our machines have cgroup v1, which the tests exercise; the v2 branch is not exercised here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpu", "freezer")
GROUP_PARENT = "mosoo-sandboxes"
V2_PARENT = "mosoo.sandboxes"


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _own_v1_path(controller: str) -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path.lstrip("/")
    return ""


def _mkdir_under_shared_parent(directory: Path) -> None:
    """mkdir -p, retried: another sandbox's remove() may rmdir the empty parent meanwhile."""
    for attempt in range(5):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            return
        except FileNotFoundError:
            if attempt == 4:
                raise


def _pids(directory: Path) -> list[int]:
    try:
        return [int(pid) for pid in (directory / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _process_cpu_ns(pid: int) -> int:
    """User and system time of one process (0 once it is gone)."""
    try:
        # Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class SandboxCgroup:
    version: int
    dirs: tuple[Path, ...]  # v1: one per controller; v2: one

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def kill_all(self, timeout: float = 10.0) -> None:
        """SIGKILL every process in the group, frozen while it is read and signalled so a
        fork bomb cannot outrun the loop."""
        freezer = self._freezer()
        if self.version == 2 and (self.dirs[0] / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write(self.dirs[0] / "cgroup.kill", "1")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if freezer is not None:
                with contextlib.suppress(OSError):
                    _write(freezer, "FROZEN" if self.version == 1 else "1")
            pids = {pid for d in self.dirs for pid in _pids(d)}
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if freezer is not None:
                with contextlib.suppress(OSError):
                    _write(
                        freezer, "THAWED" if self.version == 1 else "0"
                    )  # killed tasks die on thaw
            if not pids:
                break
            time.sleep(0.02)

    def usage(self) -> tuple[int | None, int]:
        """(memory in bytes, CPU time in nanoseconds) of the group's processes together.
        Memory is None where no memory controller counts it. CPU time comes from cpuacct or
        v2's cpu.stat; where neither is the group's (v1 with cpuacct mounted apart, as here)
        it is summed from /proc over the processes alive now, so one that exited between two
        samples takes its time with it."""
        memory = cpu = None
        for d in self.dirs:
            for name in ("memory.usage_in_bytes", "memory.current"):
                with contextlib.suppress(OSError, ValueError):
                    memory = int((d / name).read_text())
            with contextlib.suppress(OSError, ValueError):
                cpu = int((d / "cpuacct.usage").read_text())
            with contextlib.suppress(OSError, ValueError, StopIteration):
                lines = (d / "cpu.stat").read_text().splitlines()
                usec = next(line for line in lines if line.startswith("usage_usec "))
                cpu = int(usec.split()[1]) * 1000
        if cpu is None:
            cpu = sum(_process_cpu_ns(pid) for pid in {p for d in self.dirs for p in _pids(d)})
        return memory, cpu

    def _freezer(self) -> Path | None:
        for d in self.dirs:
            for name in ("freezer.state", "cgroup.freeze"):
                if (d / name).exists():
                    return d / name
        return None

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
            # The shared parent goes too once empty (rmdir refuses otherwise), so nothing of
            # ours is left in a hierarchy someone else may want to remove.
            with contextlib.suppress(OSError):
                d.parent.rmdir()

    @classmethod
    def from_dirs(cls, version: int, dirs: list[str]) -> SandboxCgroup:
        return cls(version=version, dirs=tuple(Path(d) for d in dirs))


def _create_v1(name: str, memory_mb: int, pids_limit: int, cpus: float) -> SandboxCgroup | None:
    dirs: list[Path] = []
    for controller in V1_CONTROLLERS:
        hierarchy = CGROUP_ROOT / controller
        if not (hierarchy / "cgroup.procs").exists():
            if controller == "freezer":
                continue
            return None
        directory = hierarchy / _own_v1_path(controller) / GROUP_PARENT / name
        _mkdir_under_shared_parent(directory)
        dirs.append(directory)
    group = SandboxCgroup(version=1, dirs=tuple(dirs))
    try:
        memory, pids, cpu = dirs[0], dirs[1], dirs[2]
        limit = str(memory_mb * 1024 * 1024)
        _write(memory / "memory.limit_in_bytes", limit)
        if (memory / "memory.memsw.limit_in_bytes").exists():
            _write(memory / "memory.memsw.limit_in_bytes", limit)  # no swap on top
        with contextlib.suppress(OSError):
            _write(memory / "memory.swappiness", "0")
        _write(pids / "pids.max", str(pids_limit))
        _write(cpu / "cpu.cfs_period_us", "100000")
        _write(cpu / "cpu.cfs_quota_us", str(int(cpus * 100000)))
    except OSError:
        group.remove()
        raise
    return group


def _create_v2(name: str, memory_mb: int, pids_limit: int, cpus: float) -> SandboxCgroup | None:
    wanted = {"memory", "pids", "cpu"}
    if not wanted <= set((CGROUP_ROOT / "cgroup.controllers").read_text().split()):
        return None
    enable = " ".join(f"+{c}" for c in sorted(wanted))
    if not wanted <= set((CGROUP_ROOT / "cgroup.subtree_control").read_text().split()):
        _write(CGROUP_ROOT / "cgroup.subtree_control", enable)
    parent = CGROUP_ROOT / V2_PARENT
    directory = parent / name
    _mkdir_under_shared_parent(directory)
    group = SandboxCgroup(version=2, dirs=(directory,))
    try:
        if not wanted <= set((parent / "cgroup.subtree_control").read_text().split()):
            _write(parent / "cgroup.subtree_control", enable)  # the parent never holds processes
        _write(directory / "memory.max", str(memory_mb * 1024 * 1024))
        with contextlib.suppress(OSError):
            _write(directory / "memory.swap.max", "0")
        _write(directory / "pids.max", str(pids_limit))
        _write(directory / "cpu.max", f"{int(cpus * 100000)} 100000")
    except OSError:
        group.remove()
        raise
    return group


def create_cgroup(name: str, memory_mb: int, pids_limit: int, cpus: float) -> SandboxCgroup | None:
    """A cgroup with the sandbox's limits, or None where this process may not make one."""
    if os.geteuid() != 0:
        return None
    try:
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            return _create_v2(name, memory_mb, pids_limit, cpus)
        return _create_v1(name, memory_mb, pids_limit, cpus)
    except OSError:
        return None


def cgroup_dirs_for(name: str) -> list[Path]:
    """Where create_cgroup(name, ...) puts its groups, for checks that none is left."""
    dirs = [CGROUP_ROOT / V2_PARENT / name]
    for controller in V1_CONTROLLERS:
        with contextlib.suppress(OSError):
            dirs.append(CGROUP_ROOT / controller / _own_v1_path(controller) / GROUP_PARENT / name)
    return dirs


def cgroup_version_available() -> int | None:
    """1 or 2 when create_cgroup would work here (probed with a throwaway group), else None."""
    probe = create_cgroup(f"probe-{os.getpid()}", 64, 16, 0.1)
    if probe is None:
        return None
    probe.remove()
    return probe.version
