"""`.agent` packages: export carries the profile and never a secret; import makes a draft,
binds a matching provider key, and refuses hostile packages without writing anything."""

from __future__ import annotations

import io
import json
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlmodel import Session, select

from mosoo_core import agents, identity, vault
from mosoo_core.errors import InvalidInput, NotFound
from mosoo_core.tables.agents import Agent
from tests.support import hostile_zips
from tests.support.hostile_zips import (
    declaring_huge_entry_counts,
    hiding_entries,
    make_zip,
    zip_attacks,
)

KEY = "sk-proj-Zq8Xn4Lr7TvW2yHc9PbM3kJd6FsG1aQeR5uI0oplabcd"
BASE_URL = "https://llm.example.com/v1"


def _owner(db: Session, email: str = "owner@example.com") -> tuple[str, str]:
    account = identity.sign_in_identity(db, provider="email", subject=email, email=email)
    return account.id, identity.list_apps(db, account.id)[0].id


def _credential(
    db: Session, account_id: str, app_id: str, **overrides: Any
) -> vault.ProviderCredentialView:
    values: dict[str, Any] = {
        "name": "Example LLM",
        "provider": "openai_compatible",
        "base_url": BASE_URL,
        "api_key": KEY,
        "models": ["example-large", "example-small"],
    }
    values.update(overrides)
    return vault.create_provider_credential(
        db, account_id, app_id, vault.ProviderCredentialInput(**values)
    )


def _agent(
    db: Session, account_id: str, app_id: str, credential_id: str | None = None
) -> agents.AgentView:
    created = agents.create_agent(db, account_id, app_id, name="Release notes writer", kind="pet")
    return agents.update_agent(
        db,
        account_id,
        app_id,
        created.id,
        agents.AgentChanges(
            description="Drafts release notes from merged pull requests.",
            model="example-large",
            system_prompt="You write short, accurate release notes.\nNever invent changes.",
            tools={"read": "allow", "grep": "allow", "bash": "ask"},
            provider_options={"temperature": 0.2, "reasoning_effort": "low"},
            provider_credential_id=credential_id,
        ),
    )


def _agent_count(db: Session) -> int:
    return len(db.exec(select(Agent)).all())


def _manifest(**overrides: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "format": "mosoo.agent",
        "version": 1,
        "exported_at": "2025-01-01T00:00:00+00:00",
        "agent": {
            "name": "Imported",
            "description": "",
            "runtime": "openai",
            "kind": "cattle",
            "model": "m",
            "system_prompt": "",
            "tools": {"read": "allow"},
            "provider_options": {},
        },
        "provider": None,
        "skills": [],
        "mcp_servers": [],
        "environment": None,
    }
    manifest.update(overrides)
    return manifest


_zip = make_zip


def _package(
    manifest: dict[str, Any] | None = None, *extra: tuple[str | zipfile.ZipInfo, bytes]
) -> bytes:
    return _zip([("manifest.json", json.dumps(manifest or _manifest()).encode()), *extra])


def _every_byte(package: bytes) -> bytes:
    """The zip as stored plus every entry's uncompressed content."""
    with zipfile.ZipFile(io.BytesIO(package)) as archive:
        return package + b"".join(archive.read(info) for info in archive.infolist())


def _refused(db: Session, account_id: str, app_id: str, package: bytes, message: str) -> None:
    before = _agent_count(db)
    with pytest.raises(InvalidInput, match=message) as refused:
        agents.import_agent(db, account_id, app_id, package)
    assert refused.value.message.startswith("This package cannot be imported:")
    assert _agent_count(db) == before


# --- export and round trip --------------------------------------------------------------


def test_exported_package_has_a_stable_manifest_with_the_profile_and_the_provider_description(
    db: Session,
) -> None:
    account_id, app_id = _owner(db)
    credential = _credential(db, account_id, app_id)
    agent = _agent(db, account_id, app_id, credential.id)
    now = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)

    package = agents.export_agent(db, account_id, app_id, agent.id, now=now)

    with zipfile.ZipFile(io.BytesIO(package)) as archive:
        assert archive.namelist() == ["manifest.json"]
        manifest = json.loads(archive.read("manifest.json"))
    assert manifest == {
        "format": "mosoo.agent",
        "version": 1,
        "exported_at": "2025-03-04T05:06:07+00:00",
        "agent": {
            "name": "Release notes writer",
            "description": "Drafts release notes from merged pull requests.",
            "runtime": "openai",
            "kind": "pet",
            "model": "example-large",
            "system_prompt": "You write short, accurate release notes.\nNever invent changes.",
            "tools": {"bash": "ask", "grep": "allow", "read": "allow"},
            "provider_options": {"reasoning_effort": "low", "temperature": 0.2},
        },
        "provider": {
            "provider": "openai_compatible",
            "base_url": BASE_URL,
            "models": ["example-large", "example-small"],
        },
        "skills": [],
        "mcp_servers": [],
        "environment": None,
    }
    assert agents.export_agent(db, account_id, app_id, agent.id, now=now) == package


def test_exported_package_contains_no_key_credential_id_or_vault_data(db: Session) -> None:
    from mosoo_core.tables.vault import VaultSecret

    account_id, app_id = _owner(db)
    credential = _credential(db, account_id, app_id)
    agent = _agent(db, account_id, app_id, credential.id)
    # A key pasted into the free-form options must not leave with the package either.
    options = {"temperature": 0.2, "api_key": KEY, "headers": {"Authorization": KEY}}
    agents.update_agent(
        db, account_id, app_id, agent.id, agents.AgentChanges(provider_options=options)
    )

    everything = _every_byte(agents.export_agent(db, account_id, app_id, agent.id))

    secret = db.exec(select(VaultSecret)).one()
    for forbidden in (
        KEY,
        KEY[-12:],
        credential.id,
        secret.id,
        "api_key_secret_id",
        "provider_credential_id",
    ):
        assert forbidden.encode() not in everything
    for sealed in (secret.ciphertext, secret.wrapped_key):
        assert sealed not in everything
    assert b'"temperature": 0.2' in everything


def test_round_trip_into_another_owners_app_makes_the_same_draft_and_asks_to_reconnect_the_provider(
    db: Session,
) -> None:
    account_id, app_id = _owner(db)
    credential = _credential(db, account_id, app_id)
    original = _agent(db, account_id, app_id, credential.id)
    package = agents.export_agent(db, account_id, app_id, original.id)
    other_account, other_app = _owner(db, "other@example.com")

    report = agents.import_agent(db, other_account, other_app, package)

    imported = agents.get_agent(db, other_account, other_app, report.agent_id)
    assert imported.id != original.id and imported.app_id == other_app
    assert imported.status == "draft"
    for attribute in (
        "name",
        "description",
        "runtime",
        "kind",
        "model",
        "system_prompt",
        "tools",
        "provider_options",
    ):
        assert getattr(imported, attribute) == getattr(original, attribute)
    assert imported.provider_credential_id is None
    assert report.reconnect == [
        "Choose a provider key (the package used an OpenAI-compatible provider at https://llm.example.com/v1)."
    ]
    blockers = {blocker.code for blocker in agents.readiness(db, imported).blockers}
    assert "no_provider_key" in blockers


def test_import_binds_the_apps_key_with_the_same_provider_and_base_url_and_says_so(
    db: Session,
) -> None:
    account_id, app_id = _owner(db)
    original = _agent(db, account_id, app_id, _credential(db, account_id, app_id).id)
    package = agents.export_agent(db, account_id, app_id, original.id)
    other_account, other_app = _owner(db, "other@example.com")
    _credential(
        db, other_account, other_app, name="Elsewhere", base_url="https://other.example.com/v1"
    )
    matching = _credential(db, other_account, other_app, name="Same host", base_url=BASE_URL + "/")

    report = agents.import_agent(db, other_account, other_app, package)

    imported = agents.get_agent(db, other_account, other_app, report.agent_id)
    assert imported.provider_credential_id == matching.id
    assert report.reconnect == []
    assert report.notes == ["Connected the provider key 'Same host' (https://llm.example.com/v1)."]
    assert agents.readiness(db, imported).ready


def test_import_binds_a_matching_key_but_asks_to_check_a_model_the_key_does_not_list(
    db: Session,
) -> None:
    account_id, app_id = _owner(db)
    matching = _credential(db, account_id, app_id, models=["example-small"])
    provider = {"provider": "openai_compatible", "base_url": BASE_URL, "models": ["example-large"]}
    manifest = _manifest(provider=provider)
    manifest["agent"]["model"] = "example-large"

    report = agents.import_agent(db, account_id, app_id, _package(manifest))

    assert (
        agents.get_agent(db, account_id, app_id, report.agent_id).provider_credential_id
        == matching.id
    )
    assert report.reconnect == [
        "Check the model: 'example-large' is not in the models of 'Example LLM'."
    ]


def test_import_does_not_bind_a_key_of_another_provider_kind_at_the_same_url(db: Session) -> None:
    account_id, app_id = _owner(db)
    _credential(db, account_id, app_id, provider="openai", base_url=BASE_URL)
    provider = {"provider": "openai_compatible", "base_url": BASE_URL, "models": []}

    report = agents.import_agent(db, account_id, app_id, _package(_manifest(provider=provider)))

    assert agents.get_agent(db, account_id, app_id, report.agent_id).provider_credential_id is None
    assert report.reconnect and report.reconnect[0].startswith("Choose a provider key")


def test_import_without_provider_asks_for_a_key_and_reports_what_it_does_not_carry(
    db: Session,
) -> None:
    account_id, app_id = _owner(db)
    # Packages made before skills travelled list only their ids.
    manifest = _manifest(
        skills=[{"id": "01JOLDSKILL"}], mcp_servers=[{}, {}], environment={"packages": ["git"]}
    )

    report = agents.import_agent(db, account_id, app_id, _package(manifest))

    assert report.reconnect[0] == "Choose a provider key."
    assert any(
        "1 skill(s) again: the package does not carry their files" in line
        for line in report.reconnect
    )
    assert not any("not supported yet" in line and "skill" in line for line in report.reconnect)
    assert any("2 MCP server(s)" in line for line in report.reconnect)
    assert any("environment" in line for line in report.reconnect)


def test_export_of_another_owners_agent_is_not_found(db: Session) -> None:
    account_id, app_id = _owner(db)
    agent = _agent(db, account_id, app_id)
    other_account, other_app = _owner(db, "other@example.com")
    with pytest.raises(NotFound):
        agents.export_agent(db, other_account, other_app, agent.id)
    with pytest.raises(NotFound):
        agents.export_agent(db, other_account, app_id, agent.id)


def test_import_into_another_owners_app_is_not_found_and_creates_nothing(db: Session) -> None:
    _, app_id = _owner(db)
    other_account, _ = _owner(db, "other@example.com")
    with pytest.raises(NotFound):
        agents.import_agent(db, other_account, app_id, _package())
    assert _agent_count(db) == 0


# --- hostile and broken packages ---------------------------------------------------------


def _with_manifest_agent(**agent_changes: Any) -> bytes:
    manifest = _manifest()
    manifest["agent"] = {**manifest["agent"], **agent_changes}
    return _package(manifest)


HOSTILE: dict[str, tuple[Callable[[], bytes], str]] = {
    # The archive attacks every zip upload refuses (skill uploads run them too).
    **zip_attacks([("manifest.json", json.dumps(_manifest()).encode())]),
    "missing_manifest": (lambda: _zip([("agent.json", b"{}")]), "has no manifest.json"),
    "manifest_not_json": (lambda: _zip([("manifest.json", b"{not json")]), "not valid JSON"),
    "manifest_not_utf8": (lambda: _zip([("manifest.json", b"\xff\xfe{}")]), "not valid JSON"),
    "manifest_deeply_nested": (lambda: _zip([("manifest.json", b"[" * 200_000)]), "not valid JSON"),
    "manifest_is_a_list": (lambda: _zip([("manifest.json", b"[]")]), "not a JSON object"),
    "wrong_format": (
        lambda: _package(_manifest(format="other.agent")),
        "format must be 'mosoo.agent'",
    ),
    "unknown_version": (lambda: _package(_manifest(version=2)), "version 2 is not supported"),
    "version_as_string": (lambda: _package(_manifest(version="1")), "is not supported"),
    "unknown_manifest_field": (
        lambda: _package(_manifest(owner_key="x")),
        "unknown manifest fields: owner_key",
    ),
    "no_agent": (lambda: _package(_manifest(agent=None)), "has no agent"),
    "no_name": (lambda: _with_manifest_agent(name="   "), "has no name"),
    "unknown_runtime": (
        lambda: _with_manifest_agent(runtime="gpt-engineer"),
        "unknown runtime 'gpt-engineer'",
    ),
    "unknown_kind": (lambda: _with_manifest_agent(kind="horse"), "unknown kind 'horse'"),
    "name_wrong_type": (lambda: _with_manifest_agent(name=["a"]), "has no name"),
    "description_wrong_type": (
        lambda: _with_manifest_agent(description=5),
        "agent.description must be a string",
    ),
    "name_too_long": (lambda: _with_manifest_agent(name="n" * 81), "agent.name is longer than 80"),
    "description_too_long": (
        lambda: _with_manifest_agent(description="d" * 501),
        "agent.description is longer",
    ),
    "system_prompt_too_long": (
        lambda: _with_manifest_agent(system_prompt="p" * 100_001),
        "system_prompt is longer",
    ),
    "tools_wrong_type": (
        lambda: _with_manifest_agent(tools=["bash"]),
        "agent.tools must be an object",
    ),
    "unknown_tool": (
        lambda: _with_manifest_agent(tools={"rm_rf": "allow"}),
        "unknown tool 'rm_rf'",
    ),
    "bad_tool_policy": (
        lambda: _with_manifest_agent(tools={"bash": "always"}),
        "policy must be allow or ask",
    ),
    "unknown_agent_field": (
        lambda: _with_manifest_agent(provider_credential_id="01J"),
        "unknown agent fields",
    ),
    "secret_in_options": (
        lambda: _with_manifest_agent(provider_options={"api_key": "sk-x"}),
        "holds a key",
    ),
    "options_wrong_type": (
        lambda: _with_manifest_agent(provider_options="hot"),
        "must be an object",
    ),
    "unknown_provider": (
        lambda: _package(_manifest(provider={"provider": "skynet", "base_url": BASE_URL})),
        "unknown provider 'skynet'",
    ),
    "provider_url_not_http": (
        lambda: _package(_manifest(provider={"provider": "openai", "base_url": "file:///etc"})),
        "must be an http",
    ),
    "provider_url_with_credentials": (
        lambda: _package(
            _manifest(provider={"provider": "openai", "base_url": "https://u:p@h.example/v1"})
        ),
        "holds credentials",
    ),
    "skills_wrong_type": (lambda: _package(_manifest(skills="all")), "skills must be a list"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_or_broken_package_is_refused_with_a_clear_message_and_creates_no_agent(
    db: Session, case: str
) -> None:
    account_id, app_id = _owner(db)
    build, message = HOSTILE[case]
    _refused(db, account_id, app_id, build(), message)


def test_package_of_exactly_512_entries_is_accepted(db: Session) -> None:
    account_id, app_id = _owner(db)
    report = agents.import_agent(
        db, account_id, app_id, _package(None, *[(f"skills/{i}.md", b"") for i in range(511)])
    )
    assert agents.get_agent(db, account_id, app_id, report.agent_id).name == "Imported"


def test_package_declaring_huge_entry_counts_is_refused_before_parsing_them(db: Session) -> None:
    account_id, app_id = _owner(db)
    _refused(db, account_id, app_id, declaring_huge_entry_counts(_package()), "at most 512")


def test_package_hiding_tens_of_thousands_of_entries_behind_a_small_count_is_refused(
    db: Session,
) -> None:
    account_id, app_id = _owner(db)
    package = hiding_entries([("manifest.json", json.dumps(_manifest()).encode())])
    tracemalloc.start()
    try:
        _refused(db, account_id, app_id, package, "file list is too large")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024


def test_package_larger_than_64_mib_is_refused(db: Session) -> None:
    account_id, app_id = _owner(db)
    _refused(db, account_id, app_id, b"\0" * (64 * 1024 * 1024 + 1), "larger than 64 MiB")


def test_entry_over_16_mib_is_refused(db: Session) -> None:
    account_id, app_id = _owner(db)
    _refused(
        db,
        account_id,
        app_id,
        _package(None, ("skills/big.md", b"a" * (16 * 1024 * 1024 + 1))),
        "larger than 16 MiB",
    )


def test_entries_unpacking_to_over_64_mib_in_total_are_refused(db: Session) -> None:
    account_id, app_id = _owner(db)
    chunk = b"b" * (15 * 1024 * 1024)
    _refused(
        db,
        account_id,
        app_id,
        _package(None, *[(f"skills/{i}.md", chunk) for i in range(5)]),
        "unpacks to more than 64 MiB",
    )


@pytest.fixture(scope="module")
def compression_bomb() -> bytes:
    """1 GiB of zeros deflated to about 1 MiB, next to a valid manifest."""
    return hostile_zips.compression_bomb([("manifest.json", json.dumps(_manifest()).encode())])


def test_compression_bomb_is_refused_quickly_without_inflating_it(
    db: Session, compression_bomb: bytes
) -> None:
    account_id, app_id = _owner(db)
    assert len(compression_bomb) < 8 * 1024 * 1024
    tracemalloc.start()
    started = time.monotonic()
    try:
        _refused(db, account_id, app_id, compression_bomb, "larger than 16 MiB")
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 5
    assert peak < 64 * 1024 * 1024


def test_compression_bomb_with_a_lying_size_header_is_refused_quickly(
    db: Session, compression_bomb: bytes
) -> None:
    account_id, app_id = _owner(db)
    lying = hostile_zips.lying(compression_bomb, b"skills/zeros.md", 1000)
    with zipfile.ZipFile(io.BytesIO(lying)) as archive:
        assert archive.getinfo("skills/zeros.md").file_size == 1000
    tracemalloc.start()
    started = time.monotonic()
    try:
        _refused(db, account_id, app_id, lying, "is damaged")
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 5
    assert peak < 64 * 1024 * 1024


@pytest.mark.parametrize(
    ("runtime", "provider", "base_url", "options"),
    [
        (
            "acp",
            "openai_compatible",
            BASE_URL,
            {"acp_command": ["my-agent", "--acp", "--log-level", "warn"], "temperature": 0.3},
        ),
        ("claude", "anthropic", "https://api.anthropic.com/v1", {"max_tokens": 4096}),
    ],
)
def test_round_trip_keeps_the_runtime_and_its_options(
    db: Session, runtime: str, provider: str, base_url: str, options: dict[str, Any]
) -> None:
    account_id, app_id = _owner(db)
    credential = _credential(db, account_id, app_id, provider=provider, base_url=base_url)
    created = agents.create_agent(db, account_id, app_id, name=f"{runtime} agent", runtime=runtime)
    original = agents.update_agent(
        db,
        account_id,
        app_id,
        created.id,
        agents.AgentChanges(
            model="example-large",
            tools={"bash": "ask", "web_fetch": "allow"},
            provider_options=options,
            provider_credential_id=credential.id,
        ),
    )
    assert original.runtime == runtime and original.provider_options == options
    package = agents.export_agent(db, account_id, app_id, original.id)
    with zipfile.ZipFile(io.BytesIO(package)) as archive:
        exported = json.loads(archive.read("manifest.json"))["agent"]
    assert exported["runtime"] == runtime and exported["provider_options"] == options
    other_account, other_app = _owner(db, "other@example.com")
    matching = _credential(
        db, other_account, other_app, provider=provider, base_url=base_url, name="Theirs"
    )

    report = agents.import_agent(db, other_account, other_app, package)

    imported = agents.get_agent(db, other_account, other_app, report.agent_id)
    assert imported.runtime == runtime
    assert imported.provider_options == options
    assert imported.tools == original.tools and imported.model == original.model
    assert imported.provider_credential_id == matching.id
    assert agents.readiness(db, imported).ready, agents.readiness(db, imported).blockers
