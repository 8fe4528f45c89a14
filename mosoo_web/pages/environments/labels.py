"""How an environment's network policy, packages and their build read, on the Environments
pages and in the Preview environment picker."""

from __future__ import annotations

from reflex_components_radix.themes.base import LiteralAccentColor

from mosoo_core.environments import RevisionView

POLICY_CHOICES = (
    ("none", "No network", "The sandbox reaches nothing outside itself."),
    ("limited", "Limited", "Only the hosts you list, through Mosoo's egress proxy."),
    ("full", "Full internet", "Any host on the internet."),
)
# `full` stands out: the agent can reach (and send your data to) any host.
POLICY_COLORS: dict[str, LiteralAccentColor] = {"none": "gray", "limited": "blue", "full": "amber"}
FULL_WARNING = (
    "The agent can reach the whole internet: anything in its sandbox (files, variables, "
    "the conversation) can be sent to any host. Prefer Limited with the hosts it needs."
)


def _count(number: int, singular: str) -> str:
    return f"{number} {singular}" if number == 1 else f"{number} {singular}s"


def policy_label(revision: RevisionView) -> str:
    """ "No network", "Limited: 2 hosts" (+ package indexes), "Full internet"."""
    if revision.network_policy == "limited":
        label = "Limited: " + _count(len(revision.allowed_hosts), "host")
        return label + " + package indexes" if revision.allow_package_indexes else label
    if revision.network_policy == "full":
        return "Full internet"
    return "No network"


# A build's status (`EnvironmentBuild.status`) as its badge reads, in the badges' colors.
BUILD_LABELS = {"queued": "Queued", "building": "Building", "ready": "Ready", "failed": "Failed"}
BUILD_COLORS: dict[str, LiteralAccentColor] = {
    "queued": "gray",
    "building": "blue",
    "ready": "green",
    "failed": "red",
}


def packages_label(revision: RevisionView, build_status: str = "") -> str:
    """ "No packages", "2 packages · Building" (the build of the revision's packages)."""
    count = len(revision.pip) + len(revision.npm)
    if count == 0:
        return "No packages"
    label = _count(count, "package")
    return f"{label} · {BUILD_LABELS[build_status]}" if build_status in BUILD_LABELS else label
