"""``SpeechTracker``: the hysteresis of ``speech_timestamps``, fed one probability at a time.

``speech_timestamps`` runs this state machine over a whole recording and then pads the segments;
a live stream (``asyncjit serve``) pushes each chunk's probability as it arrives and gets the
edges of speech as soon as they are certain:

- a **start** once the segment can no longer be dropped as shorter than ``min_speech_duration_ms``
  (its earliest possible end is far enough from its start), stamped at the segment's start minus
  ``speech_pad_ms``;
- an **end** when the segment is closed (silence lasted ``min_silence_duration_ms``, a
  ``max_speech_duration_s`` split, or ``finish``), stamped at its end plus ``speech_pad_ms``.

So a live stream reports exactly the segments ``speech_timestamps`` finds for the same
probabilities; only the padding between neighbours closer than twice the pad differs (the batch
splits the gap, a live stream cannot see the next segment yet): at most ``speech_pad_ms``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import attrs

__all__ = ["SpeechEdge", "SpeechTracker"]


@attrs.frozen
class SpeechEdge:
    """Where speech starts (``kind == "start"``) or ends (``"end"``), in samples at ``sample_rate``."""

    kind: str
    sample: int
    sample_rate: int

    @property
    def seconds(self) -> float:
        return self.sample / self.sample_rate

    @property
    def ms(self) -> int:
        """Whole milliseconds (Wyoming's ``voice-started``/``voice-stopped`` timestamps)."""
        return self.sample * 1000 // self.sample_rate


class SpeechTracker:
    """The state machine of ``get_speech_timestamps_from_probs`` (silero-vad 6.2), one chunk at a time.

    Args: as ``speech_timestamps`` (``window_size_samples`` is required here).

    ``push(p)`` returns the edges that chunk made certain; ``finish(audio_length)`` closes an open
    segment. ``speeches`` holds the closed segments unpadded, as the original builds them.
    """

    def __init__(
        self,
        sample_rate: int,
        *,
        window_size_samples: int,
        threshold: float = 0.5,
        neg_threshold: float | None = None,
        min_speech_duration_ms: float = 250,
        max_speech_duration_s: float = math.inf,
        min_silence_duration_ms: float = 100,
        speech_pad_ms: float = 30,
        min_silence_at_max_speech: float = 98,
        use_max_poss_sil_at_max_speech: bool = True,
    ) -> None:
        # The names and the float arithmetic follow utils_vad.py on purpose (see _timestamps.py).
        self.sample_rate = sample_rate
        self.window = window_size_samples
        self.threshold = threshold
        self.neg_threshold = max(threshold - 0.15, 0.01) if neg_threshold is None else neg_threshold
        self.min_speech_samples = sample_rate * min_speech_duration_ms / 1000
        self.speech_pad_samples = sample_rate * speech_pad_ms / 1000
        self.max_speech_samples = (
            sample_rate * max_speech_duration_s - window_size_samples - 2 * self.speech_pad_samples
        )
        self.min_silence_samples = sample_rate * min_silence_duration_ms / 1000
        self.min_silence_samples_at_max_speech = sample_rate * min_silence_at_max_speech / 1000
        self.use_max_poss_sil = use_max_poss_sil_at_max_speech
        self.speeches: list[dict[str, int]] = []
        self._i = 0
        self._triggered = False
        self._current: dict[str, int] = {}
        self._temp_end = 0  # where a possible end of speech began (silence is tolerated for a while)
        self._prev_end = self._next_start = 0  # split points for segments that reach the maximum length
        self._possible_ends: list[tuple[int, int]] = []
        self._announced = False  # a start edge was reported for the open segment
        self._reported_start = 0
        self._last_end = 0  # the padded end of the last reported segment (starts never go before it)
        self._edges: list[SpeechEdge] = []

    @property
    def in_speech(self) -> bool:
        """A start was reported and its end was not yet."""
        return self._announced

    def push(self, prob: float) -> list[SpeechEdge]:
        """Add the next chunk's probability; return the edges now certain (usually none)."""
        self._edges = []
        self._step(prob)
        cur = self._current
        if cur and not self._announced:
            # the earliest end the open segment can still get: its tentative end, else the next chunk
            earliest_end = self._temp_end if self._temp_end else self.window * self._i
            if earliest_end - cur["start"] > self.min_speech_samples:
                self._announce(cur["start"])
        return self._edges

    def push_many(self, probs: Iterable[float]) -> list[SpeechEdge]:
        """``push`` each probability in order; all their edges. For a server answering many
        chunks at once: a chunk of silence outside a segment costs one comparison (``_step``
        would only count it: no segment is open while not triggered)."""
        edges: list[SpeechEdge] = []
        threshold = self.threshold
        for prob in probs:
            if not self._triggered and prob < threshold:
                self._i += 1
                continue
            edges += self.push(prob)
        return edges

    def finish(self, audio_length_samples: int | None = None) -> list[SpeechEdge]:
        """The end of the audio (default: after the last chunk): close the open segment."""
        self._edges = []
        length = self.window * self._i if audio_length_samples is None else audio_length_samples
        cur = self._current
        if cur and length - cur["start"] > self.min_speech_samples:
            cur["end"] = length
            self._close(cur, length)
        elif self._announced:
            # The start was reported assuming the audio fills its last chunk; it ended inside
            # it, leaving the segment just too short for ``speeches``. Never leave a start open.
            end = min(int(length + self.speech_pad_samples), length)
            self._edges.append(SpeechEdge("end", max(end, self._reported_start), self.sample_rate))
            self._announced = False
        self._current = {}
        self._triggered = False
        return self._edges

    def _announce(self, start: int) -> None:
        padded = max(0, int(start - self.speech_pad_samples), self._last_end)
        self._edges.append(SpeechEdge("start", padded, self.sample_rate))
        self._announced = True
        self._reported_start = padded

    def _close(self, segment: dict[str, int], limit: int | None = None) -> None:
        """Append a finished segment and report its end (and its start, if not yet reported)."""
        self.speeches.append(segment)
        if not self._announced:
            self._announce(segment["start"])
        end = int(segment["end"] + self.speech_pad_samples)
        if limit is not None:
            end = min(end, limit)
        end = max(end, self._reported_start)  # a start pushed past its neighbour's padded end
        self._edges.append(SpeechEdge("end", end, self.sample_rate))
        self._last_end = end
        self._announced = False

    def _step(self, prob: float) -> None:
        """One iteration of the original loop (kept step for step; see the module doc)."""
        cur_sample = self.window * self._i
        self._i += 1

        # speech came back after a tentative end: remember that silence as a split point
        if prob >= self.threshold and self._temp_end:
            sil_dur = cur_sample - self._temp_end
            if sil_dur > self.min_silence_samples_at_max_speech:
                self._possible_ends.append((self._temp_end, sil_dur))
            self._temp_end = 0
            if self._next_start < self._prev_end:
                self._next_start = cur_sample

        if prob >= self.threshold and not self._triggered:
            self._triggered = True
            self._current["start"] = cur_sample
            return

        if self._triggered and cur_sample - self._current["start"] > self.max_speech_samples:
            current = self._current
            if self.use_max_poss_sil and self._possible_ends:
                self._prev_end, dur = max(self._possible_ends, key=lambda e: e[1])
                current["end"] = self._prev_end
                self._current = {}
                self._close(current)
                self._next_start = self._prev_end + dur
                if self._next_start < self._prev_end + cur_sample:  # kept as written in utils_vad.py
                    self._current["start"] = self._next_start
                else:
                    self._triggered = False
                self._prev_end = self._next_start = self._temp_end = 0
                self._possible_ends = []
            elif self._prev_end:
                current["end"] = self._prev_end
                self._current = {}
                self._close(current)
                if self._next_start < self._prev_end:
                    self._triggered = False
                else:
                    self._current["start"] = self._next_start
                self._prev_end = self._next_start = self._temp_end = 0
                self._possible_ends = []
            else:
                current["end"] = cur_sample
                self._current = {}
                self._close(current)
                self._prev_end = self._next_start = self._temp_end = 0
                self._triggered = False
                self._possible_ends = []
                return

        if prob < self.neg_threshold and self._triggered:
            if not self._temp_end:
                self._temp_end = cur_sample
            sil_dur_now = cur_sample - self._temp_end
            if not self.use_max_poss_sil and sil_dur_now > self.min_silence_samples_at_max_speech:
                self._prev_end = self._temp_end
            if sil_dur_now < self.min_silence_samples:
                return
            current = self._current
            current["end"] = self._temp_end
            self._current = {}
            if current["end"] - current["start"] > self.min_speech_samples:
                self._close(current)
            self._prev_end = self._next_start = self._temp_end = 0
            self._triggered = False
            self._possible_ends = []
