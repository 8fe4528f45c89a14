"""Organization, Apps and profile rules."""

from __future__ import annotations

import pytest
from sqlmodel import Session

from mosoo_core import identity
from mosoo_core.errors import InvalidInput, NotFound


def _account(db: Session, email: str) -> str:
    return identity.sign_in_identity(db, provider="email", subject=email, email=email).id


def test_new_account_has_exactly_the_default_app(db: Session) -> None:
    account_id = _account(db, "one@example.com")
    apps = identity.list_apps(db, account_id)
    assert [a.name for a in apps] == ["Default App"]
    assert identity.get_app(db, account_id, apps[0].id).id == apps[0].id


def test_create_and_rename_apps(db: Session) -> None:
    account_id = _account(db, "two@example.com")
    created = identity.create_app(db, account_id, name="  Support   bot ")
    assert created.name == "Support bot"
    renamed = identity.rename_app(db, account_id, created.id, name="Helpdesk")
    assert renamed.name == "Helpdesk"
    assert [a.name for a in identity.list_apps(db, account_id)] == ["Default App", "Helpdesk"]


def test_another_owners_app_is_not_found(db: Session) -> None:
    owner = _account(db, "owner@example.com")
    intruder = _account(db, "intruder@example.com")
    app_id = identity.list_apps(db, owner)[0].id
    with pytest.raises(NotFound):
        identity.get_app(db, intruder, app_id)
    with pytest.raises(NotFound):
        identity.rename_app(db, intruder, app_id, name="Mine now")
    assert identity.get_app(db, owner, app_id).name == "Default App"


@pytest.mark.parametrize("app_id", ["", "nonexistent", "01J00000000000000000000000"])
def test_unknown_app_ids_are_not_found(db: Session, app_id: str) -> None:
    account_id = _account(db, "three@example.com")
    with pytest.raises(NotFound):
        identity.get_app(db, account_id, app_id)


@pytest.mark.parametrize("name", ["", "   ", "x" * 121])
def test_invalid_names_are_refused_and_nothing_changes(db: Session, name: str) -> None:
    account_id = _account(db, "four@example.com")
    app = identity.list_apps(db, account_id)[0]
    with pytest.raises(InvalidInput):
        identity.rename_app(db, account_id, app.id, name=name)
    with pytest.raises(InvalidInput):
        identity.create_app(db, account_id, name=name)
    with pytest.raises(InvalidInput):
        identity.rename_organization(db, account_id, name=name)
    with pytest.raises(InvalidInput):
        identity.update_profile(db, account_id, name=name)
    assert identity.get_app(db, account_id, app.id).name == "Default App"
    assert len(identity.list_apps(db, account_id)) == 1


def test_rename_organization_and_profile(db: Session) -> None:
    account_id = _account(db, "ada.lovelace@example.com")
    assert identity.get_account(db, account_id).name == "Ada Lovelace"
    assert (
        identity.rename_organization(db, account_id, name="Analytical Engines").name
        == "Analytical Engines"
    )
    view = identity.update_profile(db, account_id, name="Ada")
    assert view.name == "Ada" and view.organization_name == "Analytical Engines"


def test_same_email_through_another_provider_is_the_same_account(db: Session) -> None:
    by_email = identity.sign_in_identity(
        db, provider="email", subject="x@example.com", email="x@example.com"
    )
    by_google = identity.sign_in_identity(
        db, provider="google", subject="g-123", email="X@Example.com"
    )
    assert by_email.id == by_google.id
    again = identity.sign_in_identity(db, provider="google", subject="g-123", email="x@example.com")
    assert again.id == by_email.id
    assert len(identity.list_apps(db, by_email.id)) == 1
