"""``asyncjit serve``: a streaming voice-activity service over Wyoming and WebSocket, on one ``StreamMux``.

``VadServer`` runs a ``ServedModel`` (``load_model("silero-vad")``) for many connections at once:
each connection is a reader task (parse, convert, submit chunks) and a responder task (await the
results in order, report speech edges); every connection's chunks go through the one mux, so
they are batched together. See ``docs/serve.md`` for the protocols, flags, metrics and operations.
Needs the ``serve`` extra (``websockets``, ``wyoming``, ``prometheus-client``, ``soxr``).
"""

from ._errors import CLOSE_CODES as CLOSE_CODES
from ._errors import ClientError as ClientError
from ._errors import ConnectionRefused as ConnectionRefused
from ._metrics import ServeMetrics as ServeMetrics
from ._model import ServedModel as ServedModel
from ._model import load_model as load_model
from ._server import ServeConfig as ServeConfig
from ._server import VadServer as VadServer
from ._server import parse_address as parse_address
from ._websocket import hello_message as hello_message

__all__ = [
    "CLOSE_CODES",
    "ClientError",
    "ConnectionRefused",
    "ServeConfig",
    "ServeMetrics",
    "ServedModel",
    "VadServer",
    "hello_message",
    "load_model",
    "parse_address",
]
