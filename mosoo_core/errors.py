"""Typed domain errors; each front door maps them once (API codes, console toasts)."""

from __future__ import annotations


class MosooError(Exception):
    code = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(MosooError):
    code = "not_found"


class Conflict(MosooError):
    """A refused state change. `code` names the specific reason where callers act on it
    (`agent_not_published`, `readiness_blocked`, `idempotency_conflict`)."""

    code = "conflict"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code:
            self.code = code


class InvalidInput(MosooError):
    code = "invalid_request"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class FieldConflict(Conflict, InvalidInput):
    """A well-formed value that what is stored refuses (a name already taken, a field locked
    since the first publish): a conflict (409) that names its field like an input error, so
    a form shows it next to the input and an API caller knows the request itself was fine."""

    def __init__(self, message: str, field: str, code: str = "conflict") -> None:
        MosooError.__init__(self, message)
        self.field = field
        self.code = code


class Forbidden(MosooError):
    code = "forbidden"


class PayloadTooLarge(MosooError):
    code = "payload_too_large"


class Unauthenticated(MosooError):
    code = "unauthenticated"


class RateLimited(MosooError):
    code = "rate_limited"

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds
