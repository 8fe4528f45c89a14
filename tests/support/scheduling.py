"""How the suite is handed to pytest-xdist workers (`--dist loadscope`; tests/conftest.py).

A unit of work goes to one worker whole. A unit is a module's tests on one database backend,
so a module's fixtures are set up once per backend as without xdist; tests/security is one
unit per backend (its `mosoo web` and `mosoo control` are started once per session).

The real-stack journeys are CPU-bound while consoles build and sandboxes boot, and time out
when several run at once on 2 cores; the other tests mostly wait on sockets. So each worker
collects the units in one order (`order_units`): the real-stack ones (a test marked
`integration` or `browser`) first, then the rest; gw0 takes units from the front of that
queue and the other workers from its back, so one worker runs the journeys one after the
other while the others run everything else beside it, and they meet at the end.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

BACKENDS = ("sqlite", "postgresql")
SECURITY = "tests/security/"
_PARAMS = re.compile(r"\[(.*)\]$")


def backend_of(nodeid: str) -> str:
    """The database backend a test runs on ('' for a test that uses no database)."""
    params = _PARAMS.search(nodeid)
    tokens = set(params.group(1).split("-")) if params else set()
    return next((backend for backend in BACKENDS if backend in tokens), "")


def unit_of(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    group = SECURITY if module.startswith(SECURITY) else module
    return f"{group} [{backend_of(nodeid)}]"


class SuiteScheduling(LoadScopeScheduling):
    """LoadScopeScheduling over `unit_of`, in collection order (no reordering by size)."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node: WorkerController) -> None:
        if node.gateway.id != "gw0":
            self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
        super()._assign_work_unit(node)


def order_units(items: list[pytest.Item]) -> None:
    """Keep each unit's tests together and in pytest's order: the real-stack units first,
    then the others, each by size (the largest first)."""
    units = [unit_of(item.nodeid) for item in items]
    sizes = Counter(units)
    real_stack = {
        unit
        for unit, item in zip(units, items, strict=True)
        if item.get_closest_marker("integration") or item.get_closest_marker("browser")
    }
    first_seen = {unit: index for index, unit in reversed(list(enumerate(units)))}

    def rank(unit: str) -> tuple[bool, int, int]:
        return (unit not in real_stack, -sizes[unit], first_seen[unit])

    order = sorted(range(len(items)), key=lambda index: (rank(units[index]), index))
    items[:] = [items[index] for index in order]
