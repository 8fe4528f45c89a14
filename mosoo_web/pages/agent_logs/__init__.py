"""An Agent's Logs tab: its runs, each replayed beside its Diagnostics."""

from mosoo_web.pages.agent_logs.page import agent_logs_page
from mosoo_web.pages.agent_logs.state import AgentLogsState

__all__ = ["AgentLogsState", "agent_logs_page"]
