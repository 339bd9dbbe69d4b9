"""What an exported SavedModel accepts (``ExportConfig``) and the error an export setting that
cannot produce one raises: TensorFlow-free, so that `xlnet export --help` shows the defaults without
importing TensorFlow (trainer/serving/saved_model.py builds the SavedModel)."""
from __future__ import annotations

import dataclasses

from tfrecords.errors import UsageError
from trainer.configs.finetuning import MAX_SEGMENTS


class ExportError(UsageError):
    """A model directory or export setting that cannot produce a SavedModel."""


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """What the exported model accepts: sequence length, masked-prediction k, text casing."""

    max_length: int = 128
    top_k: int = 5
    uncased: bool = False
    # Segments of max_length a text may span; more than 1 reads them with the Transformer-XL
    # recurrence (trainer/serving/segment_reading.py), each seeing the last mem_len states before it.
    max_segments: int = 1
    mem_len: int = 0  # only read with max_segments > 1
    # The generate signature's cache (trainer/serving/text_generation_signatures.py); 0: its default.
    generation_mem_len: int = 0

    def __post_init__(self) -> None:
        if self.max_length < 3:
            raise ExportError(f"--max-length must be at least 3 (<sep>, <sep>, <cls>), got {self.max_length}")
        if self.top_k < 1:
            raise ExportError(f"--top-k must be at least 1, got {self.top_k}")
        if not 1 <= self.max_segments <= MAX_SEGMENTS:
            raise ExportError(f"--max-segments must be in 1..{MAX_SEGMENTS} (as fine-tuning's max_segments: each "
                              f"segment is one more pass per text, and encode_text returns [batch, segments, "
                              f"max_length, d_model]), got {self.max_segments}")
        if self.mem_len < 0:
            raise ExportError(f"--mem-len must be at least 0, got {self.mem_len}")
        if self.max_segments > 1 and self.mem_len == 0:
            raise ExportError(f"--max-segments {self.max_segments} reads a text with memory, but --mem-len is 0: "
                              f"pass --mem-len M (e.g. {self.max_length}, one whole segment)")
        if self.max_segments == 1 and self.mem_len:
            raise ExportError(f"--mem-len {self.mem_len} needs --max-segments above 1 (one segment reads no memory)")
        if self.generation_mem_len < 0:
            raise ExportError(f"--generation-mem-len must be at least 0 (0: the default), "
                              f"got {self.generation_mem_len}")
