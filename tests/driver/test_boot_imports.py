"""What a cold driver imports before it is ready: its start is on a pool miss's critical path
(issue 15: within 1.3x of a bare `docker run`), so modules it does not need by then stay out.
Each of these cost milliseconds in the sandbox image (`bench/footprint.py --parts start`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Before the dial (driver/main.py's imports), then the warm-up of a standby driver (its
# runtime's module, driver/backends: imported before it says ready).
BOOT = "driver.main, driver.connection, driver.forwarder, driver.slot"
WARM_UP = "driver.backends.openai"
# websockets and its importlib.metadata (the driver has its own client); h11 and httpx (the
# forwarder's first request imports them); xml.sax.saxutils, whose urllib.request brings
# http.client and email; the runtime's SDK (imported after ready, see backends.prefetch).
NOT_YET = ("websockets", "h11", "httpx", "urllib.request", "http.client", "email", "xml.sax")


@pytest.mark.parametrize("modules", [BOOT, f"{BOOT}, {WARM_UP}"])
def test_a_booting_driver_leaves_out_what_it_does_not_need_yet(modules: str) -> None:
    probe = (
        f"import sys, json, {modules}; "
        f"print(json.dumps(sorted(m for m in {NOT_YET!r} + ('openai',) if m in sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(loaded) == []
