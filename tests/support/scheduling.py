"""How the suite is handed to pytest-xdist workers (`--dist loadscope`; tests/conftest.py).

A unit of work goes to one worker whole. A unit is a module's tests on one database backend,
so a module's fixtures are set up once per backend as without xdist. The folders whose
modules share processes started once per session are one unit per backend: tests/security
(its `mosoo web` and `mosoo control`) and the browser modules on the session's console
(`web_server`), so each is started once per run, not once per worker. Workers take the units
in the order of their collection, which `order_units` sets: the real-stack units first, then
the rest by size, so a long unit never starts last while the other workers are idle.
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
BROWSER = "tests/browser/"
REAL_STACK = ("tests/integration/", SECURITY, BROWSER)
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
        # gw0 takes the real-stack units, the other workers the rest; then anything left.
        real_stack = node.gateway.id == "gw0" or len(self.nodes) == 1
        unit = next(
            (u for u in self.workqueue if u.startswith(REAL_STACK) == real_stack),
            next(iter(self.workqueue)),
        )
        self.workqueue.move_to_end(unit, last=False)
        super()._assign_work_unit(node)


def order_units(items: list[pytest.Item]) -> None:
    """Keep each unit's tests together and in pytest's order; real-stack units first."""
    units = [unit_of(item.nodeid) for item in items]
    sizes = Counter(units)
    first_seen = {unit: index for index, unit in reversed(list(enumerate(units)))}

    def rank(unit: str) -> tuple[bool, int, int]:
        return (not unit.startswith(REAL_STACK), -sizes[unit], first_seen[unit])

    order = sorted(range(len(items)), key=lambda index: (rank(units[index]), index))
    items[:] = [items[index] for index in order]
