"""Thread titles made from a first message."""

from __future__ import annotations

from sqlmodel import Session, select

from mosoo_core.tables.sessions import AgentSession, SessionRun

TITLE_MAX_CHARS = 80


def auto_title(text: str) -> str:
    """A title from a first message: its first non-empty line, whitespace collapsed, at most
    80 characters, cut at a word boundary with "…" when longer."""
    line = next((" ".join(part.split()) for part in (text or "").splitlines() if part.strip()), "")
    return clip_at_word(line, TITLE_MAX_CHARS)


def clip_at_word(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    cut = head.rfind(" ")
    # A single very long word is cut where it must be; otherwise at the last whole word.
    if cut >= limit // 3:
        head = head[:cut]
    return head.rstrip(" ,;:.-") + "…"


def title_untitled_thread(db: Session, session: AgentSession, text: str) -> None:
    """Give a thread without a title one from its first message (call it before the
    message's run is added: a thread with an earlier run keeps its empty title)."""
    if session.title:
        return
    earlier = db.exec(
        select(SessionRun.id).where(SessionRun.session_id == session.id).limit(1)
    ).first()
    if earlier is not None:
        return
    title = auto_title(text)
    if title:
        session.title = title
        db.add(session)
