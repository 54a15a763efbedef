"""``speech_timestamps`` against silero_vad's own ``get_speech_timestamps_from_probs``.

The package's module imports torch at the top, so we cannot import it. Instead we compile just
that one function from the installed ``silero_vad/utils_vad.py`` (it is plain Python) and run
it side by side with ours on the same probabilities; hand-worked cases pin the semantics too.
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import math
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncjit.models import SpeechSegment, speech_timestamps

Reference = Callable[..., list[dict[str, int]]]


def _package_function() -> Reference:
    """``get_speech_timestamps_from_probs`` compiled from the installed file, without torch."""
    spec = importlib.util.find_spec("silero_vad")  # locates the package; does not import it
    assert spec is not None and spec.submodule_search_locations
    source = Path(next(iter(spec.submodule_search_locations))) / "utils_vad.py"
    tree = ast.parse(source.read_text())
    fn = next(
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name == "get_speech_timestamps_from_probs"
    )
    namespace: dict[str, Any] = {"List": typing.List}  # noqa: UP006 - the package annotates with it
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(source), "exec"), namespace)
    ref: Reference = namespace["get_speech_timestamps_from_probs"]
    return ref


REFERENCE = _package_function()


def _ours(probs: list[float], **kw: Any) -> list[dict[str, int]]:
    return [s.as_dict() for s in speech_timestamps(probs, **kw)]


@st.composite
def _probabilities(draw: st.DrawFn) -> list[float]:
    """Runs of speech-like and silence-like chunks, with values near the thresholds too."""
    probs: list[float] = []
    for _ in range(draw(st.integers(0, 12))):
        level = draw(st.sampled_from([0.02, 0.3, 0.36, 0.45, 0.5, 0.55, 0.9, 0.999]))
        length = draw(st.integers(1, 40))
        jitter = draw(st.floats(0.0, 0.2))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        run = np.clip(level + rng.uniform(-jitter, jitter, length), 0.0, 1.0).astype(np.float32)
        probs += run.tolist()
    return probs


@settings(max_examples=400, deadline=None)
@given(
    probs=_probabilities(),
    sample_rate=st.sampled_from([8000, 16000]),
    threshold=st.sampled_from([0.3, 0.5, 0.7]),
    neg_threshold=st.sampled_from([None, 0.2, 0.35]),
    min_speech_duration_ms=st.sampled_from([0, 100, 250]),
    max_speech_duration_s=st.sampled_from([math.inf, 0.5, 1.0, 2.5]),
    min_silence_duration_ms=st.sampled_from([0, 100, 300]),
    speech_pad_ms=st.sampled_from([0, 30, 100]),
    use_max=st.booleans(),
    min_silence_at_max_speech=st.sampled_from([98, 30]),
    extra=st.integers(-255, 0),
)
def test_matches_the_package_algorithm(
    probs: list[float],
    sample_rate: int,
    threshold: float,
    neg_threshold: float | None,
    min_speech_duration_ms: int,
    max_speech_duration_s: float,
    min_silence_duration_ms: int,
    speech_pad_ms: int,
    use_max: bool,
    min_silence_at_max_speech: int,
    extra: int,
) -> None:
    """Same probabilities and parameters give the same segments, to the sample."""
    window = 512 if sample_rate == 16000 else 256
    kw: dict[str, Any] = {
        "sample_rate": sample_rate,
        "threshold": threshold,
        "neg_threshold": neg_threshold,
        "min_speech_duration_ms": min_speech_duration_ms,
        "max_speech_duration_s": max_speech_duration_s,
        "min_silence_duration_ms": min_silence_duration_ms,
        "speech_pad_ms": speech_pad_ms,
        "use_max_poss_sil_at_max_speech": use_max,
        "min_silence_at_max_speech": min_silence_at_max_speech,
        # the audio usually ends inside the last (zero-padded) chunk
        "audio_length_samples": max(0, len(probs) * window + extra) if probs else None,
    }
    want = REFERENCE(probs, **{("sampling_rate" if k == "sample_rate" else k): v for k, v in kw.items()})
    assert _ours(probs, **kw) == want


def test_defaults_match_the_package() -> None:
    """With every parameter left at its default, both agree on a realistic sequence."""
    rng = np.random.default_rng(0)
    probs = (
        np.concatenate(
            [
                rng.uniform(0, 0.1, 30),
                rng.uniform(0.7, 1, 60),
                rng.uniform(0, 0.3, 5),
                rng.uniform(0.7, 1, 20),
                rng.uniform(0, 0.1, 40),
            ]
        )
        .astype(np.float32)
        .tolist()
    )
    assert _ours(probs) == REFERENCE(probs)
    assert _ours(probs, sample_rate=8000) == REFERENCE(probs, sampling_rate=8000)


class TestHandWorked:
    def test_no_speech(self) -> None:
        assert speech_timestamps(np.zeros(100, np.float32)) == []
        assert speech_timestamps([]) == []

    def test_one_segment(self) -> None:
        """Speech in chunks 2..9 of 512 samples: starts at 1024, ends at the first silent chunk
        (5120) once 1600 samples (100 ms) of silence have passed; 480 samples (30 ms) of padding."""
        probs = [0.0, 0.0] + [1.0] * 8 + [0.0] * 6
        assert speech_timestamps(probs, 16000) == [SpeechSegment(544, 5600, 16000)]

    def test_too_short_is_dropped(self) -> None:
        """Seven chunks (3584 samples) are under 250 ms (4000 samples)."""
        assert speech_timestamps([0.0] + [1.0] * 7 + [0.0] * 6, 16000) == []

    def test_speech_to_the_end_is_bounded_by_the_audio(self) -> None:
        segs = speech_timestamps([0.0] * 4 + [0.9] * 20, 16000, audio_length_samples=24 * 512 - 100)
        assert segs == [SpeechSegment(4 * 512 - 480, 24 * 512 - 100, 16000)]

    def test_hysteresis_keeps_dips_above_neg_threshold(self) -> None:
        """0.4 is below the threshold but above threshold - 0.15: still speech."""
        probs = [0.9] * 10 + [0.4] * 10 + [0.9] * 10 + [0.0] * 10
        assert len(speech_timestamps(probs, 16000)) == 1

    def test_close_segments_split_the_gap(self) -> None:
        """Segments 512 samples apart (< 2 x 480 padding) meet in the middle of the gap (5376);
        the outer ends get the full padding (end 10752 + 480), clamped at the start (0)."""
        probs = [1.0] * 10 + [0.0] + [1.0] * 10 + [0.0] * 4
        segs = speech_timestamps(probs, 16000, min_silence_duration_ms=0)
        assert segs == [SpeechSegment(0, 5376, 16000), SpeechSegment(5376, 11232, 16000)]

    def test_seconds(self) -> None:
        seg = SpeechSegment(8000, 24000, 16000)
        assert (seg.start_s, seg.end_s, seg.duration_s) == (0.5, 1.5, 1.0)

    @pytest.mark.parametrize(
        ("probs", "kw", "match"),
        [
            (np.zeros((2, 5)), {}, "1-D"),
            ([0.5, float("nan")], {}, "NaN"),
            ([0.5], {"threshold": 1.5}, "threshold"),
            ([0.5], {"sample_rate": 0}, "sample_rate"),
            ([0.5], {"window_size_samples": 0}, "window_size_samples"),
        ],
    )
    def test_bad_arguments(self, probs: Any, kw: dict[str, Any], match: str) -> None:
        with pytest.raises(ValueError, match=match):
            speech_timestamps(probs, **kw)


@settings(max_examples=300, deadline=None)
@given(
    probs=_probabilities(),
    threshold=st.sampled_from([0.3, 0.5]),
    min_speech_duration_ms=st.sampled_from([0, 100, 250]),
    max_speech_duration_s=st.sampled_from([math.inf, 0.5, 2.5]),
    min_silence_duration_ms=st.sampled_from([0, 100, 300]),
    speech_pad_ms=st.sampled_from([0, 30, 100]),
    use_max=st.booleans(),
)
def test_tracker_edges_are_the_batch_segments(
    probs: list[float],
    threshold: float,
    min_speech_duration_ms: int,
    max_speech_duration_s: float,
    min_silence_duration_ms: int,
    speech_pad_ms: int,
    use_max: bool,
) -> None:
    """``SpeechTracker`` fed one probability at a time reports the segments ``speech_timestamps``
    finds: alternating start/end edges, one pair per segment, each within the pad of the batch's
    (the batch splits the gap between close neighbours; a live stream cannot see the next one)."""
    from asyncjit.models import SpeechTracker

    kw: dict[str, Any] = {
        "threshold": threshold,
        "min_speech_duration_ms": min_speech_duration_ms,
        "max_speech_duration_s": max_speech_duration_s,
        "min_silence_duration_ms": min_silence_duration_ms,
        "speech_pad_ms": speech_pad_ms,
        "use_max_poss_sil_at_max_speech": use_max,
    }
    batch = speech_timestamps(probs, 16000, **kw)
    tracker = SpeechTracker(16000, window_size_samples=512, **kw)
    edges = [e for p in probs for e in tracker.push(p)] + tracker.finish()
    assert [e.kind for e in edges] == ["start", "end"] * len(batch)
    pad = 16000 * speech_pad_ms / 1000
    for seg, start, end in zip(batch, edges[::2], edges[1::2], strict=True):
        assert abs(start.sample - seg.start) <= pad
        assert abs(end.sample - seg.end) <= pad
        assert start.sample <= end.sample


@settings(max_examples=200, deadline=None)
@given(
    probs=_probabilities(),
    max_speech_duration_s=st.sampled_from([math.inf, 0.5]),
    use_max=st.booleans(),
    cuts=st.lists(st.integers(0, 400), max_size=6),
)
def test_tracker_push_many_is_push_one_by_one(
    probs: list[float], max_speech_duration_s: float, use_max: bool, cuts: list[int]
) -> None:
    """``push_many`` over any split of the probabilities gives the edges (and the end) of
    ``push`` called per probability."""
    from asyncjit.models import SpeechTracker

    kw: dict[str, Any] = {
        "max_speech_duration_s": max_speech_duration_s,
        "use_max_poss_sil_at_max_speech": use_max,
    }
    one = SpeechTracker(16000, window_size_samples=512, **kw)
    expected = [(e.kind, e.sample) for p in probs for e in one.push(p)] + [
        (e.kind, e.sample) for e in one.finish()
    ]
    many = SpeechTracker(16000, window_size_samples=512, **kw)
    bounds = [0, *sorted(c for c in cuts if c < len(probs)), len(probs)]
    got = [(e.kind, e.sample) for a, b in itertools.pairwise(bounds) for e in many.push_many(probs[a:b])]
    got += [(e.kind, e.sample) for e in many.finish()]
    assert got == expected
    assert many.speeches == one.speeches


def test_tracker_reports_a_start_before_the_segment_ends() -> None:
    """A start is reported once the segment is long enough to be kept, not when it closes."""
    from asyncjit.models import SpeechTracker

    tracker = SpeechTracker(16000, window_size_samples=512)
    probs = [0.0] * 5 + [0.9] * 40 + [0.0] * 10
    reported = [(i, e.kind) for i, p in enumerate(probs) for e in tracker.push(p)]
    # 250 ms = 7.8 chunks of 32 ms: certain at chunk 12 (from chunk 5); silence from chunk 45 ends
    # it once it has lasted 100 ms (1,600 samples: 4 chunks later)
    assert reported == [(12, "start"), (49, "end")]
