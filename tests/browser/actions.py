"""Small browser actions the journeys share."""

from __future__ import annotations

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Locator, Page

ATTEMPTS = 3


def choose(page: Page, trigger: Locator, option: str, *, exact: bool = False) -> None:
    """Open the select `trigger` and pick `option`.

    A select opened while the page is still loading its state can be closed by the
    re-render that follows, before the option shows or between its showing and the click
    (a CI run waited out a whole click timeout that way). So the open-and-click is tried
    again (up to three times), each click but the last given 5 s; an open list is closed
    first, and a closed one is left alone (Escape could close a dialog around the select).
    """
    item = page.get_by_role("option", name=option, exact=exact)
    for attempt in range(1, ATTEMPTS + 1):
        trigger.click()
        try:
            # The last try waits as long as any click (the list may just be slow to show).
            item.click(timeout=5_000 if attempt < ATTEMPTS else None)
            return
        except PlaywrightError:
            if attempt == ATTEMPTS:
                raise
            if trigger.get_attribute("aria-expanded") == "true":
                page.keyboard.press("Escape")
