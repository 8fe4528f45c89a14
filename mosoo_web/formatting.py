"""How the console writes times and sizes: "5 min ago", "1.2 MiB"."""

from __future__ import annotations

from datetime import datetime


def relative_time(when: datetime, now: datetime) -> str:
    """ "just now", "5 min ago", "3 h ago", "2 days ago", then the date."""
    seconds = max(0, int((now - when).total_seconds()))
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86_400:
        return f"{seconds // 3600} h ago"
    days = seconds // 86_400
    if days < 30:
        return "1 day ago" if days == 1 else f"{days} days ago"
    return when.strftime("%Y-%m-%d")


def size_text(size: int) -> str:
    """A file size in B, KiB or MiB."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"
