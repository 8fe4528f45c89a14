"""What tracing costs when it is off (no `OTEL_EXPORTER_OTLP_ENDPOINT`), the default.

    .venv/bin/python bench/tracing.py [-n 200000]

Off, the hot paths pay only for a check: each event batch control ingests and each run the
worker dispatches asks `tracing.enabled()`, and `plan_boot` asks `tracing.traceparent()`
once per run. Log lines look for a current span (`logs.add_trace_ids`) only in a process
that exports. (a) renders the same JSON log line with and without that processor, turn
about, as a ratio: what an exporting process's lines pay, and what an off one is spared;
(b) and (c) time the per-batch and per-run checks on their own, in nanoseconds.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)

import structlog  # noqa: E402

from mosoo_core import tracing  # noqa: E402
from mosoo_core.logs import add_trace_ids  # noqa: E402


def _logger(with_trace_ids: bool) -> structlog.typing.FilteringBoundLogger:
    processors: list[structlog.typing.Processor] = [structlog.contextvars.merge_contextvars]
    if with_trace_ids:
        processors.append(add_trace_ids)
    processors += [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.JSONRenderer(),
    ]
    return structlog.wrap_logger(  # type: ignore[no-any-return]
        structlog.PrintLogger(file=io.StringIO()),
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(20),
    )


def _per_call_ns(call: Callable[[], object], n: int) -> float:
    started = time.perf_counter_ns()
    for _ in range(n):
        call()
    return (time.perf_counter_ns() - started) / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=200_000, help="calls per measurement")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    assert not tracing.enabled()
    plain, traced = _logger(False), _logger(True)

    def line(logger: structlog.typing.FilteringBoundLogger) -> Callable[[], object]:
        return lambda: logger.info("run.dispatched", run_id="01J0000000", seconds=0.412)

    without, with_ids = [], []
    for round_ in range(args.rounds):  # turn about, the order alternating each round
        pair = [(plain, without), (traced, with_ids)]
        for logger, into in pair if round_ % 2 == 0 else reversed(pair):
            into.append(_per_call_ns(line(logger), args.n // 10))
    a, b = statistics.median(without), statistics.median(with_ids)
    print(f"tracing off, {args.rounds} rounds turn about, medians")
    print(f"(a) JSON log line without the trace-id processor   {a:8.0f} ns")
    print(f"    JSON log line with it (no span: nothing added)  {b:8.0f} ns")
    print(f"    ratio with / without                            {b / a:8.2f}x")
    enabled = statistics.median(_per_call_ns(tracing.enabled, args.n) for _ in range(3))
    header = statistics.median(_per_call_ns(tracing.traceparent, args.n) for _ in range(3))
    print(f"(b) tracing.enabled(), per ingested batch and run   {enabled:8.0f} ns")
    print(f"(c) tracing.traceparent(), once per run (plan_boot) {header:8.0f} ns")


if __name__ == "__main__":
    main()
