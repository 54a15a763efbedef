"""Real models built on the ``Tensor`` API, and the audio helpers they share.

``asyncjit.models.silero_vad`` rebuilds the Silero VAD network with the weights published in the
``silero-vad`` package. The helpers here read WAV files, validate chunks with typed errors, and
turn per-chunk speech probabilities into speech segments like ``silero_vad.get_speech_timestamps``.
Importing this package needs neither ``onnx`` nor ``silero-vad``; loading weights does.
"""

from ._audio import SAMPLE_RATES as SAMPLE_RATES
from ._audio import AudioFormatError as AudioFormatError
from ._audio import check_chunk as check_chunk
from ._audio import check_sample_rate as check_sample_rate
from ._audio import chunk_samples as chunk_samples
from ._audio import context_samples as context_samples
from ._audio import read_audio as read_audio
from ._audio import read_wav as read_wav
from ._ort import OnnxRuntimeVad as OnnxRuntimeVad
from ._speech_tracker import SpeechEdge as SpeechEdge
from ._speech_tracker import SpeechTracker as SpeechTracker
from ._timestamps import SpeechSegment as SpeechSegment
from ._timestamps import speech_timestamps as speech_timestamps

__all__ = [
    "SAMPLE_RATES",
    "AudioFormatError",
    "OnnxRuntimeVad",
    "SpeechEdge",
    "SpeechTracker",
    "SpeechSegment",
    "check_chunk",
    "check_sample_rate",
    "chunk_samples",
    "context_samples",
    "read_audio",
    "read_wav",
    "speech_sample_path",
    "speech_timestamps",
]


def speech_sample_path() -> str:
    """The path of ``asyncjit/data/speech_16k.wav``: 7.7 s of synthetic English speech with pauses
    (16 kHz mono 16-bit; how it was made is in ``asyncjit/data/README.md``)."""
    from importlib import resources

    return str(resources.files("asyncjit") / "data" / "speech_16k.wav")
