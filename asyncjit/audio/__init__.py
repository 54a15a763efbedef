"""Audio in: files in any common format (soundfile) and conversion to what a model takes (soxr).

``load_audio`` reads a whole file; ``open_audio`` opens one for block reads (``wav_chunks`` in
``asyncjit.scheduler`` reads ahead with it); ``AudioConverter`` turns blocks of any width,
channel count and rate into float32 mono at a model's rate, for files and network audio alike;
``PcmConverter`` feeds it raw PCM bytes as a socket delivers them (``asyncjit serve``).
Needs the ``audio`` extra (``pip install 'asyncjit[audio]'``): soundfile and soxr.
"""

from ._convert import RESAMPLE_QUALITY as RESAMPLE_QUALITY
from ._convert import AudioConverter as AudioConverter
from ._convert import resample as resample
from ._convert import to_float32 as to_float32
from ._convert import to_mono as to_mono
from ._files import AudioClip as AudioClip
from ._files import AudioInfo as AudioInfo
from ._files import audio_info as audio_info
from ._files import check_finite as check_finite
from ._files import load_audio as load_audio
from ._files import open_audio as open_audio
from ._pcm import PCM_ENCODINGS as PCM_ENCODINGS
from ._pcm import PcmConverter as PcmConverter
from ._pcm import PcmFormat as PcmFormat

__all__ = [
    "PCM_ENCODINGS",
    "PcmConverter",
    "PcmFormat",
    "RESAMPLE_QUALITY",
    "AudioClip",
    "AudioConverter",
    "AudioInfo",
    "audio_info",
    "check_finite",
    "load_audio",
    "open_audio",
    "resample",
    "to_float32",
    "to_mono",
]
