"""Scheduler errors: defined with every other error in ``asyncjit/errors.py``, re-exported here."""

from __future__ import annotations

from ..errors import AdmissionTimeoutError as AdmissionTimeoutError
from ..errors import BacklogFullError as BacklogFullError
from ..errors import MuxClosedError as MuxClosedError
from ..errors import StepCancelledError as StepCancelledError
from ..errors import StreamBusyError as StreamBusyError
from ..errors import StreamClosedError as StreamClosedError
from ..errors import StreamIdleError as StreamIdleError

__all__ = [
    "AdmissionTimeoutError",
    "BacklogFullError",
    "MuxClosedError",
    "StepCancelledError",
    "StreamBusyError",
    "StreamClosedError",
    "StreamIdleError",
]
