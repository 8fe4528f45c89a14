"""Small browser actions the journeys share."""

from __future__ import annotations

from playwright.sync_api import Locator, Page, expect


def choose(page: Page, trigger: Locator, option: str, *, exact: bool = False) -> None:
    """Open the select `trigger` and pick `option`.

    A select opened while the page is still loading its state can be closed by the
    re-render that follows; the option never shows and a plain click would wait its full
    timeout. So the select is opened again (up to three times) until the option shows.
    """
    item = page.get_by_role("option", name=option, exact=exact)
    for _attempt in range(3):
        trigger.click()
        try:
            expect(item).to_be_visible(timeout=5_000)
            break
        except AssertionError:
            page.keyboard.press("Escape")
    item.click()
