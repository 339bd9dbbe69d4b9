"""`xlnet preprocess --languages en,de`: keep only the documents written in these languages.

Each document is identified by py3langid (the naive Bayes model of langid.py, shipped inside its wheel: no
download, nothing fetched at run time) over its whole text, among the model's 140 language codes. Its
normalised probabilities are calibrated across lengths, so a threshold means the same for a tweet and a page: a
document is kept when its most probable language is one of ``--languages`` with at least
``--language-threshold`` (default 0.65, the threshold FineWeb applies to fastText lid.176's score). Otherwise
its removal reason is ``language:<the code identified>`` (a document of a language asked for but below the
threshold is named by that code too).

The model is loaded once per process, on first use (about a second), so each Beam worker loads it once; the
launcher loads it to check the codes given before any work.
"""
from __future__ import annotations

import functools
from typing import Optional

from tfrecords.record_config import ConfigError

DEFAULT_THRESHOLD = 0.65
STAGE = "language"


@functools.lru_cache(maxsize=1)
def _identifier():
    """py3langid's identifier with calibrated probabilities (the model inside its wheel)."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError:
        raise ConfigError("--languages needs py3langid, which the `pipeline` extra installs: "
                          "pip install \"xlnet-pretrain[pipeline]\"") from None
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def known_languages() -> tuple[str, ...]:
    """Every code the model identifies (ISO 639: en, de, zh, ...)."""
    return tuple(_identifier().labels)


def parse_languages(text: str) -> tuple[str, ...]:
    """``--languages``' value (comma-separated codes) as sorted codes; ConfigError naming the flag for none."""
    codes = sorted({code.strip() for code in text.split(",") if code.strip()})
    if not codes:
        raise ConfigError(f"--languages {text!r}: no language code named, e.g. --languages en,de")
    return tuple(codes)


def check_languages(codes: tuple[str, ...], threshold: float) -> None:
    """ConfigError naming the flag for a code the model does not know or a threshold outside [0, 1]."""
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError(f"--language-threshold must be in [0, 1], got {threshold}")
    known = known_languages()
    unknown = [code for code in codes if code not in known]
    if unknown:
        raise ConfigError(f"--languages: unknown language code {unknown[0]!r}; the codes known are "
                          f"{', '.join(sorted(known))}")


class LanguageFilter:
    """The language stage of one run: a document's removal reason, or None to keep it. Pickled to the workers
    with its settings only; the model is loaded there on first use."""

    def __init__(self, languages: tuple[str, ...], threshold: float = DEFAULT_THRESHOLD):
        self._languages = frozenset(languages)
        self._threshold = threshold

    def __call__(self, text: str) -> tuple[Optional[str], str]:
        """(removal reason or None, the text as kept): the shape of the other cleaning stages."""
        code, probability = _identifier().classify(text)
        if code in self._languages and probability >= self._threshold:
            return None, text
        return f"{STAGE}:{code}", text
