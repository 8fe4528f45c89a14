"""Accounts, Organizations, Apps, email codes, Google sign-in and browser sessions."""

from mosoo_core.identity._accounts import (
    create_app,
    get_account,
    get_app,
    get_organization,
    list_apps,
    normalize_email,
    rename_app,
    rename_organization,
    sign_in_identity,
    update_profile,
)
from mosoo_core.identity._email_codes import (
    INVALID_CODE,
    CodeRequested,
    request_email_code,
    verify_email_code,
)
from mosoo_core.identity._sessions import (
    NewSession,
    issue_login_ticket,
    purge_expired_sign_in_records,
    redeem_login_ticket,
    resolve_session,
    revoke_session,
    start_session,
)
from mosoo_core.identity.models import AccountView, AppView, OrganizationView

__all__ = [
    "INVALID_CODE",
    "AccountView",
    "AppView",
    "CodeRequested",
    "NewSession",
    "OrganizationView",
    "create_app",
    "get_account",
    "get_app",
    "get_organization",
    "issue_login_ticket",
    "list_apps",
    "normalize_email",
    "purge_expired_sign_in_records",
    "redeem_login_ticket",
    "rename_app",
    "rename_organization",
    "request_email_code",
    "resolve_session",
    "revoke_session",
    "sign_in_identity",
    "start_session",
    "update_profile",
    "verify_email_code",
]
