"""Structured logging: one event name per line, ids as fields, secrets never."""

from __future__ import annotations

import logging
import sys

import structlog
from opentelemetry import trace

from mosoo_core import tracing


def configure_logging(process: str, level: str = "INFO", json: bool = True) -> None:
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=level.upper())
    # Every process that configures its logs is one whose spans may be exported; only then
    # do its lines look for a current span (off, a line pays nothing for tracing).
    tracing.configure(process)
    traced: list[structlog.typing.Processor] = [add_trace_ids] if tracing.enabled() else []
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *traced,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.bind_contextvars(process=process)


def add_trace_ids(
    _logger: object, _method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """`trace_id` and `span_id` of the current span, when there is a valid one."""
    span = trace.get_current_span().get_span_context()
    if span.is_valid:
        event.setdefault("trace_id", trace.format_trace_id(span.trace_id))
        event.setdefault("span_id", trace.format_span_id(span.span_id))
    return event


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
