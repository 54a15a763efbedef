"""Speech segments from per-chunk speech probabilities, as ``silero_vad.get_speech_timestamps`` finds them.

This is the state machine of ``get_speech_timestamps_from_probs`` in ``silero_vad/utils_vad.py``
(silero-vad 6.2), re-implemented in plain Python so that neither torch nor the package is needed.
It is kept step for step like the original, including its float/int arithmetic, so that given the
same probabilities it returns the same sample positions (``tests/test_speech_timestamps.py``
runs both on the same inputs).

Hysteresis: a segment starts at the first chunk with ``p >= threshold`` and ends once ``p <
neg_threshold`` has lasted ``min_silence_duration_ms``; segments shorter than
``min_speech_duration_ms`` are dropped; segments longer than ``max_speech_duration_s`` are cut at
the longest silence seen inside them; finally each is padded by ``speech_pad_ms`` on both sides
(neighbours closer than twice that split the gap between them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import numpy as np

from ..errors import InvalidArgumentError
from ._speech_tracker import SpeechTracker

__all__ = ["SpeechSegment", "speech_timestamps"]


@attrs.frozen
class SpeechSegment:
    """One stretch of speech: ``[start, end)`` in samples at ``sample_rate``.

    It indexes like the dicts ``get_speech_timestamps`` returns: ``seg["start"]``, ``seg["end"]``
    (in rounded seconds when made with ``return_seconds=True``, else in samples), ``dict(seg)``.
    """

    start: int
    end: int
    sample_rate: int
    seconds: tuple[float, float] | None = None  # (start, end) as return_seconds rounds them

    def __getitem__(self, key: str) -> int | float:
        if key not in ("start", "end"):
            raise KeyError(key)
        if self.seconds is not None:
            return self.seconds[0] if key == "start" else self.seconds[1]
        return self.start if key == "start" else self.end

    def keys(self) -> tuple[str, str]:
        return ("start", "end")

    def get(self, key: str, default: object = None) -> object:
        return self[key] if key in ("start", "end") else default

    @property
    def start_s(self) -> float:
        """Start in seconds."""
        return self.start / self.sample_rate

    @property
    def end_s(self) -> float:
        """End in seconds."""
        return self.end / self.sample_rate

    @property
    def duration_s(self) -> float:
        return (self.end - self.start) / self.sample_rate

    def as_dict(self) -> dict[str, int | float]:
        """``{"start": ..., "end": ...}``, the form ``get_speech_timestamps`` returns."""
        return {"start": self["start"], "end": self["end"]}


def speech_timestamps(
    probs: Sequence[float] | np.ndarray,
    sample_rate: int = 16000,
    *,
    threshold: float = 0.5,
    neg_threshold: float | None = None,
    min_speech_duration_ms: float = 250,
    max_speech_duration_s: float = math.inf,
    min_silence_duration_ms: float = 100,
    speech_pad_ms: float = 30,
    window_size_samples: int | None = None,
    audio_length_samples: int | None = None,
    min_silence_at_max_speech: float = 98,
    use_max_poss_sil_at_max_speech: bool = True,
    return_seconds: bool = False,
    time_resolution: int = 1,
    visualize_probs: bool = False,
    sampling_rate: int | None = None,
) -> list[SpeechSegment]:
    """Turn one speech probability per chunk into speech segments (in samples).

    Args:
        probs: one probability per chunk of ``window_size_samples`` samples, in order.
        sample_rate: the audio's rate; converts the ``_ms``/``_s`` parameters to samples.
        threshold: probabilities at or above it are speech.
        neg_threshold: while in speech, probabilities below it are silence; by default
            ``max(threshold - 0.15, 0.01)``.
        min_speech_duration_ms: shorter segments are dropped.
        max_speech_duration_s: longer segments are split (at the longest inner silence of at
            least ``min_silence_at_max_speech`` ms if ``use_max_poss_sil_at_max_speech``, else at the
            last one; at the current chunk when there is none).
        min_silence_duration_ms: silence that long ends a segment.
        speech_pad_ms: padding added to both sides of each segment.
        window_size_samples: samples per probability; 512 at 16 kHz and 256 at 8 kHz by default
            (the only values silero_vad uses).
        audio_length_samples: the audio's length, which bounds the last segment; by default
            ``len(probs) * window_size_samples``.
        min_silence_at_max_speech: see ``max_speech_duration_s``.
        use_max_poss_sil_at_max_speech: see ``max_speech_duration_s``.
        return_seconds: segments index (``seg["start"]``) in seconds rounded to
            ``time_resolution`` digits, as the package returns them; ``.start``/``.end`` stay samples.
        visualize_probs: plot the probabilities with matplotlib (as the package does with pandas).
        sampling_rate: the package's name for ``sample_rate``; given, it wins.

    Raises:
        InvalidArgumentError (a ValueError): ``probs`` is not 1-D or holds NaN, or a parameter is
            out of range.
    """
    if sampling_rate is not None:
        sample_rate = sampling_rate
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1:
        raise InvalidArgumentError(f"probs must be 1-D (one probability per chunk), got shape {p.shape}")
    if np.isnan(p).any():
        raise InvalidArgumentError("probs contains NaN; the VAD was fed NaN audio or a broken state")
    if sample_rate <= 0:
        raise InvalidArgumentError(f"sample_rate must be positive, got {sample_rate}")
    if window_size_samples is None:
        window_size_samples = 512 if sample_rate == 16000 else 256
    if window_size_samples <= 0:
        raise InvalidArgumentError(f"window_size_samples must be positive, got {window_size_samples}")
    if not 0.0 <= threshold <= 1.0:
        raise InvalidArgumentError(f"threshold must be within [0, 1], got {threshold}")
    if audio_length_samples is None:
        audio_length_samples = len(p) * window_size_samples

    tracker = SpeechTracker(
        sample_rate,
        threshold=threshold,
        neg_threshold=neg_threshold,
        min_speech_duration_ms=min_speech_duration_ms,
        max_speech_duration_s=max_speech_duration_s,
        min_silence_duration_ms=min_silence_duration_ms,
        speech_pad_ms=speech_pad_ms,
        window_size_samples=window_size_samples,
        min_silence_at_max_speech=min_silence_at_max_speech,
        use_max_poss_sil_at_max_speech=use_max_poss_sil_at_max_speech,
    )
    for prob in p.tolist():
        tracker.push(prob)
    tracker.finish(audio_length_samples)
    speeches = [dict(s) for s in tracker.speeches]
    speech_pad_samples = tracker.speech_pad_samples

    for i, speech in enumerate(speeches):
        if i == 0:
            speech["start"] = int(max(0, speech["start"] - speech_pad_samples))
        if i != len(speeches) - 1:
            silence = speeches[i + 1]["start"] - speech["end"]
            if silence < 2 * speech_pad_samples:
                speech["end"] += int(silence // 2)
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - silence // 2))
            else:
                speech["end"] = int(min(audio_length_samples, speech["end"] + speech_pad_samples))
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - speech_pad_samples))
        else:
            speech["end"] = int(min(audio_length_samples, speech["end"] + speech_pad_samples))

    if visualize_probs:
        _plot(p, window_size_samples / sample_rate)
    if not return_seconds:
        return [SpeechSegment(s["start"], s["end"], sample_rate) for s in speeches]
    length_s = audio_length_samples / sample_rate
    return [
        SpeechSegment(
            s["start"],
            s["end"],
            sample_rate,
            (
                max(round(s["start"] / sample_rate, time_resolution), 0),
                min(round(s["end"] / sample_rate, time_resolution), length_s),
            ),
        )
        for s in speeches
    ]


def _plot(probs: np.ndarray, step_s: float) -> None:
    """The speech probability over time, as the package's ``make_visualization`` draws it."""
    try:
        import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise ImportError("visualize_probs=True needs matplotlib: pip install matplotlib") from exc
    times = np.arange(len(probs)) * step_s
    _, ax = plt.subplots(figsize=(16, 8))
    ax.fill_between(times, probs, step="post")
    ax.set(xlim=(0, len(probs) * step_s), ylim=(0, 1.05), xlabel="seconds", ylabel="speech probability")
