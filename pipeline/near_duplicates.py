"""Exact and near-duplicate detection for corpus cleaning (issue 46): document keys, MinHash signatures, LSH bands,
clusters and the copy kept, as pure functions the pipeline's dedup stages call.

- **Exact duplicates** share :func:`exact_key`: a hash of the document's text as :func:`dedup_text` simplifies
  it (Unicode NFKC, case folded, punctuation dropped, runs of spaces one space).
- **Near duplicates** (MinHash LSH, as datatrove's): each document's shingles are its runs of
  ``shingle_words`` simplified words; its signature holds, for each of ``bands x rows`` hash functions, the
  least hash of its shingles; two documents whose signatures agree on every row of one band are a
  candidate pair (:func:`band_keys`; the pipeline packs the bands as rows of :func:`band_rows`, buckets
  them by a hash of the band and finds equal ones with :func:`equal_row_groups`, so a worker holds one
  bucket's bands, never the corpus). A candidate pair counts as duplicates when the signatures'
  agreement, the estimated Jaccard similarity of the shingle sets, is at least ``min_jaccard``. With 14
  bands of 8 rows a pair at Jaccard 0.85 shares a band with probability 0.988, a pair at 0.5 with 0.053;
  the estimate over 112 hashes then keeps a pair below 0.5 from passing 0.7 (fewer than 1 in 10^4).
- **Duplicate lines** (``--dedup lines``, C4's line dedup across the corpus) share :func:`line_hash`: a hash of the
  line as C4 compares lines (its surrounding spaces stripped, lower-cased); :func:`line_hashes` gives a document's
  distinct ones.
- **Clusters** are the connected components of the duplicate pairs (:class:`Clusters`, a union-find over
  the pairs only); the copy kept in each is the one with the least :func:`keep_rank`, a seeded hash of its
  id, never the order documents arrive in, so every runner and worker count keeps the same one.

Hashes: each word is hashed with BLAKE2b (8 bytes, little-endian, keyed by the seed); a shingle's hash mixes its
words' hashes in order (``mixed = mixed * GOLDEN + rotl(word, 7 * position mod 64)`` mod 2^64, from 0); the
``bands x rows`` functions are multiply-add hashes modulo 2^64 with odd multipliers drawn from the seed; a
signature row is the least over the shingles. Every value is a function of the text and the seed only
(tests/pipeline/test_near_duplicates.py computes them so, word by word, and checks these functions against it).
How, for speed (signatures are most of ``--dedup near``'s cost): a process keeps its words' hashes across
documents (bounded, :data:`WORD_CACHE_WORDS`), a shingle's mixing is one table of terms per document (per batch
under :func:`signatures_of`), the hash functions are drawn once per process, and :func:`signatures_of` signs a
batch of documents in a few NumPy calls where one document alone costs some 15 calls on ~100 shingles.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import re
import unicodedata
from typing import Iterable, Mapping, Sequence

import numpy as np

from tfrecords.record_config import ConfigError

NON_WORD = re.compile(r"[^\w\s]+")
SPACES = re.compile(r"\s+")
WORD = re.compile(r"\w+")
MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)
GOLDEN = 0x9E3779B97F4A7C15  # the shingle mixing's odd multiplier
# Words whose hashes one process keeps across documents (one seed's): about 135 bytes a word (the word,
# its digest, the slot) measured on the bundled corpus, some 17 MiB at most.
WORD_CACHE_WORDS = 1 << 17
_word_cache: tuple[int, dict[str, bytes]] = (0, {})
# Shingles hashed at once by the signatures: at most 112 x 4096 x 8 bytes (3.7 MB) of hash values alive, for any
# document and any batch of them (signatures_of).
SHINGLES_PER_CHUNK = 4096


@dataclasses.dataclass(frozen=True)
class MinHashSettings:
    """MinHash LSH settings (datatrove's defaults: 5-word shingles, 14 bands of 8 rows)."""

    shingle_words: int = 5
    bands: int = 14
    rows: int = 8
    min_jaccard: float = 0.7
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("shingle_words", "bands", "rows"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--minhash {name} must be at least 1, got {getattr(self, name)}")
        if not 0.0 <= self.min_jaccard <= 1.0:
            raise ConfigError(f"--minhash min_jaccard must be in [0, 1], got {self.min_jaccard}")

    @property
    def hashes(self) -> int:
        return self.bands * self.rows


def dedup_text(text: str) -> str:
    """``text`` as both dedup stages compare it: NFKC, case folded, punctuation dropped, spaces collapsed."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return SPACES.sub(" ", NON_WORD.sub(" ", folded)).strip()


def exact_key(text: str, seed: int = 0) -> bytes:
    """The key exact duplicates share: 16 bytes of BLAKE2b of the simplified text (``dedup_text``, which is the
    text's ``minhash_words`` joined by spaces)."""
    return exact_key_of_words(minhash_words(text), seed)


def exact_key_of_words(words: list[str], seed: int) -> bytes:
    """exact_key from the text's words (``minhash_words``): the simplified text is its words joined by spaces."""
    return hashlib.blake2b(" ".join(words).encode("utf-8"), digest_size=16, key=_seed_key(seed)).digest()


def keep_order(document_id: str, seed: int = 0) -> int:
    """The first 8 bytes of :func:`keep_rank` as a big-endian integer: ordered as the ranks are, but for ties of
    those bytes (1 in 2^64 per pair), which the rank itself then breaks. Rows carry it as a uint64 column, so
    that the keeper of a line is found by one sort, without building keys."""
    return int.from_bytes(keep_rank(document_id, seed)[:8], "big")


def line_text(line: str) -> str:
    """A line as ``--dedup lines`` compares it, as C4 does (TensorFlow Datasets' ``c4_utils``): its surrounding
    spaces stripped, lower-cased. A blank line is no line to dedup (empty here)."""
    return line.strip().lower()


def line_hash(text: str, seed: int = 0) -> int:
    """The 64-bit key of a line as :func:`line_text` gives it: BLAKE2b, 8 bytes, keyed by the seed."""
    hasher = _keyed_blake2b(seed).copy()
    hasher.update(text.encode("utf-8"))
    return int.from_bytes(hasher.digest(), "little")


def line_hashes(lines: Iterable[str], seed: int = 0) -> np.ndarray:
    """The distinct :func:`line_hash` values (uint64, ascending) of a document's non-blank lines."""
    texts = {text for text in map(line_text, lines) if text}
    return np.unique(np.fromiter((line_hash(text, seed) for text in texts), np.uint64, len(texts)))


def keep_rank(document_id: str, seed: int = 0) -> bytes:
    """The order in which copies are kept: the least rank of a cluster is its kept copy."""
    return hashlib.blake2b(document_id.encode("utf-8"), digest_size=16, key=_seed_key(seed),
                           person=b"xlnet-keep").digest()


def shingle_hashes(text: str, settings: MinHashSettings) -> np.ndarray:
    """The distinct hashes (uint64) of the document's shingles; a document of fewer words than a shingle
    is one shingle of all its words (none when it has no word)."""
    return np.unique(_shingles(minhash_words(text), settings))


def signature(text: str, settings: MinHashSettings) -> np.ndarray:
    """The MinHash signature (uint64, ``bands x rows``); all ones for a document without words."""
    return _signature_of_words(minhash_words(text), settings)


def _signature_of_words(words: list[str], settings: MinHashSettings) -> np.ndarray:
    """signature from the text's words (``minhash_words``): for one document, half the cost of ``signatures_of``
    of one (fewer NumPy calls), twice that of a document in a batch of ``signatures_of``."""
    # Repeated shingles are kept: they change no least value and cost less than np.unique's sort.
    shingles = _shingles(words, settings)
    if shingles.size == 0:
        return np.full(settings.hashes, MASK64, np.uint64)
    multipliers, increments = _hash_functions(settings.seed, settings.hashes)
    starts = range(0, shingles.size, SHINGLES_PER_CHUNK)  # bounded memory for a long document
    return functools.reduce(np.minimum, (_least(shingles[start:start + SHINGLES_PER_CHUNK], multipliers, increments)
                                         for start in starts))


def _least(shingles: np.ndarray, multipliers: np.ndarray, increments: np.ndarray) -> np.ndarray:
    """Each hash function's least value over ``shingles``: one (hashes, shingles) array, wrapping mod 2^64."""
    values = shingles * multipliers
    values += increments
    return values.min(axis=1)


def signatures_of(word_lists: Sequence[list[str]], settings: MinHashSettings) -> np.ndarray:
    """The signatures of documents given by their words (``minhash_words``), as (documents, ``bands x rows``) uint64:
    row i is document i's :func:`signature`, all ones for a document without words. A few NumPy calls for the whole
    batch (a few hundred documents: about half the CPU of a ``signature`` per document on crawl documents)."""
    signatures = np.full((len(word_lists), settings.hashes), MASK64, np.uint64)
    # Repeated shingles are kept: they change no least value and cost less than np.unique's sort.
    shingles, counts, signed = _batch_shingles(word_lists, settings)
    if shingles.size:
        signatures[signed] = _least_of_runs(shingles, counts, *_hash_functions(settings.seed, settings.hashes)).T
    return signatures


def _batch_shingles(word_lists: Sequence[list[str]], settings: MinHashSettings) -> tuple[np.ndarray, np.ndarray,
                                                                                        np.ndarray]:
    """The shingles (:func:`_shingles`) of the documents that have words, each document's in one run: (the
    shingles, each run's length, its document's index). The documents of at least ``shingle_words`` words come
    first, in order, their shingles the windows of one table of terms over all their words that start and end
    within one document; then those of fewer words (one shingle each, of all their words), one by one."""
    n = settings.shingle_words
    counts = np.fromiter(map(len, word_lists), np.int64, len(word_lists))
    long, short = np.flatnonzero(counts >= n), np.flatnonzero((counts > 0) & (counts < n))
    runs = [np.zeros(0, np.uint64)]
    if long.size:
        words = _word_hashes(list(itertools.chain.from_iterable(word_lists[i] for i in long)), settings.seed)
        lengths = counts[long] - (n - 1)
        # Shingle j of a document starts at its first word plus j: a run's first shingle is its first word less
        # the n - 1 words each earlier document has more than shingles.
        starts = np.arange(lengths.sum()) + np.repeat(np.arange(long.size) * (n - 1), lengths)
        runs.append(_mixed(words, n)[starts])
    runs.extend(_shingles(word_lists[i], settings) for i in short)
    return (np.concatenate(runs), np.concatenate([counts[long] - (n - 1), np.ones(short.size, np.int64)]),
            np.concatenate([long, short]))


def _least_of_runs(shingles: np.ndarray, counts: np.ndarray, multipliers: np.ndarray,
                   increments: np.ndarray) -> np.ndarray:
    """Each hash function's least value over each run of ``counts`` (none 0) of ``shingles``, as (hashes, runs):
    (hashes, SHINGLES_PER_CHUNK) arrays of values wrapping mod 2^64, each reduced over the pieces of runs it holds,
    then the pieces of each run."""
    firsts = np.cumsum(counts) - counts
    chunks = np.arange(0, shingles.size, SHINGLES_PER_CHUNK)
    pieces = np.union1d(firsts, chunks)  # runs cut at chunk starts: none empty, as reduceat needs
    bounds = np.searchsorted(pieces, np.append(chunks, shingles.size))
    least = np.empty((multipliers.shape[0], pieces.size), np.uint64)
    for chunk, start in enumerate(chunks):
        values = shingles[start:start + SHINGLES_PER_CHUNK] * multipliers
        values += increments
        within = slice(bounds[chunk], bounds[chunk + 1])
        least[:, within] = np.minimum.reduceat(values, pieces[within] - start, axis=1)
    return np.minimum.reduceat(least, np.searchsorted(pieces, firsts), axis=1)


def band_keys(signature_values: np.ndarray, settings: MinHashSettings) -> list[bytes]:
    """One key per band: its index and its rows' values, so only equal bands of the same index collide."""
    rows = signature_values.reshape(settings.bands, settings.rows)
    return [band.to_bytes(2, "big") + rows[band].astype("<u8").tobytes() for band in range(settings.bands)]


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """The fraction of signature rows two documents agree on: an estimate of their shingles' Jaccard similarity."""
    return float(np.mean(a == b))


def true_jaccard(a: str, b: str, settings: MinHashSettings) -> float:
    """The Jaccard similarity of two documents' shingle sets (for tests and audits; costs both shingle sets)."""
    x, y = set(shingle_hashes(a, settings).tolist()), set(shingle_hashes(b, settings).tolist())
    return len(x & y) / len(x | y) if x | y else 1.0


class Clusters:
    """Connected components of duplicate pairs (union-find over the documents that are in a pair)."""

    def __init__(self) -> None:
        self._parent: dict[str, str] = {}

    def add_pair(self, a: str, b: str) -> None:
        root_a, root_b = self.root(a), self.root(b)
        if root_a != root_b:
            self._parent[max(root_a, root_b)] = min(root_a, root_b)

    def root(self, document: str) -> str:
        parent = self._parent.setdefault(document, document)
        while parent != self._parent[parent]:
            self._parent[parent] = self._parent[self._parent[parent]]  # path halving
            parent = self._parent[parent]
        self._parent[document] = parent
        return parent

    def groups(self) -> dict[str, list[str]]:
        """Each cluster's documents, sorted, by its root."""
        out: dict[str, list[str]] = {}
        for document in sorted(self._parent):
            out.setdefault(self.root(document), []).append(document)
        return out


def band_pairs(members: Iterable[str], seed: int = 0) -> list[tuple[str, str]]:
    """The candidate pairs one band group gives, before any signature is compared: each member (document id)
    paired with the group's member of least ``keep_rank`` (never every pair: a group of n gives n - 1)."""
    distinct = set(members)
    if len(distinct) < 2:  # most band groups: no rank to compute
        return []
    ordered = sorted(distinct, key=lambda document: (keep_rank(document, seed), document))
    return [(ordered[0], document) for document in ordered[1:]]


def pairs_in_band(members: Iterable[tuple[str, np.ndarray]], min_jaccard: float, seed: int = 0) -> list[tuple[str, str]]:
    """The duplicate pairs one band group gives: its ``band_pairs`` whose two signatures' estimated Jaccard is
    at least ``min_jaccard``. Members are (document id, signature)."""
    signatures = dict(members)
    return [(a, b) for a, b in band_pairs(signatures, seed)
            if estimated_jaccard(signatures[a], signatures[b]) >= min_jaccard]


def kept_and_removed(groups: Iterable[list[str]], seed: int = 0) -> Mapping[str, str]:
    """For every document of every cluster but its kept copy: the kept copy's id."""
    removed = {}
    for documents in groups:
        kept = min(documents, key=lambda document: (keep_rank(document, seed), document))
        removed.update({document: kept for document in documents if document != kept})
    return removed


def _seed_key(seed: int) -> bytes:
    return int(seed).to_bytes(8, "little", signed=True)


def minhash_words(text: str) -> list[str]:
    """``dedup_text(text).split()`` in one pass: after NON_WORD's characters become spaces, the words are the
    runs of word characters (no character is both a word character and a space). ASCII text (most of a web
    crawl) needs neither NFKC nor casefold (each leaves it as ``lower`` does), and its word characters are
    ``[a-z0-9_]``: every other character made a space, ``str.split`` gives the same words in a third less time."""
    if text.isascii():
        return text.lower().translate(_ASCII_NON_WORD_TO_SPACE).split()
    return WORD.findall(unicodedata.normalize("NFKC", text).casefold())


# Every ASCII character that is no word character (``\w`` matches [A-Za-z0-9_] of ASCII) -> a space.
_ASCII_NON_WORD_TO_SPACE = str.maketrans({chr(code): " " for code in range(128)
                                          if not (chr(code).isalnum() or chr(code) == "_")})


def _shingles(words: list[str], settings: MinHashSettings) -> np.ndarray:
    """The hashes of the shingles of a document's words (``minhash_words``) in order, repeats included."""
    if not words:
        return np.zeros(0, np.uint64)
    return _mixed(_word_hashes(words, settings.seed), min(settings.shingle_words, len(words)))


def _mixed(hashes: np.ndarray, n: int) -> np.ndarray:
    """The mixed hash of each run of ``n`` consecutive word hashes (``hashes``, at least ``n``). A shingle of words
    w_0..w_{n-1} hashes to sum_i rotl(h(w_i), 7i mod 64) * GOLDEN^(n-1-i) mod 2^64: what mixing its words in turn
    (mixed * GOLDEN + rotated word) gives, computed as one (n, words) table of terms and n - 1 shifted sums."""
    count = hashes.size - n + 1
    left, right, powers = _mixing(n)
    terms = ((hashes << left) | (hashes >> right)) * powers  # row i: word hashes as the i-th of a shingle
    mixed = terms[0, :count].copy()
    for offset in range(1, n):
        mixed += terms[offset, offset:offset + count]
    return mixed


def _word_hashes(words: list[str], seed: int) -> np.ndarray:
    """Each word's keyed BLAKE2b (8 bytes, little-endian), in order; each distinct word hashed at most once,
    and not at all when the cache already holds it."""
    digests = _word_digests(seed)
    base = _keyed_blake2b(seed)
    for word in set(words).difference(digests):
        hasher = base.copy()  # the key block already absorbed: cheaper than a keyed constructor per word
        hasher.update(word.encode("utf-8"))
        digests[word] = hasher.digest()
    return np.frombuffer(b"".join(map(digests.__getitem__, words)), np.dtype("<u8"))


def _word_digests(seed: int) -> dict[str, bytes]:
    """The word cache for ``seed``: most of a document's distinct words were in earlier documents (a corpus's
    vocabulary is Zipfian), and a lookup costs a tenth of a hash. Past WORD_CACHE_WORDS words (or for another
    seed) a new, empty one replaces it: a thread still holding the old dictionary keeps it whole."""
    global _word_cache
    cached_seed, digests = _word_cache
    if cached_seed != seed or len(digests) > WORD_CACHE_WORDS:
        digests = {}
        _word_cache = (seed, digests)
    return digests


def word_cache_size() -> int:
    """How many words' hashes this process keeps (at most WORD_CACHE_WORDS plus the distinct words of one call:
    one document's, or one batch's under ``signatures_of``)."""
    return len(_word_cache[1])


@functools.lru_cache(maxsize=16)
def _keyed_blake2b(seed: int) -> hashlib.blake2b:
    """BLAKE2b, 8-byte digest, keyed by the seed, nothing hashed yet: copied for each word."""
    return hashlib.blake2b(key=_seed_key(seed), digest_size=8)


@functools.lru_cache(maxsize=16)
def _mixing(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a shingle of ``n`` words, as (n, 1) columns: each position's left and right rotation shifts and its
    GOLDEN power mod 2^64 (position 0 rotates by 0: both shifts 0)."""
    left = np.array([offset * 7 % 64 for offset in range(n)], np.uint64)
    powers = np.array([pow(GOLDEN, n - 1 - offset, 2 ** 64) for offset in range(n)], np.uint64)
    return _frozen_column(left), _frozen_column((np.uint64(64) - left) % np.uint64(64)), _frozen_column(powers)


@functools.lru_cache(maxsize=16)
def _hash_functions(seed: int, hashes: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``bands x rows`` multiply-add hash functions, as (hashes, 1) columns: odd multipliers and increments
    from the seed (drawn once per process, not per document)."""
    rng = np.random.default_rng([seed, 0x4D696E48])
    multipliers = rng.integers(0, 2 ** 63, hashes, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    increments = rng.integers(0, 2 ** 63, hashes, dtype=np.uint64)
    return _frozen_column(multipliers), _frozen_column(increments)


def _frozen_column(values: np.ndarray) -> np.ndarray:
    """``values`` as a read-only (n, 1) column: cached arrays are shared by every call."""
    column = values.reshape(-1, 1)
    column.flags.writeable = False
    return column


# ------------------------------------------------------------------ packed rows, for the pipeline's bucketed shuffles
def mix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser of uint64 values (a new array): every output bit depends on every input bit, so that
    values which are themselves small (a signature row is a least hash) spread evenly over buckets."""
    mixed = values.astype(np.uint64, copy=True)
    mixed ^= mixed >> np.uint64(30)
    mixed *= np.uint64(0xBF58476D1CE4E5B9)
    mixed ^= mixed >> np.uint64(27)
    mixed *= np.uint64(0x94D049BB133111EB)
    mixed ^= mixed >> np.uint64(31)
    return mixed


def band_rows(signatures: np.ndarray, settings: MinHashSettings) -> np.ndarray:
    """Each band of each signature (``signatures``: (documents, hashes) uint64) as one uint64 row of a table of
    (documents x bands) rows: a hash of the band's index and values (to bucket and sort by), its index, its
    values. Two rows have equal hash, index and values exactly when the two bands' ``band_keys`` are equal: the
    groups are decided by the index and values (``equal_row_groups``), the hash only sorts them together."""
    count = signatures.shape[0]
    values = signatures.reshape(count, settings.bands, settings.rows)
    index = np.broadcast_to(np.arange(settings.bands, dtype=np.uint64), (count, settings.bands))
    hashed = mix64(index)
    for row in range(settings.rows):
        hashed = mix64(hashed ^ values[:, :, row])
    return np.concatenate([hashed[:, :, None], index[:, :, None], values], axis=2).reshape(-1, 2 + settings.rows)


def equal_row_groups(rows: np.ndarray) -> list[np.ndarray]:
    """The indices of each set of two or more equal rows of ``rows`` (uint64, (n, k), its first column a hash of
    the rest), each ascending, the sets in the order of their rows' values. One sort of the first column finds
    the few rows whose hash another row shares; only those are compared whole."""
    if len(rows) < 2:
        return []
    first = rows[:, 0]
    order = np.argsort(first, kind="stable")
    same = first[order[1:]] == first[order[:-1]]
    shared = np.zeros(len(order), bool)
    shared[1:] = same
    shared[:-1] |= same
    sharing = order[shared]
    if sharing.size == 0:  # most buckets of a corpus with few duplicates
        return []
    values = rows[sharing]
    sorted_rows = np.lexsort(values.T[::-1])  # column 0 the primary key
    values = values[sorted_rows]
    equal = np.all(values[1:] == values[:-1], axis=1)
    groups = np.split(sharing[sorted_rows], np.flatnonzero(~equal) + 1)
    return [np.sort(group) for group in groups if len(group) > 1]


def document_hash(key: str) -> int:
    """A 64-bit hash of a document's key: the bucket of its signature, and of the candidate pairs it ends."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8, person=b"xlnet-doc").digest(), "little")
