"""Accounts, their Organization and Apps."""

from __future__ import annotations

from datetime import datetime

from email_validator import EmailNotValidError, validate_email
from sqlmodel import Session, col, select

from mosoo_core.clock import utcnow
from mosoo_core.environments import create_default_environment
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_core.identity.views import AccountView, AppView, OrganizationView
from mosoo_core.ownership import organization_of, owned_app
from mosoo_core.tables.identity import Account, App, AuthIdentity, Organization

NAME_MAX = 120


def normalize_email(raw: str) -> str:
    """Lower-cased, validated address; raises InvalidInput with a clear message."""
    candidate = (raw or "").strip()
    if not candidate:
        raise InvalidInput("Enter your email address.", field="email")
    if len(candidate) > 320:
        raise InvalidInput("That email address is too long.", field="email")
    try:
        result = validate_email(candidate, check_deliverability=False)
    except EmailNotValidError as error:
        raise InvalidInput(f"That is not a valid email address: {error}", field="email") from None
    return result.normalized.lower()


def clean_name(raw: str, what: str, field: str = "name") -> str:
    name = " ".join((raw or "").split())
    if not name:
        raise InvalidInput(f"{what} cannot be empty.", field=field)
    if len(name) > NAME_MAX:
        raise InvalidInput(f"{what} must be at most {NAME_MAX} characters.", field=field)
    return name


def _default_names(email: str) -> tuple[str, str]:
    local = email.split("@", 1)[0]
    display = local.replace(".", " ").replace("_", " ").strip().title() or "My"
    return display, f"{display}'s Organization"


def sign_in_identity(
    db: Session,
    *,
    provider: str,
    subject: str,
    email: str,
    name: str = "",
    now: datetime | None = None,
) -> Account:
    """The Account behind a verified identity; the first sign-in creates Account, Organization
    and default App. The same verified email is the same Account whichever the provider."""
    now = now or utcnow()
    email = normalize_email(email)
    identity = db.exec(
        select(AuthIdentity).where(
            AuthIdentity.provider == provider, AuthIdentity.subject == subject
        )
    ).first()
    if identity is not None:
        account = db.get(Account, identity.account_id)
        if account is not None:
            return account
    account = db.exec(select(Account).where(Account.email == email)).first()
    if account is None:
        display, org_name = _default_names(email)
        account = Account(
            email=email, name=(name or display)[:NAME_MAX], created_at=now, updated_at=now
        )
        db.add(account)
        db.flush()
        organization = Organization(
            owner_account_id=account.id, name=org_name[:NAME_MAX], created_at=now, updated_at=now
        )
        db.add(organization)
        db.flush()
        first = App(
            organization_id=organization.id, name="Default App", created_at=now, updated_at=now
        )
        db.add(first)
        db.flush()
        create_default_environment(db, first.id)
    db.add(
        AuthIdentity(
            account_id=account.id, provider=provider, subject=subject, email=email, created_at=now
        )
    )
    db.flush()
    return account


def get_account(db: Session, account_id: str) -> AccountView:
    account = db.get(Account, account_id)
    if account is None:
        raise NotFound("Account not found.")
    organization = organization_of(db, account_id)
    return AccountView(
        id=account.id,
        email=account.email,
        name=account.name,
        organization_id=organization.id,
        organization_name=organization.name,
    )


def update_profile(db: Session, account_id: str, *, name: str) -> AccountView:
    """Rename the signed-in person."""
    account = db.get(Account, account_id)
    if account is None:
        raise NotFound("Account not found.")
    account.name = clean_name(name, "Your name")
    account.updated_at = utcnow()
    db.add(account)
    db.flush()
    return get_account(db, account_id)


def get_organization(db: Session, account_id: str) -> OrganizationView:
    organization = organization_of(db, account_id)
    return OrganizationView(
        id=organization.id, name=organization.name, created_at=organization.created_at
    )


def rename_organization(db: Session, account_id: str, *, name: str) -> OrganizationView:
    """Rename the account's Organization."""
    organization = organization_of(db, account_id)
    organization.name = clean_name(name, "Organization name")
    organization.updated_at = utcnow()
    db.add(organization)
    db.flush()
    return get_organization(db, account_id)


def _app_view(app: App) -> AppView:
    return AppView(
        id=app.id, name=app.name, organization_id=app.organization_id, created_at=app.created_at
    )


def list_apps(db: Session, account_id: str) -> list[AppView]:
    """The account's Apps, oldest first (the default App leads)."""
    organization = organization_of(db, account_id)
    apps = db.exec(
        select(App)
        .where(App.organization_id == organization.id)
        .order_by(col(App.created_at), col(App.id))
    ).all()
    return [_app_view(app) for app in apps]


def get_app(db: Session, account_id: str, app_id: str) -> AppView:
    """One App of the account, or NotFound (also for another owner's App)."""
    return _app_view(owned_app(db, account_id, app_id))


def create_app(db: Session, account_id: str, *, name: str) -> AppView:
    """Add an App to the account's Organization."""
    organization = organization_of(db, account_id)
    now = utcnow()
    app = App(
        organization_id=organization.id,
        name=clean_name(name, "App name"),
        created_at=now,
        updated_at=now,
    )
    db.add(app)
    db.flush()
    create_default_environment(db, app.id)
    return _app_view(app)


def rename_app(db: Session, account_id: str, app_id: str, *, name: str) -> AppView:
    """Rename one of the account's Apps."""
    app = owned_app(db, account_id, app_id)
    app.name = clean_name(name, "App name")
    app.updated_at = utcnow()
    db.add(app)
    db.flush()
    return _app_view(app)
