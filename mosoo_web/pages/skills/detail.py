"""`/apps/[app_id]/skills/[skill_id]`: one skill. Its SKILL.md rendered, with the front
matter's fields and the files beside it (the latest version, or the one picked in the
versions list); the versions, each downloadable; the Agents using it; Upload a new version,
Fork (under a new name) and Uninstall (its Agents keep the binding and run without it)."""

from __future__ import annotations

import asyncio
from typing import Any

import reflex as rx
from reflex.event import EventSpec
from reflex.vars import ObjectVar

from mosoo_core.errors import InvalidInput, NotFound
from mosoo_web.components.chat import chat_styles
from mosoo_web.components.dialogs import confirm_dialog, form_dialog, trash_button
from mosoo_web.components.forms import labelled
from mosoo_web.components.layout import (
    app_page,
    back_link,
    console_shell,
    missing_card,
    side_by_side,
)
from mosoo_web.pages.skills.list import skills_href
from mosoo_web.pages.skills.services import (
    FileRow,
    MetadataRow,
    ShownVersion,
    SkillDetail,
    UserRow,
    VersionRow,
    fork,
    load_detail,
    load_version,
    uninstall,
    upload_version,
)
from mosoo_web.pages.skills.upload import REJECTED, read_skill_file, upload_button
from mosoo_web.reflex_typing import cond_value, event
from mosoo_web.state.session import SessionState, current_app_ids

UPLOAD_ID = "skill-version-upload"


class SkillState(rx.State):
    skill_id: rx.Field[str] = rx.field("")
    missing: rx.Field[bool] = rx.field(False)
    loaded: rx.Field[bool] = rx.field(False)
    name: rx.Field[str] = rx.field("")
    latest_version: rx.Field[int] = rx.field(0)
    users: rx.Field[list[UserRow]] = rx.field(default_factory=list)
    versions: rx.Field[list[VersionRow]] = rx.field(default_factory=list)
    # The version shown (`ShownVersion`, flattened): the latest until another is picked.
    shown_number: rx.Field[int] = rx.field(0)
    shown_description: rx.Field[str] = rx.field("")
    shown_license: rx.Field[str] = rx.field("")
    shown_compatibility: rx.Field[str] = rx.field("")
    shown_allowed_tools: rx.Field[str] = rx.field("")
    shown_metadata: rx.Field[list[MetadataRow]] = rx.field(default_factory=list)
    shown_body: rx.Field[str] = rx.field("")
    shown_files: rx.Field[list[FileRow]] = rx.field(default_factory=list)
    shown_created: rx.Field[str] = rx.field("")
    # Why the last new version was refused (the service's message) and the field it names.
    upload_error: rx.Field[str] = rx.field("")
    upload_field: rx.Field[str] = rx.field("")
    uploading: rx.Field[bool] = rx.field(False)
    fork_open: rx.Field[bool] = rx.field(False)
    fork_error: rx.Field[str] = rx.field("")
    forking: rx.Field[bool] = rx.field(False)
    uninstalling: rx.Field[bool] = rx.field(False)

    @rx.var
    def user_names(self) -> str:
        """The Agents using it, each once (for the Uninstall warning)."""
        return ", ".join(dict.fromkeys(user.agent_name for user in self.users))

    def _show(self, shown: ShownVersion) -> None:
        self.shown_number = shown.number
        self.shown_description = shown.description
        self.shown_license = shown.license
        self.shown_compatibility = shown.compatibility
        self.shown_allowed_tools = shown.allowed_tools
        self.shown_metadata = shown.metadata
        self.shown_body = shown.body
        self.shown_files = shown.files
        self.shown_created = shown.created

    def _apply(self, detail: SkillDetail) -> None:
        self.skill_id, self.name = detail.id, detail.name
        self.latest_version = detail.latest_version
        self.users, self.versions = detail.users, detail.versions
        self._show(detail.shown)

    async def _reload(self) -> None:
        account_id, app_id = await current_app_ids(self)
        try:
            self._apply(await asyncio.to_thread(load_detail, account_id, app_id, self.skill_id))
        except NotFound:
            self.missing = True

    @event
    async def load(self) -> None:
        """After the App guard: the skill named in the URL, its latest version shown."""
        self.loaded, self.missing = False, False
        self.upload_error = self.upload_field = self.fork_error = ""
        self.uploading = self.forking = self.uninstalling = self.fork_open = False
        self.skill_id = str(self.router.page.params.get("skill_id", "") or "")
        self.name, self.users, self.versions = "", [], []
        self._show(ShownVersion())
        session = await self.get_state(SessionState)
        if session.app_missing or not session.current_app_id:
            return  # not found, or the guard has just sent the tab to /login
        await self._reload()
        self.loaded = True

    @event
    async def show_version(self, number: int) -> None:
        account_id, app_id = await current_app_ids(self)
        try:
            shown = await asyncio.to_thread(
                load_version, account_id, app_id, self.skill_id, int(number)
            )
        except NotFound:  # uninstalled meanwhile (another tab)
            self.missing = True
            return
        self._show(shown)

    @event
    def reject_upload(self, _rejected: list[dict[str, Any]]) -> None:
        self.upload_error, self.upload_field = REJECTED, "file"

    @event
    async def upload(self, files: list[rx.UploadFile]) -> EventSpec | None:
        """The next version of this skill (its SKILL.md must keep the skill's name); shown
        once stored. A refusal shows the service's message; nothing is stored then."""
        if not files:
            # The browser refused the file (react-dropzone calls on_drop with nothing as well
            # as on_drop_rejected, in either order): reject_upload says why; keep its words.
            return None
        account_id, app_id = await current_app_ids(self)
        self.upload_error, self.upload_field = "", ""
        if self.uploading or self.missing:
            return None
        self.uploading = True
        try:
            data, filename = await read_skill_file(files)
            uploaded = await asyncio.to_thread(
                upload_version, account_id, app_id, self.skill_id, data, filename
            )
        except InvalidInput as error:
            self.upload_error, self.upload_field = error.message, error.field or "file"
            return None
        except NotFound:
            self.missing = True
            return None
        finally:
            self.uploading = False
        await self._reload()
        if not uploaded.new_version:
            return rx.toast.info(uploaded.message)
        return rx.toast.success(uploaded.message)

    @event
    def open_fork(self, is_open: bool) -> None:
        if not self.forking:
            self.fork_open, self.fork_error = is_open, ""

    @event
    async def fork(self, form: dict[str, Any]) -> list[EventSpec] | None:
        """A new skill under the name asked for, a copy of the latest version; opened."""
        account_id, app_id = await current_app_ids(self)
        self.fork_error = ""
        if self.forking:
            return None
        self.forking = True
        try:
            new_id, new_name = await asyncio.to_thread(
                fork, account_id, app_id, self.skill_id, str(form.get("name", ""))
            )
        except InvalidInput as error:  # a name the format refuses, or one the App has
            self.fork_error = error.message
            return None
        except NotFound as error:
            self.fork_open, self.missing = False, True
            return [rx.toast.error(error.message)]
        finally:
            self.forking = False
        self.fork_open = False
        return [
            rx.redirect(f"/apps/{app_id}/skills/{new_id}"),
            rx.toast.success(f"Forked {self.name} as {new_name}."),
        ]

    @event
    async def uninstall(self) -> list[EventSpec] | None:
        account_id, app_id = await current_app_ids(self)
        if self.uninstalling:
            return None
        self.uninstalling = True
        name, users = self.name, len({user.agent_id for user in self.users})
        try:
            await asyncio.to_thread(uninstall, account_id, app_id, self.skill_id)
        except NotFound:  # already uninstalled (another tab)
            pass
        finally:
            self.uninstalling = False
        note = ""
        if users:
            note = (
                " 1 Agent binds it and runs without it."
                if users == 1
                else f" {users} Agents bind it and run without it."
            )
        return [
            rx.redirect(f"/apps/{app_id}/skills"),
            rx.toast.success(f"Uninstalled {name}.{note}"),
        ]


# --- the page --------------------------------------------------------------------------


def _hint(text: str | rx.Var[str]) -> rx.Component:
    return rx.text(text, size="1", color_scheme="gray")


def _fork_dialog() -> rx.Component:
    return form_dialog(
        rx.button(
            rx.icon("copy", size=14),
            "Fork",
            variant="soft",
            color_scheme="gray",
            data_testid="skill-fork",
        ),
        "Fork skill",
        "A new skill with a copy of the latest version's files, SKILL.md's name changed to the "
        "new one. Agents using this skill keep this one.",
        labelled(
            "New name",
            rx.input(
                name="name",
                default_value=SkillState.name.to(str) + "-copy",
                max_length=64,
                width="100%",
                auto_focus=True,
                data_testid="skill-fork-name",
            ),
            error=SkillState.fork_error,
            test_id="skill-fork",
            hint=_hint("Lower-case letters, digits and single hyphens, up to 64."),
        ),
        submit=rx.button(
            "Fork", type="submit", loading=SkillState.forking, data_testid="skill-fork-submit"
        ),
        on_submit=SkillState.fork,
        open=SkillState.fork_open,
        on_open_change=SkillState.open_fork,
        max_width="460px",
    )


def _uninstall_warning() -> rx.Component:
    return rx.cond(
        SkillState.users.length() > 0,
        rx.callout(
            "Agents bind it: " + SkillState.user_names + ". They keep the binding and run "
            "without this skill; Preview warns that it is missing until it is removed there.",
            icon="triangle-alert",
            color_scheme="amber",
            size="1",
            margin_top="12px",
            data_testid="skill-uninstall-warning",
        ),
        rx.fragment(),
    )


def _uninstall_button() -> rx.Component:
    return confirm_dialog(
        "Uninstall " + SkillState.name.to(str) + "?",
        rx.text(
            "It leaves this App's skills, and runs started from now on go without it. Its "
            "versions are kept.",
            as_="span",
        ),
        _uninstall_warning(),
        confirm="Uninstall",
        on_confirm=SkillState.uninstall,
        confirm_test_id="skill-uninstall-confirm",
        trigger=trash_button("Uninstall", "skill-uninstall", size="2"),
        max_width="500px",
    )


def _header() -> rx.Component:
    return rx.vstack(
        rx.hstack(
            back_link("Skills", skills_href(), "skills-back"),
            rx.text("/", color_scheme="gray", size="2"),
            rx.heading(SkillState.name, size="5", weight="bold", data_testid="page-title"),
            rx.badge(
                "Version " + SkillState.latest_version.to_string(),
                variant="soft",
                color_scheme="gray",
                data_testid="skill-latest-version",
            ),
            rx.spacer(),
            upload_button(
                "Upload new version",
                upload_id=UPLOAD_ID,
                on_drop=SkillState.upload,
                on_drop_rejected=SkillState.reject_upload,
                busy=SkillState.uploading,
                test_id="skill-version-upload-button",
                variant="soft",
            ),
            _fork_dialog(),
            _uninstall_button(),
            align="center",
            spacing="2",
            width="100%",
            wrap="wrap",
        ),
        rx.cond(
            SkillState.upload_error != "",
            rx.callout(
                SkillState.upload_error,
                icon="circle-alert",
                color_scheme="red",
                size="1",
                width="100%",
                data_testid="skill-upload-error",
                data_field=SkillState.upload_field,
            ),
            rx.fragment(),
        ),
        spacing="3",
        width="100%",
        margin_bottom="16px",
    )


def _field_row(label: str, value: rx.Var[str], test_id: str) -> rx.Component:
    return rx.data_list.item(
        rx.data_list.label(label, min_width="120px"),
        rx.data_list.value(
            rx.text(value, size="2", white_space="pre-wrap", overflow_wrap="anywhere"),
            data_testid=test_id,
        ),
    )


def _optional_row(label: str, value: rx.Var[str], test_id: str) -> rx.Component:
    return rx.cond(value != "", _field_row(label, value, test_id), rx.fragment())


def _metadata_row(row: ObjectVar[MetadataRow]) -> rx.Component:
    return rx.data_list.item(
        rx.data_list.label(
            rx.text("metadata.", row.key, font_family="monospace", size="2"), min_width="120px"
        ),
        rx.data_list.value(row.value, data_testid="skill-field-metadata"),
    )


def _front_matter() -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.heading("Front matter", size="3"),
            rx.data_list.root(
                _field_row("name", SkillState.name, "skill-field-name"),
                _field_row("description", SkillState.shown_description, "skill-field-description"),
                _optional_row("license", SkillState.shown_license, "skill-field-license"),
                _optional_row(
                    "compatibility", SkillState.shown_compatibility, "skill-field-compatibility"
                ),
                _optional_row(
                    "allowed-tools", SkillState.shown_allowed_tools, "skill-field-allowed-tools"
                ),
                rx.foreach(SkillState.shown_metadata, _metadata_row),
                size="2",
                width="100%",
            ),
            spacing="3",
            width="100%",
        ),
        width="100%",
        data_testid="skill-front-matter",
    )


def _rendered() -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.hstack(
                rx.heading("SKILL.md", size="3"),
                rx.badge(
                    "Version " + SkillState.shown_number.to_string(),
                    variant="soft",
                    color_scheme=cond_value(
                        SkillState.shown_number == SkillState.latest_version, "green", "gray"
                    ),
                    data_testid="skill-shown-version",
                ),
                rx.cond(
                    SkillState.shown_number == SkillState.latest_version,
                    _hint("Latest"),
                    _hint("Latest is version " + SkillState.latest_version.to_string()),
                ),
                align="center",
                spacing="2",
            ),
            rx.box(
                # Raw HTML stays text: a skill may come from anywhere (an imported package).
                rx.markdown(SkillState.shown_body, use_raw=False, use_math=False, use_katex=False),
                font_size="14px",
                line_height="1.6",
                overflow_wrap="anywhere",
                class_name="mosoo-markdown",
                width="100%",
                data_testid="skill-rendered",
            ),
            spacing="3",
            width="100%",
        ),
        width="100%",
    )


def _file_row(row: ObjectVar[FileRow]) -> rx.Component:
    return rx.hstack(
        rx.icon("file", size=14, color=rx.color("gray", 9)),
        rx.text(row.path, size="2", font_family="monospace", flex="1", overflow_wrap="anywhere"),
        rx.cond(
            row.executable,
            rx.badge("executable", variant="soft", color_scheme="gray", size="1"),
            rx.fragment(),
        ),
        rx.text(row.size, size="1", color_scheme="gray"),
        align="center",
        spacing="2",
        width="100%",
        data_testid="skill-file",
    )


def _files() -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.heading("Files", size="3"),
            _hint("Mounted read-only at /opt/mosoo/skills/" + SkillState.name.to(str) + "/."),
            rx.foreach(SkillState.shown_files, _file_row),
            spacing="2",
            width="100%",
        ),
        width="100%",
    )


def _version_row(row: ObjectVar[VersionRow]) -> rx.Component:
    shown = SkillState.shown_number == row.number
    return rx.hstack(
        rx.badge(
            "#" + row.number.to_string(),
            variant=cond_value(shown, "solid", "soft"),
            color_scheme="gray",
        ),
        rx.vstack(
            rx.text(
                cond_value(row.kind == "md", "SKILL.md", "zip"),
                " · ",
                row.files.to_string(),
                cond_value(row.files == 1, " file", " files"),
                " · ",
                row.size,
                size="1",
            ),
            rx.text(row.created, size="1", color_scheme="gray"),
            spacing="0",
            flex="1",
            min_width="0",
        ),
        rx.button(
            "Show",
            size="1",
            variant="ghost",
            disabled=shown,
            on_click=SkillState.show_version(row.number),
            data_testid="skill-version-show",
        ),
        rx.el.a(
            rx.icon("download", size=14),
            href=row.download_href,
            download="",
            custom_attrs={"reloadDocument": True},
            aria_label="Download version " + row.number.to_string(),
            style={"color": "inherit", "display": "inline-flex", "align_items": "center"},
            data_testid="skill-version-download",
        ),
        align="center",
        spacing="2",
        width="100%",
        data_testid="skill-version-row",
        data_version=row.number,
    )


def _versions() -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.heading("Versions", size="3"),
            _hint(
                "Newest first. Each is kept unchanged; an Agent follows the latest or keeps one."
            ),
            rx.foreach(SkillState.versions, _version_row),
            spacing="3",
            width="100%",
        ),
        width="100%",
        data_testid="skill-versions",
    )


def _user_row(row: ObjectVar[UserRow]) -> rx.Component:
    return rx.hstack(
        rx.link(
            row.agent_name,
            href="/apps/" + SessionState.current_app_id + "/agents/" + row.agent_id.to(str),
            size="2",
            weight="medium",
            data_testid="skill-user-name",
        ),
        rx.spacer(),
        rx.text(
            row.binding,
            cond_value(row.published != "", " · " + row.published.to(str), ""),
            size="1",
            color_scheme="gray",
            data_testid="skill-user-binding",
        ),
        align="center",
        width="100%",
        data_testid="skill-user",
    )


def _users() -> rx.Component:
    return rx.card(
        rx.vstack(
            rx.heading("Agents using it", size="3"),
            rx.cond(
                SkillState.users.length() > 0,
                rx.foreach(SkillState.users, _user_row),
                _hint("None yet. Bind it in an Agent's Preview, under Skills."),
            ),
            spacing="3",
            width="100%",
        ),
        width="100%",
        data_testid="skill-users",
    )


def _body() -> rx.Component:
    return side_by_side(
        rx.vstack(_rendered(), _front_matter(), _files(), spacing="4", flex="1", min_width="0"),
        rx.vstack(
            _versions(),
            _users(),
            spacing="4",
            width=["100%", "100%", "320px"],
            flex_shrink="0",
        ),
    )


def _content() -> rx.Component:
    return app_page(
        chat_styles(),
        rx.cond(SkillState.loaded, rx.fragment(_header(), _body()), rx.fragment()),
        spacing="0",
        item_missing=SkillState.missing,
        item_missing_card=missing_card(
            "Skill not found",
            "Back to Skills",
            skills_href(),
            "skill-not-found",
            detail="It does not exist, it was uninstalled, or it is not yours.",
        ),
    )


def skill_page() -> rx.Component:
    return console_shell(_content, max_width="1200px")
