"""Why a connection was closed: one code per cause, sent to the client before the socket closes.

A Wyoming client gets an ``error`` event (``wyoming.error.Error``: ``text`` and ``code``); a
WebSocket client gets ``{"type": "error", "code": ..., "message": ...}`` and then a close frame
with the WebSocket status of the table below and the code as its reason. Never a silent drop.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import JitError

__all__ = ["CLOSE_CODES", "ClientError", "ConnectionRefused", "client_json", "ping_token"]

CLOSE_CODES: dict[str, tuple[int, str]] = {
    # code: (WebSocket close status, what happened)
    "bad_frame": (1002, "the bytes are not a well-formed message of the protocol"),
    "bad_audio": (1007, "the audio format is not one the server converts (rate, width, channels)"),
    "too_large": (1009, "a message is larger than the 1 MB limit"),
    "no_audio_start": (1008, "audio arrived before audio-start"),
    "idle_timeout": (4000, "nothing arrived for the idle timeout"),
    "slow_reader": (4001, "the client did not read the server's events for the write timeout"),
    "server_full": (1013, "max_streams connections are open; try again later"),
    "shutdown": (1001, "the server is shutting down"),
    "internal_error": (1011, "the server failed on this connection"),
    "done": (1000, "the client closed the connection"),
}


class ClientError(JitError, ValueError):
    """The client broke the protocol or a limit; its connection is closed with ``code``."""

    def __init__(self, code: str, message: str) -> None:
        if code not in CLOSE_CODES:
            raise ValueError(f"unknown close code {code!r}; one of {sorted(CLOSE_CODES)}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ConnectionRefused(ClientError):
    """The server refused a new connection (``server_full``) or is shutting down."""


def client_json(raw: bytes | str, what: str) -> Any:
    """``raw`` (a header, data section or text message a client sent) decoded as JSON.

    Raises:
        ClientError: ``bad_frame`` when it is not JSON, is not UTF-8, or nests so deeply that the
            decoder gives up (``RecursionError``, not a ``ValueError``: ``[[[...`` of 100,000).
    """
    try:
        return json.loads(raw)
    except ValueError:
        raise ClientError("bad_frame", f"{what} is not JSON: {raw[:40]!r}") from None
    except RecursionError:
        raise ClientError("bad_frame", f"{what} nests too deeply to decode") from None


def ping_token(value: Any) -> str | int | float | bool | None:
    """A ping's ``text`` (Wyoming) or ``id`` (WebSocket), echoed in its pong: a JSON scalar.

    Raises:
        ClientError: ``bad_frame`` for an array or object (echoing one back would re-encode
            whatever structure a client chose, however deep).
    """
    if value is None or isinstance(value, str | int | float):
        return value
    raise ClientError(
        "bad_frame", f"a ping's token must be a string, number or null, got {type(value).__name__}"
    )
