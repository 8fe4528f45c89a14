"""The Reflex app: console pages plus the HTTP API (`/api/...`) mounted in the same process."""

from __future__ import annotations

import reflex as rx
from starlette.types import ASGIApp

from mosoo_core.logs import configure_logging
from mosoo_core.settings import get_settings
from mosoo_web.api import build_api
from mosoo_web.api.first import ApiFirst
from mosoo_web.pages.agent_logs import AgentLogsState, agent_logs_page
from mosoo_web.pages.agents import AgentsState, agents_page
from mosoo_web.pages.app_home import AppHomeState, app_home_page
from mosoo_web.pages.app_settings import app_settings_page
from mosoo_web.pages.cli_auth import CliAuthState, cli_auth_page
from mosoo_web.pages.dev_mailbox import DevMailboxState, dev_mailbox_page
from mosoo_web.pages.environments import (
    EnvironmentEditorState,
    EnvironmentsState,
    environment_page,
    environments_page,
)
from mosoo_web.pages.files import FilesState, files_page
from mosoo_web.pages.home import apps_page, index_page
from mosoo_web.pages.login import LoginState, login_page
from mosoo_web.pages.mcp_servers import (
    McpServerEditorState,
    McpServersState,
    mcp_server_page,
    mcp_servers_page,
)
from mosoo_web.pages.organization import organization_page
from mosoo_web.pages.preview import PreviewState, preview_page
from mosoo_web.pages.profile import profile_page
from mosoo_web.pages.providers import ProvidersState, providers_page
from mosoo_web.pages.skills import SkillsState, SkillState, skill_page, skills_page
from mosoo_web.pages.threads import ThreadDetailState, ThreadsState, thread_page, threads_page
from mosoo_web.pages.tokens import TokensState, tokens_page
from mosoo_web.pages.usage import UsageState, usage_page
from mosoo_web.state.session import SessionState, handle_backend_exception
from mosoo_web.state.signed_out_tabs import close_signed_out_tabs

settings = get_settings()
configure_logging("web", settings.log_level, settings.log_json)

api = build_api()


class MosooApp(rx.App):
    """Reflex's app, whose backend takes `/api/...` past Reflex's own wrapping (api/first.py)."""

    def __call__(self) -> ASGIApp:
        return ApiFirst(api=api, console=super().__call__())


# Toasts at the top centre: at the bottom right they cover the chat composer's Send button, at
# the top right a page's own actions (Publish, Versions), and a toast under the pointer pauses.
# A signed-out tab's action raises `SignedOut`; the handler sends the tab to /login.
app = MosooApp(
    api_transformer=api,
    toaster=rx.toast.provider(position="top-center"),
    backend_exception_handler=handle_backend_exception,
)
# Pushes the open tabs of a session that ended (sign-out elsewhere, expiry) to /login.
app.register_lifespan_task(close_signed_out_tabs)

app.add_page(index_page, route="/", title="Mosoo", on_load=SessionState.enter_console)
app.add_page(login_page, route="/login", title="Sign in · Mosoo", on_load=LoginState.on_load)
app.add_page(apps_page, route="/apps", title="Apps · Mosoo", on_load=SessionState.require_account)
app.add_page(
    app_home_page,
    route="/apps/[app_id]",
    title="App · Mosoo",
    on_load=[SessionState.require_app, AppHomeState.load],
)
app.add_page(
    app_settings_page,
    route="/apps/[app_id]/settings",
    title="App settings · Mosoo",
    on_load=SessionState.require_app,
)
app.add_page(
    providers_page,
    route="/apps/[app_id]/providers",
    title="Providers · Mosoo",
    on_load=[SessionState.require_app, ProvidersState.load],
)
app.add_page(
    agents_page,
    route="/apps/[app_id]/agents",
    title="Agents · Mosoo",
    on_load=[SessionState.require_app, AgentsState.load],
)
app.add_page(
    preview_page,
    route="/apps/[app_id]/agents/[agent_id]",
    title="Preview · Mosoo",
    on_load=[SessionState.require_app, PreviewState.load],
)
app.add_page(
    agent_logs_page,
    route="/apps/[app_id]/agents/[agent_id]/logs",
    title="Logs · Mosoo",
    on_load=[SessionState.require_app, AgentLogsState.load],
)
app.add_page(
    threads_page,
    route="/apps/[app_id]/threads",
    title="Threads · Mosoo",
    on_load=[SessionState.require_app, ThreadsState.load, ThreadsState.follow],
)
app.add_page(
    thread_page,
    route="/apps/[app_id]/threads/[thread_id]",
    title="Thread · Mosoo",
    on_load=[SessionState.require_app, ThreadDetailState.load],
)
app.add_page(
    files_page,
    route="/apps/[app_id]/files",
    title="Files · Mosoo",
    on_load=[SessionState.require_app, FilesState.load],
)
app.add_page(
    environments_page,
    route="/apps/[app_id]/environments",
    title="Environments · Mosoo",
    on_load=[SessionState.require_app, EnvironmentsState.load],
)
app.add_page(
    environment_page,
    route="/apps/[app_id]/environments/[environment_id]",
    title="Environment · Mosoo",
    on_load=[SessionState.require_app, EnvironmentEditorState.load],
)
app.add_page(
    skills_page,
    route="/apps/[app_id]/skills",
    title="Skills · Mosoo",
    on_load=[SessionState.require_app, SkillsState.load],
)
app.add_page(
    skill_page,
    route="/apps/[app_id]/skills/[skill_id]",
    title="Skill · Mosoo",
    on_load=[SessionState.require_app, SkillState.load],
)
app.add_page(
    mcp_servers_page,
    route="/apps/[app_id]/mcp",
    title="MCP servers · Mosoo",
    on_load=[SessionState.require_app, McpServersState.load],
)
app.add_page(
    mcp_server_page,
    route="/apps/[app_id]/mcp/[server_id]",
    title="MCP server · Mosoo",
    on_load=[SessionState.require_app, McpServerEditorState.load],
)
app.add_page(
    usage_page,
    route="/apps/[app_id]/usage",
    title="Usage · Mosoo",
    on_load=[SessionState.require_app, UsageState.load],
)
app.add_page(
    organization_page,
    route="/org",
    title="Organization · Mosoo",
    on_load=SessionState.require_account,
)
app.add_page(
    profile_page, route="/profile", title="Profile · Mosoo", on_load=SessionState.require_account
)
app.add_page(
    tokens_page,
    route="/tokens",
    title="Access tokens · Mosoo",
    on_load=[SessionState.require_account, TokensState.load],
)
# Its own guard: it keeps `?code=` through sign-in (the shared guard keeps only the path).
app.add_page(
    cli_auth_page, route="/cli-auth", title="Sign in the CLI · Mosoo", on_load=CliAuthState.load
)
if settings.is_development:
    app.add_page(
        dev_mailbox_page,
        route="/dev/mailbox",
        title="Dev mailbox · Mosoo",
        on_load=DevMailboxState.load,
    )
