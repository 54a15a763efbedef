"""Logging: structlog events routed through the standard library's ``logging``, as a library should.

Every asyncjit logger is ``get_logger("asyncjit.<part>")``: a structlog ``BoundLogger`` wrapping
the stdlib logger of that name, with its own processors (it never reads or changes the global
``structlog.configure``). So ``logging`` decides what is shown:

* By default nothing is configured and Python's last-resort handler prints warnings and errors
  to stderr; info and debug events cost one ``isEnabledFor`` check.
* ``logging.getLogger("asyncjit").setLevel(logging.INFO)`` plus any handler (``logging.basicConfig``)
  shows info events; ``logging.getLogger("asyncjit.compiler")`` narrows it to one part.
* Each record's message is ``event key=value ...``; the event as a dict is on the record as
  ``record.structlog`` (``{"event": ..., **fields}``) for JSON formatters (``JsonFormatter``
  here, which ``asyncjit --log-json`` uses) or structlog's ``ProcessorFormatter``.

``capture_events()`` collects the event dicts of a block, as ``structlog.testing.capture_logs`` does
for globally configured loggers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator, MutableMapping
from typing import Any

import structlog

__all__ = ["JsonFormatter", "capture_events", "get_logger"]

ROOT = "asyncjit"


def _to_stdlib(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The last processor: ``("event k=v ...",)`` for the message, the dict as ``extra``."""
    fields = " ".join(f"{k}={v}" for k, v in event_dict.items() if k != "event")
    message = f"{event_dict.get('event', '')} {fields}".rstrip()
    return (message,), {"extra": {"structlog": dict(event_dict)}}


_PROCESSORS: list[Any] = [structlog.stdlib.filter_by_level, _to_stdlib]


def get_logger(name: str) -> Any:
    """The structlog logger of stdlib logger ``name`` (``asyncjit.<part>``)."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=_PROCESSORS,
        wrapper_class=structlog.stdlib.BoundLogger,
        context_class=dict,
        cache_logger_on_first_use=True,
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger and the structlog event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "structlog", None) or {"event": record.getMessage()}
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        out = {"timestamp": f"{stamp}.{int(record.msecs):03d}Z", "level": record.levelname.lower()}
        out["logger"] = record.name
        out["event"] = event.get("event", "")
        out.update(event)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=repr)


class _Collect(logging.Handler):
    def __init__(self, events: list[dict[str, Any]]) -> None:
        super().__init__(logging.DEBUG)
        self.events = events

    def emit(self, record: logging.LogRecord) -> None:
        event = dict(getattr(record, "structlog", None) or {"event": record.getMessage()})
        event["log_level"] = record.levelname.lower()
        event["logger"] = record.name
        self.events.append(event)


@contextlib.contextmanager
def capture_events(level: int = logging.DEBUG) -> Iterator[list[dict[str, Any]]]:
    """The event dicts asyncjit logs inside the block (``{"event", "log_level", "logger", ...}``)."""
    events: list[dict[str, Any]] = []
    logger = logging.getLogger(ROOT)
    handler = _Collect(events)
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield events
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
