"""Egress for sandboxes under a `limited` network policy: the allowlist and address rules
(`policy`) and the forward proxy that enforces them (`proxy`); and the same address rules for
the requests control and web make to owners' URLs (`outbound`, the MCP feature's guard)."""

from mosoo_core.network.policy import (
    DEFAULT_PORTS,
    MAX_ALLOWED_HOSTS,
    AllowedHost,
    Decision,
    EgressPolicy,
    address_allowed,
    is_ip_literal,
    normalize_host,
    parse_allowed_host,
    parse_allowlist,
)
from mosoo_core.network.proxy import (
    FAILURE_REASONS,
    PREAMBLE_PREFIX,
    REFUSAL_REASONS,
    EgressContext,
    EgressProxy,
    NetworkDecision,
)

__all__ = [
    "DEFAULT_PORTS",
    "FAILURE_REASONS",
    "MAX_ALLOWED_HOSTS",
    "PREAMBLE_PREFIX",
    "REFUSAL_REASONS",
    "AllowedHost",
    "Decision",
    "EgressContext",
    "EgressPolicy",
    "EgressProxy",
    "NetworkDecision",
    "address_allowed",
    "is_ip_literal",
    "normalize_host",
    "parse_allowed_host",
    "parse_allowlist",
]
