"""What an environment revision may hold, checked before anything is saved.

Every refusal is an InvalidInput naming the field (`pip`, `npm`, `variables`,
`setup_script`, `allowed_hosts`, `network_policy`) and the offending entry, so a form can
show it next to the input and an API caller can fix exactly that entry.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from mosoo_core.errors import FieldConflict, InvalidInput
from mosoo_core.network.policy import parse_allowlist
from mosoo_core.settings import get_settings
from mosoo_core.tables.environments import NETWORK_POLICIES

MAX_PACKAGES = 100  # per manager
MAX_VARIABLES = 100
MAX_VARIABLE_NAME = 128
MAX_VARIABLE_VALUE = 32 * 1024  # characters
MAX_SETUP_SCRIPT = 64 * 1024  # characters

# PEP 508 names (PEP 503-normalized below), optional extras, one exact PEP 440 public version.
_PIP = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)"
    r"(?P<extras>\[[A-Za-z0-9._-]+(?:\s*,\s*[A-Za-z0-9._-]+)*\])?"
    r"\s*==\s*(?P<version>(?:\d+!)?\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?)$"
)
# npm names (scoped or not, lower case, URL-safe) and one exact semver (pre-release/build ok).
_NPM = re.compile(
    r"^(?P<name>(?:@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*)"
    r"@(?P<version>(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?)$"
)


def _schema_pattern(pattern: re.Pattern[str]) -> str:
    """The pattern as the API's schema states it: no group names (JSON Schema's regexes are
    ECMA's), no spaces around `==` (a form may add them; the service drops them)."""
    return re.sub(r"\(\?P<\w+>", "(?:", pattern.pattern).replace(r"\s*", "")


PIP_PATTERN = _schema_pattern(_PIP)
NPM_PATTERN = _schema_pattern(_NPM)
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Set by Mosoo in every sandbox (home, path, the proxy it points at, its own settings).
RESERVED_VARIABLES = frozenset(
    {
        "HOME",
        "PATH",
        "USER",
        "SHELL",
        "PWD",
        "HOSTNAME",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        # Where the environment's packages are found (set when a revision has packages).
        "PYTHONPATH",
        "NODE_PATH",
    }
)
RESERVED_PREFIXES = ("MOSOO_", "NPM_CONFIG_", "PIP_")


@dataclass(frozen=True)
class VariableInput:
    """One variable as an owner submits it. `value=None` keeps the stored value of a secret
    of the same name (secrets are write-only: a form never has them to send back)."""

    name: str
    value: str | None
    secret: bool = False
    setup_only: bool = False


def _entries(raw: Sequence[str], field: str) -> list[str]:
    if isinstance(raw, str):
        raise InvalidInput("Give a list of packages.", field=field)
    entries = [" ".join(str(item).split()) for item in raw]
    entries = [entry for entry in entries if entry]
    if len(entries) > MAX_PACKAGES:
        raise InvalidInput(f"At most {MAX_PACKAGES} {field} packages.", field=field)
    return entries


def clean_pip(raw: Sequence[str]) -> list[str]:
    """`name==version` entries, names normalized (PEP 503), one entry per name, sorted."""
    seen: dict[str, str] = {}
    for entry in _entries(raw, "pip"):
        match = _PIP.match(entry)
        if match is None:
            raise InvalidInput(
                f"{entry!r} is not an exact pip requirement: write name==version "
                "(for example requests==2.32.3).",
                field="pip",
            )
        name = re.sub(r"[-_.]+", "-", match["name"]).lower()
        extras = (match["extras"] or "").replace(" ", "").lower()
        if name in seen:  # well formed, each entry: a conflict between two (409 in the API)
            raise FieldConflict(f"{match['name']} is listed twice.", field="pip")
        seen[name] = f"{name}{extras}=={match['version']}"
    return sorted(seen.values())


def clean_npm(raw: Sequence[str]) -> list[str]:
    """`name@version` entries with an exact version, one per name, sorted."""
    seen: dict[str, str] = {}
    for entry in _entries(raw, "npm"):
        match = _NPM.match(entry)
        if match is None:
            raise InvalidInput(
                f"{entry!r} is not an exact npm package: write name@version "
                "(for example lodash@4.17.21).",
                field="npm",
            )
        if match["name"] in seen:
            raise FieldConflict(f"{match['name']} is listed twice.", field="npm")
        seen[match["name"]] = entry
    return sorted(seen.values())


def clean_setup_script(raw: str) -> str:
    script = (raw or "").replace("\r\n", "\n")
    if "\x00" in script:
        raise InvalidInput("The setup script cannot contain NUL characters.", field="setup_script")
    if len(script) > MAX_SETUP_SCRIPT:
        raise InvalidInput(
            f"The setup script is limited to {MAX_SETUP_SCRIPT:,} characters.",
            field="setup_script",
        )
    return script if script.strip() else ""


def clean_variable_name(raw: str) -> str:
    name = (raw or "").strip()
    if not _VARIABLE_NAME.match(name) or len(name) > MAX_VARIABLE_NAME:
        raise InvalidInput(
            f"{raw!r} is not a variable name: letters, digits and _, not starting with a "
            f"digit, at most {MAX_VARIABLE_NAME} characters.",
            field="variables",
        )
    upper = name.upper()
    if upper in RESERVED_VARIABLES or upper.startswith(RESERVED_PREFIXES):
        raise InvalidInput(f"{name} is set by Mosoo and cannot be overridden.", field="variables")
    return name


def check_variable_value(name: str, value: str) -> None:
    if "\x00" in value:
        raise InvalidInput(f"{name} cannot contain NUL characters.", field="variables")
    if len(value) > MAX_VARIABLE_VALUE:
        raise InvalidInput(
            f"{name} is limited to {MAX_VARIABLE_VALUE:,} characters.", field="variables"
        )


def clean_network(policy: str, hosts: Sequence[str], allow_package_indexes: bool) -> list[str]:
    """The allowlist to store (canonical entries, sorted); refuses what cannot be enforced."""
    if policy not in NETWORK_POLICIES:
        raise InvalidInput(
            f"The network policy is one of {', '.join(NETWORK_POLICIES)}.", field="network_policy"
        )
    if isinstance(hosts, str):
        raise InvalidInput("Give a list of hosts.", field="allowed_hosts")
    entries = [str(host).strip() for host in hosts if str(host).strip()]
    try:
        allowed = parse_allowlist(entries, allow_loopback=get_settings().egress_allow_loopback)
    except ValueError as error:
        raise InvalidInput(str(error), field="allowed_hosts") from None
    canonical = sorted({str(entry) for entry in allowed})
    if policy != "limited" and canonical:
        raise InvalidInput(
            "Allowed hosts apply to the limited policy only: choose limited, or clear them.",
            field="allowed_hosts",
        )
    return canonical


def packages_hash(pip: Sequence[str], npm: Sequence[str], index_urls: Sequence[str]) -> str:
    """The key of a build: the packages and the indexes they come from ("" for none)."""
    if not pip and not npm:
        return ""
    content = json.dumps(
        {"pip": list(pip), "npm": list(npm), "indexes": list(index_urls)}, sort_keys=True
    )
    return hashlib.sha256(content.encode()).hexdigest()
