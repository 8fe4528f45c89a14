"""Provider credentials: ownership, validation, the one default, masked views and sealed keys."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from mosoo_core import identity, vault
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_core.tables import metadata
from mosoo_core.tables.vault import ProviderCredential, VaultSecret

KEY = "sk-proj-Zq8Xn4Lr7TvW2yHc9PbM3kJd6FsG1aQeR5uI0oplabcd"
OTHER_KEY = "sk-ant-api03-Hh7Yy2Uu8Ii9Oo0Pp1Aa2Ss3Dd4Ff5Gg6wxyz"


def _owner(db: Session, email: str = "owner@example.com") -> tuple[str, str]:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    return account.id, identity.list_apps(db, account.id)[0].id


def _input(**overrides: Any) -> vault.ProviderCredentialInput:
    values: dict[str, Any] = {
        "name": "OpenAI",
        "provider": "openai",
        "base_url": "https://api.openai.com/v1",
        "api_key": KEY,
        "models": ["gpt-4o-mini", "gpt-4o"],
    }
    values.update(overrides)
    return vault.ProviderCredentialInput(**values)


def _all_values(db: Session) -> list[bytes]:
    """Every value of every row of every table, as bytes."""
    found: list[bytes] = []
    for table in metadata.sorted_tables:
        for row in db.connection().execute(sa.select(table)).all():
            for value in row:
                found.append(value if isinstance(value, bytes) else str(value).encode())
    return found


def _count(db: Session, model: type) -> int:
    return len(db.exec(select(model)).all())


def test_created_credential_is_shown_masked_and_only_the_gateway_sees_the_key(db: Session) -> None:
    account_id, app_id = _owner(db)
    view = vault.create_provider_credential(db, account_id, app_id, _input())
    assert view.masked_key == "••••abcd" and view.has_key
    assert view.models == ("gpt-4o-mini", "gpt-4o") and view.default_model == "gpt-4o-mini"
    for shown in (
        view,
        vault.get_provider_credential(db, account_id, app_id, view.id),
        *vault.list_provider_credentials(db, account_id, app_id),
    ):
        assert KEY not in repr(shown)
        assert all(KEY[:-4] not in str(value) for value in dataclasses.asdict(shown).values())
    assert vault.reveal_provider_key(db, view.id) == KEY
    assert vault.reveal_provider_key(db, view.id, app_id=app_id) == KEY


def test_public_view_has_no_field_that_could_hold_the_key() -> None:
    fields = {f.name for f in dataclasses.fields(vault.ProviderCredentialView)}
    assert not {"api_key", "key", "secret", "api_key_secret_id"} & fields
    assert KEY not in repr(_input())  # the command does not print its key either


def test_the_key_is_in_no_column_of_any_table_in_plaintext(db: Session) -> None:
    account_id, app_id = _owner(db)
    created = vault.create_provider_credential(db, account_id, app_id, _input())
    vault.update_provider_credential(
        db, account_id, app_id, created.id, _input(name="Renamed", api_key=OTHER_KEY)
    )
    vault.create_provider_credential(db, account_id, app_id, _input(name="Second", api_key=KEY))
    db.flush()
    values = _all_values(db)
    assert any(value == b"abcd" for value in values)  # the last four, by design
    for key in (KEY, OTHER_KEY):
        for needle in (key.encode(), key[:-4].encode(), key[4:20].encode()):
            assert not any(needle in value for value in values)


def test_the_first_provider_is_the_default_and_an_app_has_one_default(db: Session) -> None:
    account_id, app_id = _owner(db)
    first = vault.create_provider_credential(db, account_id, app_id, _input(name="First"))
    second = vault.create_provider_credential(db, account_id, app_id, _input(name="Second"))
    assert first.is_default and not second.is_default
    third = vault.create_provider_credential(
        db, account_id, app_id, _input(name="Third", is_default=True)
    )
    assert third.is_default

    def defaults() -> list[str]:
        return [
            c.name for c in vault.list_provider_credentials(db, account_id, app_id) if c.is_default
        ]

    assert defaults() == ["Third"]
    vault.set_default_provider_credential(db, account_id, app_id, second.id)
    assert defaults() == ["Second"]
    assert (
        vault.list_provider_credentials(db, account_id, app_id)[0].name == "Second"
    )  # default first
    vault.update_provider_credential(
        db, account_id, app_id, first.id, _input(name="First", is_default=True)
    )
    assert defaults() == ["First"]


def test_the_database_refuses_a_second_default_too(db: Session) -> None:
    account_id, app_id = _owner(db)
    vault.create_provider_credential(db, account_id, app_id, _input(name="First"))
    second = vault.create_provider_credential(db, account_id, app_id, _input(name="Second"))
    row = db.get(ProviderCredential, second.id)
    assert row is not None
    row.is_default = True
    db.add(row)
    with pytest.raises(sa.exc.IntegrityError):
        db.flush()


def test_defaults_are_per_app(db: Session) -> None:
    account_id, app_id = _owner(db)
    other_app = identity.create_app(db, account_id, name="Second App").id
    a = vault.create_provider_credential(db, account_id, app_id, _input())
    b = vault.create_provider_credential(db, account_id, other_app, _input())
    assert a.is_default and b.is_default


def test_deleting_the_default_promotes_the_oldest_and_destroys_the_sealed_key(db: Session) -> None:
    account_id, app_id = _owner(db)
    first = vault.create_provider_credential(db, account_id, app_id, _input(name="First"))
    vault.create_provider_credential(db, account_id, app_id, _input(name="Second"))
    vault.create_provider_credential(db, account_id, app_id, _input(name="Third"))
    assert _count(db, VaultSecret) == 3
    vault.delete_provider_credential(db, account_id, app_id, first.id)
    remaining = vault.list_provider_credentials(db, account_id, app_id)
    assert [(c.name, c.is_default) for c in remaining] == [("Second", True), ("Third", False)]
    assert _count(db, VaultSecret) == 2
    with pytest.raises(NotFound):
        vault.get_provider_credential(db, account_id, app_id, first.id)
    with pytest.raises(NotFound):
        vault.reveal_provider_key(db, first.id)


def test_ollama_needs_no_key_and_gets_its_local_url(db: Session) -> None:
    account_id, app_id = _owner(db)
    view = vault.create_provider_credential(
        db,
        account_id,
        app_id,
        _input(name="Local", provider="ollama", base_url="", api_key="", models=["llama3.2"]),
    )
    assert view.base_url == "http://127.0.0.1:11434/v1"
    assert not view.has_key and view.masked_key == ""
    assert vault.reveal_provider_key(db, view.id) == ""
    assert _count(db, VaultSecret) == 0


@pytest.mark.parametrize(
    "provider", ["openai", "anthropic", "deepseek", "openrouter", "openai_compatible"]
)
def test_every_other_provider_requires_a_key(db: Session, provider: str) -> None:
    account_id, app_id = _owner(db)
    with pytest.raises(InvalidInput) as error:
        vault.create_provider_credential(
            db,
            account_id,
            app_id,
            _input(provider=provider, base_url="https://llm.example.com/v1", api_key="  "),
        )
    assert error.value.field == "api_key"


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        ("openai", "https://api.openai.com/v1"),
        ("anthropic", "https://api.anthropic.com/v1"),
        ("deepseek", "https://api.deepseek.com/v1"),
        ("openrouter", "https://openrouter.ai/api/v1"),
    ],
)
def test_a_blank_base_url_takes_the_presets(db: Session, provider: str, expected: str) -> None:
    account_id, app_id = _owner(db)
    view = vault.create_provider_credential(
        db, account_id, app_id, _input(provider=provider, base_url=" ")
    )
    assert view.base_url == expected


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"name": "   "}, "name"),
        ({"name": "x" * 81}, "name"),
        ({"provider": "gemini"}, "provider"),
        ({"provider": ""}, "provider"),
        ({"base_url": "ftp://files.example.com"}, "base_url"),
        ({"base_url": "not a url"}, "base_url"),
        ({"base_url": "javascript:alert(1)"}, "base_url"),
        ({"base_url": "https://"}, "base_url"),
        ({"base_url": "https://user:pw@llm.example.com/v1"}, "base_url"),
        ({"base_url": "https://llm.example.com:99999/v1"}, "base_url"),
        ({"base_url": "https://llm.example.com/v1#x"}, "base_url"),
        ({"base_url": "https://example.com/" + "a" * 500}, "base_url"),
        ({"provider": "openai_compatible", "base_url": ""}, "base_url"),
        ({"models": ["gpt-4o", ""]}, "models"),
        ({"models": ["gpt-4o", "   "]}, "models"),
        ({"models": [f"model-{n}" for n in range(101)]}, "models"),
        ({"models": ["m" * 201]}, "models"),
        ({"models": "gpt-4o"}, "models"),
        ({"default_model": "gpt-5"}, "default_model"),
        ({"api_key": "sk-has space inside"}, "api_key"),
        ({"api_key": "sk-line\nbreak"}, "api_key"),
        ({"api_key": "k" * 4097}, "api_key"),
    ],
)
def test_invalid_input_is_refused_and_nothing_is_stored(
    db: Session, overrides: dict[str, Any], field: str
) -> None:
    account_id, app_id = _owner(db)
    with pytest.raises(InvalidInput) as error:
        vault.create_provider_credential(db, account_id, app_id, _input(**overrides))
    assert error.value.field == field
    assert _count(db, ProviderCredential) == 0
    assert _count(db, VaultSecret) == 0


def test_valid_edges_are_accepted_and_cleaned(db: Session) -> None:
    account_id, app_id = _owner(db)
    view = vault.create_provider_credential(
        db,
        account_id,
        app_id,
        _input(
            name="  My   vLLM ",
            provider="openai_compatible",
            base_url="http://10.0.0.5:8000/v1/",
            models=[" qwen ", "qwen", "m" * 200] + [f"x{n}" for n in range(97)],
            default_model="qwen",
        ),
    )
    assert view.name == "My vLLM"
    assert view.base_url == "http://10.0.0.5:8000/v1"
    assert len(view.models) == 99 and view.models[0] == "qwen"
    assert (
        vault.create_provider_credential(
            db, account_id, app_id, _input(name="n" * 80, models=[])
        ).default_model
        == ""
    )


def test_names_are_unique_in_an_app_regardless_of_case(db: Session) -> None:
    account_id, app_id = _owner(db)
    first = vault.create_provider_credential(db, account_id, app_id, _input(name="OpenAI"))
    with pytest.raises(InvalidInput) as error:
        vault.create_provider_credential(db, account_id, app_id, _input(name="openai"))
    assert error.value.field == "name"
    second = vault.create_provider_credential(db, account_id, app_id, _input(name="Other"))
    with pytest.raises(InvalidInput):
        vault.update_provider_credential(db, account_id, app_id, second.id, _input(name="OPENAI"))
    # Keeping its own name is not a clash.
    assert (
        vault.update_provider_credential(
            db, account_id, app_id, first.id, _input(name="OpenAI")
        ).name
        == "OpenAI"
    )


def test_another_owners_credential_is_not_found(db: Session) -> None:
    owner, app_id = _owner(db, "owner@example.com")
    intruder, intruder_app = _owner(db, "intruder@example.com")
    credential = vault.create_provider_credential(db, owner, app_id, _input())
    calls = [
        lambda account, app: vault.get_provider_credential(db, account, app, credential.id),
        lambda account, app: vault.update_provider_credential(
            db, account, app, credential.id, _input(api_key="")
        ),
        lambda account, app: vault.set_default_provider_credential(db, account, app, credential.id),
        lambda account, app: vault.delete_provider_credential(db, account, app, credential.id),
    ]
    for call in calls:
        for account, app in ((intruder, app_id), (intruder, intruder_app)):
            with pytest.raises(NotFound):
                call(account, app)
    with pytest.raises(NotFound):
        vault.list_provider_credentials(db, intruder, app_id)
    with pytest.raises(NotFound):
        vault.create_provider_credential(db, intruder, app_id, _input())
    assert vault.list_provider_credentials(db, intruder, intruder_app) == []
    # The owner's other App does not reach it either.
    second_app = identity.create_app(db, owner, name="Second").id
    with pytest.raises(NotFound):
        vault.get_provider_credential(db, owner, second_app, credential.id)
    with pytest.raises(NotFound):
        vault.reveal_provider_key(db, credential.id, app_id=second_app)
    # Nothing changed.
    assert vault.get_provider_credential(db, owner, app_id, credential.id) == credential


@pytest.mark.parametrize("credential_id", ["", "nonexistent", "01J00000000000000000000000"])
def test_unknown_credential_ids_are_not_found(db: Session, credential_id: str) -> None:
    account_id, app_id = _owner(db)
    with pytest.raises(NotFound):
        vault.get_provider_credential(db, account_id, app_id, credential_id)
    with pytest.raises(NotFound):
        vault.reveal_provider_key(db, credential_id)


def test_update_keeps_the_key_when_blank_and_replaces_it_when_given(db: Session) -> None:
    account_id, app_id = _owner(db)
    created = vault.create_provider_credential(db, account_id, app_id, _input())
    kept = vault.update_provider_credential(
        db,
        account_id,
        app_id,
        created.id,
        _input(name="Renamed", api_key="", base_url="https://api.openai.com/v2", models=["gpt-4o"]),
    )
    assert kept.name == "Renamed" and kept.masked_key == "••••abcd" and kept.models == ("gpt-4o",)
    assert vault.reveal_provider_key(db, created.id) == KEY
    replaced = vault.update_provider_credential(
        db, account_id, app_id, created.id, _input(api_key=OTHER_KEY)
    )
    assert replaced.masked_key == "••••wxyz"
    assert vault.reveal_provider_key(db, created.id) == OTHER_KEY
    assert _count(db, VaultSecret) == 1


def test_a_saved_key_is_not_sent_to_a_new_host_without_entering_it_again(db: Session) -> None:
    account_id, app_id = _owner(db)
    created = vault.create_provider_credential(db, account_id, app_id, _input())
    with pytest.raises(InvalidInput) as error:
        vault.update_provider_credential(
            db,
            account_id,
            app_id,
            created.id,
            _input(api_key="", base_url="https://collector.example.net/v1"),
        )
    assert error.value.field == "api_key"
    assert (
        vault.get_provider_credential(db, account_id, app_id, created.id).base_url
        == "https://api.openai.com/v1"
    )
    moved = vault.update_provider_credential(
        db,
        account_id,
        app_id,
        created.id,
        _input(api_key=OTHER_KEY, base_url="https://proxy.example.net/v1"),
    )
    assert moved.base_url == "https://proxy.example.net/v1"
    assert vault.reveal_provider_key(db, created.id) == OTHER_KEY


def test_switching_to_ollama_without_a_key_drops_the_old_key(db: Session) -> None:
    account_id, app_id = _owner(db)
    created = vault.create_provider_credential(db, account_id, app_id, _input())
    local = vault.update_provider_credential(
        db,
        account_id,
        app_id,
        created.id,
        _input(provider="ollama", base_url="", api_key="", models=["llama3.2"]),
    )
    assert not local.has_key and local.masked_key == ""
    assert vault.reveal_provider_key(db, created.id) == ""
    assert _count(db, VaultSecret) == 0
    with pytest.raises(InvalidInput) as error:  # and back to OpenAI needs a key again
        vault.update_provider_credential(db, account_id, app_id, created.id, _input(api_key=""))
    assert error.value.field == "api_key"


def test_update_leaves_the_default_flag_alone_unless_asked(db: Session) -> None:
    account_id, app_id = _owner(db)
    created = vault.create_provider_credential(db, account_id, app_id, _input())
    assert vault.update_provider_credential(
        db, account_id, app_id, created.id, _input(api_key="")
    ).is_default
    cleared = vault.update_provider_credential(
        db, account_id, app_id, created.id, _input(api_key="", is_default=False)
    )
    assert not cleared.is_default


def test_short_keys_are_masked_without_their_last_four(db: Session) -> None:
    account_id, app_id = _owner(db)
    view = vault.create_provider_credential(
        db,
        account_id,
        app_id,
        _input(provider="openai_compatible", base_url="http://vllm:8000/v1", api_key="EMPTY"),
    )
    assert view.masked_key == "••••"
    assert vault.reveal_provider_key(db, view.id) == "EMPTY"


def test_a_sealed_key_moved_to_another_record_or_app_does_not_decrypt(db: Session) -> None:
    account_id, app_id = _owner(db)
    first = vault.create_provider_credential(db, account_id, app_id, _input(name="First"))
    second = vault.create_provider_credential(
        db, account_id, app_id, _input(name="Second", api_key=OTHER_KEY)
    )
    connection = db.connection()
    # Point the second credential at the first one's sealed key.
    first_secret = connection.execute(
        sa.text("SELECT api_key_secret_id FROM provider_credential WHERE id = :id"),
        {"id": first.id},
    ).scalar_one()
    connection.execute(
        sa.text("UPDATE provider_credential SET api_key_secret_id = :s WHERE id = :id"),
        {"s": first_secret, "id": second.id},
    )
    db.expire_all()
    with pytest.raises(vault.VaultError):
        vault.reveal_provider_key(db, second.id)
    # Move the first credential (and its secret row) into another owner's App.
    _, stranger_app = _owner(db, "stranger@example.com")
    connection.execute(
        sa.text("UPDATE provider_credential SET app_id = :a WHERE id = :id"),
        {"a": stranger_app, "id": first.id},
    )
    connection.execute(
        sa.text("UPDATE vault_secret SET app_id = :a WHERE id = :id"),
        {"a": stranger_app, "id": first_secret},
    )
    db.expire_all()
    with pytest.raises(vault.VaultError):
        vault.reveal_provider_key(db, first.id)
