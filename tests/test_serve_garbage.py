"""Whatever bytes a client sends, the protocol layer answers with a typed ``ClientError`` (its
connection then closes with that code) and never with another exception, which would end the
connection as ``internal_error``: a bug of ours. Property tests over the pieces that read client
bytes and JSON (``parse_frames``, ``client_json``, ``ping_token``, ``PcmFormat``); the end-to-end
cases (each beside a good stream) are in ``test_serve_bad_input.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("wyoming")

from serve_helpers import wyoming_frame

from asyncjit.audio import PcmFormat
from asyncjit.errors import AudioFormatError
from asyncjit.serve._errors import ClientError, client_json, ping_token
from asyncjit.serve._wyoming import parse_frames

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
FIELDS = ("type", "data", "data_length", "payload_length")


@st.composite
def frame_bytes(draw: st.DrawFn) -> bytes:
    """One Wyoming frame, well formed or not: a header of JSON values in the protocol's fields (or
    any JSON, or nesting too deep to decode, or raw bytes), then some bytes after it."""
    kind = draw(st.sampled_from(["fields", "json", "nested", "raw", "valid"]))
    if kind == "fields":
        header = {k: draw(JSON) for k in FIELDS if draw(st.booleans())}
        line = json.dumps(header).encode()
    elif kind == "json":
        line = json.dumps(draw(JSON)).encode()
    elif kind == "nested":
        line = draw(st.sampled_from([b"[", b'{"a":'])) * draw(st.integers(1, 200_000))
    elif kind == "raw":
        line = draw(st.binary(max_size=64)).replace(b"\n", b" ")
    else:
        return wyoming_frame(
            draw(st.sampled_from(["audio-chunk", "ping", "audio-start"])),
            draw(st.dictionaries(st.sampled_from(["rate", "width", "channels", "text"]), JSON, max_size=3)),
            draw(st.binary(max_size=16)),
        )
    return line + b"\n" + draw(st.binary(max_size=32))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frame_bytes(), min_size=1, max_size=4), st.booleans())
def test_parse_frames_takes_any_bytes(frames: list[bytes], end: bool) -> None:
    buf = bytearray(b"".join(frames))
    got, pos, error = parse_frames(buf, end_of_stream=end)
    assert error is None or isinstance(error, ClientError)
    assert 0 <= pos <= len(buf)
    for kind, data, start, stop in got:
        assert isinstance(kind, str) and isinstance(data, dict)
        assert 0 <= start <= stop <= pos


def test_json_nested_too_deeply_is_a_bad_frame_not_a_recursion_error() -> None:
    """``json.loads`` raises ``RecursionError`` (not ``ValueError``) past its nesting limit."""
    for raw in (b"[" * 100_000, b'{"type": "ping", "data": ' + b"[" * 100_000 + b"}"):
        with pytest.raises(ClientError) as info:
            client_json(raw, "a header")
        assert info.value.code == "bad_frame"
    frames, pos, error = parse_frames(bytearray(b"[" * 100_000 + b"\n"))
    assert (frames, pos) == ([], 0) and error is not None and error.code == "bad_frame"
    with pytest.raises(ClientError, match="not JSON"):
        client_json(b"\xff\xfe", "a text message")


@given(JSON)
def test_ping_tokens_are_json_scalars(value: Any) -> None:
    if isinstance(value, list | dict):
        with pytest.raises(ClientError) as info:
            ping_token(value)
        assert info.value.code == "bad_frame"
    else:
        assert ping_token(value) is value


@given(st.sampled_from([16000, 44100]) | JSON, st.just(1) | JSON, st.sampled_from([2, "s16le"]) | JSON)
def test_pcm_format_rejects_any_client_values_with_its_own_error(
    rate: Any, channels: Any, other: Any
) -> None:
    """A WebSocket ``start`` (rate, channels, format) and a Wyoming ``audio-start`` (rate, width,
    channels) from any JSON values: a format, or ``AudioFormatError`` (a list as the format is
    unhashable: that once escaped as ``TypeError``)."""
    for make in (
        lambda: PcmFormat(rate, channels, other).checked(),
        lambda: PcmFormat.from_width(rate, other, channels),
    ):
        try:
            fmt = make()
        except AudioFormatError:
            continue
        assert isinstance(fmt.rate, int) and isinstance(fmt.channels, int) and isinstance(fmt.encoding, str)
