"""`/apps/[app_id]/skills`: the App's skills by name with their description, latest version,
number of versions and the Agents using them; Upload (a new skill, or the next version of
the one with the upload's name) opens what was uploaded."""

from __future__ import annotations

import asyncio
from typing import Any

import reflex as rx
from reflex.event import EventSpec
from reflex.vars import ObjectVar, StringVar

from mosoo_core.errors import InvalidInput, NotFound
from mosoo_web.components.icons import icon_tile
from mosoo_web.components.layout import (
    console_shell,
    empty_note,
    empty_state,
    list_page,
)
from mosoo_web.pages.skills.services import SkillRow, list_rows, upload
from mosoo_web.pages.skills.upload import LIMIT_TEXT, REJECTED, read_skill_file, upload_button
from mosoo_web.reflex_typing import cond_value, event
from mosoo_web.state.session import SessionState, current_app_ids

UPLOAD_ID = "skill-upload"


def skills_href(suffix: str | StringVar[str] = "") -> rx.Var[str]:
    """The Skills page of the current App, or (`suffix`) one skill on it."""
    return "/apps/" + SessionState.current_app_id + "/skills" + suffix


class SkillsState(rx.State):
    rows: rx.Field[list[SkillRow]] = rx.field(default_factory=list)
    loaded: rx.Field[bool] = rx.field(False)
    # Why the last upload was refused (the service's message) and the field it names.
    upload_error: rx.Field[str] = rx.field("")
    upload_field: rx.Field[str] = rx.field("")
    uploading: rx.Field[bool] = rx.field(False)

    @event
    async def load(self) -> None:
        """After the App guard: the App's skills."""
        self.loaded, self.upload_error, self.upload_field = False, "", ""
        session = await self.get_state(SessionState)
        if session.app_missing or not session.current_app_id:
            self.rows = []  # not found, or the guard has just sent the tab to /login
            return
        account_id, app_id = await current_app_ids(self)
        try:
            self.rows = await asyncio.to_thread(list_rows, account_id, app_id)
        except NotFound:
            session.app_missing = True
            self.rows = []
        self.loaded = True

    @event
    def reject_upload(self, _rejected: list[dict[str, Any]]) -> None:
        """A file the browser refused before uploading (not .md or .zip, or too large)."""
        self.upload_error, self.upload_field = REJECTED, "file"

    @event
    async def upload(self, files: list[rx.UploadFile]) -> list[EventSpec] | None:
        """Store the chosen file as a skill (or its next version) and open it. A refusal
        shows the service's message, naming the field; nothing is stored then."""
        if not files:
            # The browser refused the file (react-dropzone calls on_drop with nothing as well
            # as on_drop_rejected, in either order): reject_upload says why; keep its words.
            return None
        account_id, app_id = await current_app_ids(self)
        self.upload_error, self.upload_field = "", ""
        if self.uploading:
            return None
        self.uploading = True
        try:
            data, filename = await read_skill_file(files)
            uploaded = await asyncio.to_thread(upload, account_id, app_id, data, filename)
        except InvalidInput as error:
            self.upload_error, self.upload_field = error.message, error.field or "file"
            return None
        except NotFound as error:  # the App went away meanwhile
            return [rx.toast.error(error.message)]
        finally:
            self.uploading = False
        toast = (
            rx.toast.success(uploaded.message)
            if uploaded.new_version
            else rx.toast.info(uploaded.message)
        )
        return [rx.redirect(f"/apps/{app_id}/skills/{uploaded.skill_id}"), toast]


def _users(row: ObjectVar[SkillRow]) -> rx.Component:
    return rx.text(
        cond_value(
            row.used_count.to(int) > 0,
            "Used by " + row.used_by.to(str),
            "Not used by any Agent",
        ),
        size="1",
        color_scheme="gray",
        data_testid="skill-users",
    )


def _skill_card(row: ObjectVar[SkillRow]) -> rx.Component:
    return rx.card(
        rx.link(
            rx.hstack(
                icon_tile("book-open", 18, "7px", radius="9px"),
                rx.vstack(
                    rx.hstack(
                        rx.text(row.name, size="3", weight="bold", data_testid="skill-name"),
                        rx.badge(
                            "Version " + row.latest_version.to_string(),
                            variant="soft",
                            color_scheme="gray",
                            data_testid="skill-latest-version",
                        ),
                        align="center",
                        spacing="2",
                        wrap="wrap",
                    ),
                    rx.text(
                        row.description,
                        size="2",
                        color_scheme="gray",
                        style={
                            "display": "-webkit-box",
                            "-webkit-line-clamp": "2",
                            "-webkit-box-orient": "vertical",
                            "overflow": "hidden",
                        },
                        data_testid="skill-description",
                    ),
                    rx.text(
                        rx.text(
                            row.versions.to_string(),
                            cond_value(row.versions == 1, " version", " versions"),
                            as_="span",
                            data_testid="skill-versions",
                        ),
                        " · Updated ",
                        row.updated,
                        size="1",
                        color_scheme="gray",
                    ),
                    _users(row),
                    spacing="1",
                    min_width="0",
                    flex="1",
                ),
                align="start",
                spacing="3",
                width="100%",
            ),
            href=skills_href("/" + row.id.to(str)),
            underline="none",
            color="inherit",
            width="100%",
            data_testid="skill-open",
        ),
        width="100%",
        data_testid="skill-row",
    )


def _empty() -> rx.Component:
    return empty_state(
        "book-open",
        rx.text("No skills yet", size="3", weight="bold"),
        empty_note(
            "Upload a SKILL.md, or a .zip with SKILL.md and the files it refers to. Its front "
            "matter names the skill and says when to use it."
        ),
        test_id="skills-empty",
    )


def _upload_error() -> rx.Component:
    return rx.cond(
        SkillsState.upload_error != "",
        rx.callout(
            SkillsState.upload_error,
            icon="circle-alert",
            color_scheme="red",
            size="1",
            width="100%",
            data_testid="skill-upload-error",
            data_field=SkillsState.upload_field,
        ),
        rx.fragment(),
    )


def _content() -> rx.Component:
    return list_page(
        "Skills",
        upload_button(
            "Upload skill",
            upload_id=UPLOAD_ID,
            on_drop=SkillsState.upload,
            on_drop_rejected=SkillsState.reject_upload,
            busy=SkillsState.uploading,
            test_id="skill-upload-button",
            size="3",
        ),
        "Instructions and scripts an Agent reads when a task fits them: only each skill's "
        "name and description are in its prompt. Uploading a name the App has makes that "
        f"skill's next version. A .md or a .zip of at most {LIMIT_TEXT}.",
        loaded=SkillsState.loaded,
        rows=SkillsState.rows,
        row=_skill_card,
        empty=_empty(),
        notices=(_upload_error(),),
    )


def skills_page() -> rx.Component:
    return console_shell(_content)
