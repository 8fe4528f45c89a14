"""How the Sandbox panel writes a status sample: uptime, a short image, memory of its limit."""

from __future__ import annotations

from mosoo_core.runtime.pet_operations import SandboxStatus
from mosoo_web.pages.preview.sandbox_state import figures, memory_text, short_image, uptime_text


def test_uptime_reads_in_seconds_minutes_hours_then_days() -> None:
    assert [uptime_text(s) for s in (None, 5, 125, 3 * 3600 + 120, 3 * 86_400)] == [
        "",
        "5 s",
        "2 min",
        "3 h 2 min",
        "3 days",
    ]


def test_an_image_is_shortened_to_its_name_and_a_short_tag_or_hash() -> None:
    assert short_image("sha256:0123456789abcdef0123") == "0123456789ab"
    assert short_image("ghcr.io/mosoo/sandbox:0123456789abcdef") == "sandbox:0123456789ab"
    assert short_image("mosoo-sandbox:v3") == "mosoo-sandbox:v3"
    assert short_image("") == ""


def test_memory_shows_its_limit_when_there_is_one() -> None:
    assert memory_text(None, 1024) == ""
    assert memory_text(512 * 1024 * 1024, 2048 * 1024 * 1024) == "512.0 MiB of 2048.0 MiB"
    assert memory_text(2048, None) == "2.0 KiB"


def test_a_sandbox_without_a_container_shows_no_figures() -> None:
    shown = figures(SandboxStatus(state="hibernated"))
    assert (shown.state, shown.uptime, shown.image, shown.cpu, shown.memory) == (
        "hibernated",
        "",
        "",
        "",
        "",
    )
    running = figures(SandboxStatus(state="running", cpu_percent=12.345, uptime_seconds=61))
    assert (running.cpu, running.uptime) == ("12.3%", "1 min")
