"""The App home: where a new App stands on the way to its first API call (the getting-started
checklist, ticked from real state) and, for a working App, what is going on in it."""

from mosoo_core.app_home.service import (
    EXAMPLE_MESSAGE,
    STEPS,
    AgentSummary,
    ApiExample,
    AppHome,
    ChecklistStep,
    FailedRun,
    api_example,
    app_home,
    checklist,
)

__all__ = [
    "EXAMPLE_MESSAGE",
    "STEPS",
    "AgentSummary",
    "ApiExample",
    "AppHome",
    "ChecklistStep",
    "FailedRun",
    "api_example",
    "app_home",
    "checklist",
]
