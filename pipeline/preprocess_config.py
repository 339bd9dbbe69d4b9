"""The configuration of `xlnet preprocess`: one frozen dataclass, stored whole in the manifest."""
from __future__ import annotations

from dataclasses import dataclass, fields

from pipeline.cleaning import LANGUAGE, FilterRules, check_filter_rules, check_names
from pipeline.language_id import DEFAULT_THRESHOLD, check_languages
from pipeline.corpus import INPUT_FORMATS
from pipeline.near_duplicates import MinHashSettings
from tfrecords.record_config import ConfigError, RecordConfig

COMPRESSIONS = ("none", "gzip")
MINHASH_FIELDS = ("shingle_words", "minhash_bands", "minhash_rows", "min_jaccard")


@dataclass(frozen=True, kw_only=True)
class PreprocessConfig(RecordConfig):
    """Everything that determines the bytes written (plus where to read and write).

    The record and mask fields (seq_len, reuse_len, num_predict, ...) are RecordConfig's
    (tfrecords/record_config.py); the fields below say where the text comes from, how it is
    split into streams and shards, and where the records go.
    """

    inputs: tuple[str, ...]
    output: str
    vocab: str
    bi_data: bool = True
    use_eod: bool = True
    uncased: bool = False
    num_streams: int = 128
    num_shards: int = 8
    valid_shards: int = 1
    valid_fraction: float = 0.05
    seed: int = 0
    compression: str = "none"
    input_format: str = "auto"
    text_field: str = "text"
    max_line_bytes: int = 1 << 20
    # --filters (pipeline/cleaning.py), in their running order; empty: no cleaning, and the manifest
    # does not name the field, so that a run without it writes the bytes it always did.
    filters: tuple[str, ...] = ()
    # --filter-rules: (filter.threshold, value) pairs, sorted, changed from the anchors' defaults
    # (pipeline/cleaning.py's FilterRules); in the manifest only when given.
    filter_rules: tuple[tuple[str, int | float], ...] = ()
    # --languages (pipeline/language_id.py): the codes kept, sorted; empty: no language stage, and the manifest
    # names neither field. --language-threshold: the least probability of the language identified.
    languages: tuple[str, ...] = ()
    language_threshold: float = DEFAULT_THRESHOLD
    # --dedup (pipeline/cleaning.py), likewise left out of the manifest when empty.
    dedup: tuple[str, ...] = ()
    # --minhash (near-duplicate settings, pipeline/near_duplicates.py's MinHashSettings): in the manifest only
    # under --dedup near.
    shingle_words: int = 5
    minhash_bands: int = 14
    minhash_rows: int = 8
    min_jaccard: float = 0.7
    # --removed DIR: where the audit of the removed documents is published (one JSON-lines file per shard);
    # empty: none, and the manifest does not name it.
    removed: str = ""

    def record_config(self) -> RecordConfig:
        """The record and mask fields alone."""
        return RecordConfig(**{f.name: getattr(self, f.name) for f in fields(RecordConfig)})

    def minhash_settings(self) -> MinHashSettings:
        return MinHashSettings(shingle_words=self.shingle_words, bands=self.minhash_bands, rows=self.minhash_rows,
                               min_jaccard=self.min_jaccard, seed=self.seed)

    def filter_rules_of(self) -> FilterRules:
        """The filters' thresholds: the defaults with --filter-rules' changes."""
        return FilterRules.of(self.filter_rules)

    def num_shards_of(self, split: str) -> int:
        return self.num_shards if split == "train" else self.valid_shards

    def validate(self) -> None:
        """Raises ConfigError naming the flag; called before any work is done."""
        super().validate()
        if not self.inputs:
            raise ConfigError("--input: give at least one corpus glob")
        if self.num_streams < 1:
            raise ConfigError(f"--num-streams must be >= 1, got {self.num_streams}")
        for flag, shards in (("--num-shards", self.num_shards), ("--valid-shards", self.valid_shards)):
            if not 1 <= shards <= self.num_streams:
                raise ConfigError(f"{flag} must be in [1, --num-streams={self.num_streams}] "
                                  f"(each stream lives in one shard), got {shards}")
        if not 0.0 <= self.valid_fraction < 1.0:
            raise ConfigError(f"--valid-fraction must be in [0, 1), got {self.valid_fraction}")
        if self.compression not in COMPRESSIONS:
            raise ConfigError(f"--compression must be one of {', '.join(COMPRESSIONS)}, got {self.compression!r}")
        if self.input_format not in INPUT_FORMATS:
            raise ConfigError(f"--input-format must be one of {', '.join(INPUT_FORMATS)}")
        if self.max_line_bytes < 1:
            raise ConfigError(f"--max-line-bytes must be positive, got {self.max_line_bytes}")
        check_names("--filters", self.filters)
        check_filter_rules(self.filter_rules, self.filters, "--filter-rules")
        if self.languages:  # loads the language model (about a second): only when it is asked for
            check_languages(self.languages, self.language_threshold)
        check_names("--dedup", self.dedup)
        self.minhash_settings()  # its ranges, named by --minhash's keys
        if self.removed and not (self.read_stages or self.dedup):
            raise ConfigError(f"--removed {self.removed}: nothing is removed without --languages, --filters or "
                              "--dedup")

    @property
    def read_stages(self) -> tuple[str, ...]:
        """The cleaning stages each document passes as it is read, in their order: language, then the filters."""
        return ((LANGUAGE,) if self.languages else ()) + self.filters

    def removed_name(self, split: str, shard: int) -> str:
        """The --removed file of a shard's removed documents."""
        return f"removed-{split}-{shard:05d}-of-{self.num_shards_of(split):05d}.jsonl"

    @property
    def file_suffix(self) -> str:
        return ".tfrecord.gz" if self.compression == "gzip" else ".tfrecord"

    def shard_name(self, split: str, shard: int) -> str:
        return f"{split}-{shard:05d}-of-{self.num_shards_of(split):05d}{self.file_suffix}"

    def to_dict(self) -> dict:
        values = {**super().to_dict(), "inputs": list(self.inputs), "filters": list(self.filters),
                  "filter_rules": dict(self.filter_rules), "dedup": list(self.dedup), "languages": list(self.languages)}
        for name in ("filters", "filter_rules", "dedup", "removed", "languages"):
            if not values[name]:
                del values[name]
        if not self.languages:
            del values["language_threshold"]
        if "near" not in self.dedup:
            for name in MINHASH_FIELDS:
                del values[name]
        return values
