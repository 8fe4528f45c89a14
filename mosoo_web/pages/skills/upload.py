"""The Upload button both Skills pages share: it opens the file chooser for one `.md` or
`.zip` (as the chat composer's Attach does) and hands the file to the page's handler at once.
The browser refuses other files and ones over the limit before uploading anything; the
handler reads at most the limit again (the widget's check is the browser's to keep)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import reflex as rx
from reflex.event import EventType

from mosoo_core.errors import InvalidInput
from mosoo_web.pages.skills.services import MAX_UPLOAD_BYTES

ACCEPT: dict[str, Sequence[str]] = {
    "text/markdown": [".md", ".markdown"],
    "application/zip": [".zip"],
    "application/x-zip-compressed": [".zip"],
}
LIMIT_TEXT = f"{MAX_UPLOAD_BYTES // (1024 * 1024)} MiB"
# What the browser's refusal says: the service's words for a file that is not a skill.
REJECTED = (
    f"This skill cannot be uploaded: upload a SKILL.md (.md) or a .zip holding one, "
    f"of at most {LIMIT_TEXT}."
)
TOO_LARGE = f"This skill cannot be uploaded: it is larger than {LIMIT_TEXT}."


async def read_skill_file(files: list[rx.UploadFile]) -> tuple[bytes, str]:
    """The one chosen file's bytes and name; `InvalidInput` (`file`) for none, several, or
    more than the limit (read no further than that)."""
    if len(files) != 1:
        raise InvalidInput("Choose one .md or .zip file.", field="file")
    data = await files[0].read(MAX_UPLOAD_BYTES + 1)
    if len(data) > MAX_UPLOAD_BYTES:
        raise InvalidInput(TOO_LARGE, field="file")
    return data, files[0].filename or ""


def upload_button(
    label: str,
    *,
    upload_id: str,
    on_drop: EventType[list[rx.UploadFile]],
    on_drop_rejected: EventType[list[dict[str, Any]]],
    busy: rx.Var[bool],
    test_id: str,
    **button_props: Any,
) -> rx.Component:
    return rx.upload.root(
        rx.button(
            rx.icon("upload", size=16),
            label,
            type="button",
            loading=busy,
            data_testid=test_id,
            **button_props,
        ),
        id=upload_id,
        accept=ACCEPT,
        multiple=False,
        max_files=1,
        max_size=MAX_UPLOAD_BYTES,
        no_drag=True,
        disabled=busy,
        on_drop=on_drop,
        on_drop_rejected=on_drop_rejected,
        border="none",
        padding="0",
        data_testid=f"{test_id}-upload",
    )
