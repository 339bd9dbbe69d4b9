"""Each record's permutation seed: a fingerprint of its keys (seed, stream id, position, epoch[, source]).

The seed is ``tf.fingerprint`` of the row of int64 keys (FarmHash's Fingerprint64, which is
farmhashna's Hash64 of the row's little-endian bytes), its 8 bytes read as two int32. Both versions
live here, as the rule of tfrecords/ asks of a rule with a Python and a TensorFlow side: NumPy
(:func:`permutation_seeds`, vectorised uint64 arithmetic over the rows, for the TensorFlow-free reader)
and the graph's (:func:`permutation_seeds_in_graph`, TensorFlow imported inside it); a test holds them
equal on random rows of every key width.
"""
from __future__ import annotations

from typing import Any

import numpy as np

K0 = np.uint64(0xC3A5C85C97CB3127)
K1 = np.uint64(0xB492B66FBE98F273)
K2 = np.uint64(0x9AE16A3B2F90404F)
KMUL = np.uint64(0x9DDFEA08EB382D69)
SEED = np.uint64(81)


def _u64(value: int) -> np.uint64:
    return np.uint64(value & 0xFFFFFFFFFFFFFFFF)


def _rotate(value: np.ndarray, shift: int) -> np.ndarray:
    """Rotation right by ``shift`` bits (farmhash's Rotate)."""
    return value if shift == 0 else (value >> np.uint64(shift)) | (value << np.uint64(64 - shift))


def _shift_mix(value: np.ndarray) -> np.ndarray:
    return value ^ (value >> np.uint64(47))


def _hash_len16(u: np.ndarray, v: np.ndarray, mul: np.uint64 | np.ndarray = KMUL) -> np.ndarray:
    """farmhash's HashLen16 (with KMUL it is Hash128to64)."""
    a = _shift_mix((u ^ v) * mul)
    b = _shift_mix((v ^ a) * mul)
    return b * mul


def _fetch64(data: np.ndarray, offset: int) -> np.ndarray:
    """Little-endian uint64 at ``offset`` of every row of ``data`` [B, L] uint8."""
    return np.ascontiguousarray(data[:, offset:offset + 8]).view("<u8")[:, 0].astype(np.uint64)


def _fetch32(data: np.ndarray, offset: int) -> np.ndarray:
    return np.ascontiguousarray(data[:, offset:offset + 4]).view("<u4")[:, 0].astype(np.uint64)


def _len0to16(data: np.ndarray, length: int) -> np.ndarray:
    if length >= 8:
        mul = K2 + _u64(length * 2)
        a = _fetch64(data, 0) + K2
        b = _fetch64(data, length - 8)
        c = _rotate(b, 37) * mul + a
        d = (_rotate(a, 25) + b) * mul
        return _hash_len16(c, d, mul)
    if length >= 4:
        mul = K2 + _u64(length * 2)
        a = _fetch32(data, 0)
        return _hash_len16(_u64(length) + (a << np.uint64(3)), _fetch32(data, length - 4), mul)
    if length > 0:
        a, b, c = (data[:, i].astype(np.uint64) for i in (0, length >> 1, length - 1))
        y = (a + (b << np.uint64(8))) & np.uint64(0xFFFFFFFF)  # uint32 arithmetic in farmhash
        z = (_u64(length) + (c << np.uint64(2))) & np.uint64(0xFFFFFFFF)
        return _shift_mix(y * K2 ^ z * K0) * K2
    return np.full(data.shape[0], K2, np.uint64)


def _len17to32(data: np.ndarray, length: int) -> np.ndarray:
    mul = K2 + _u64(length * 2)
    a = _fetch64(data, 0) * K1
    b = _fetch64(data, 8)
    c = _fetch64(data, length - 8) * mul
    d = _fetch64(data, length - 16) * K2
    return _hash_len16(_rotate(a + b, 43) + _rotate(c, 30) + d, a + _rotate(b + K2, 18) + c, mul)


def _len33to64(data: np.ndarray, length: int) -> np.ndarray:
    mul = K2 + _u64(length * 2)
    a = _fetch64(data, 0) * K2
    b = _fetch64(data, 8)
    c = _fetch64(data, length - 8) * mul
    d = _fetch64(data, length - 16) * K2
    y = _rotate(a + b, 43) + _rotate(c, 30) + d
    z = _hash_len16(y, a + _rotate(b + K2, 18) + c, mul)
    e = _fetch64(data, 16) * mul
    f = _fetch64(data, 24)
    g = (y + _fetch64(data, length - 32)) * mul
    h = (z + _fetch64(data, length - 24)) * mul
    return _hash_len16(_rotate(e + f, 43) + _rotate(g, 30) + h, e + _rotate(f + a, 18) + g, mul)


def _weak_hash32(data: np.ndarray, offset: int, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """farmhash's WeakHashLen32WithSeeds of the 32 bytes at ``offset``."""
    w, x, y, z = (_fetch64(data, offset + 8 * i) for i in range(4))
    a = a + w
    b = _rotate(b + a + z, 21)
    c = a
    a = a + x + y
    b = b + _rotate(a, 44)
    return a + z, b + c


def _len_over64(data: np.ndarray, length: int) -> np.ndarray:
    rows = data.shape[0]
    zero = np.zeros(rows, np.uint64)
    x = np.full(rows, SEED, np.uint64)
    y = np.full(rows, SEED * K1 + np.uint64(113), np.uint64)
    z = _shift_mix(y * K2 + np.uint64(113)) * K2
    v, w = (zero, zero), (zero, zero)
    x = x * K2 + _fetch64(data, 0)
    last64 = length - 64
    for s in range(0, ((length - 1) // 64) * 64, 64):
        x = _rotate(x + y + v[0] + _fetch64(data, s + 8), 37) * K1
        y = _rotate(y + v[1] + _fetch64(data, s + 48), 42) * K1
        x = x ^ w[1]
        y = y + v[0] + _fetch64(data, s + 40)
        z = _rotate(z + w[0], 33) * K1
        v = _weak_hash32(data, s, v[1] * K1, x + w[0])
        w = _weak_hash32(data, s + 32, z + w[1], y + _fetch64(data, s + 16))
        z, x = x, z
    mul = K1 + ((z & np.uint64(0xFF)) << np.uint64(1))
    w = (w[0] + _u64((length - 1) & 63), w[1])
    v = (v[0] + w[0], v[1])
    w = (w[0] + v[0], w[1])
    s = last64
    x = _rotate(x + y + v[0] + _fetch64(data, s + 8), 37) * mul
    y = _rotate(y + v[1] + _fetch64(data, s + 48), 42) * mul
    x = x ^ (w[1] * np.uint64(9))
    y = y + v[0] * np.uint64(9) + _fetch64(data, s + 40)
    z = _rotate(z + w[0], 33) * mul
    v = _weak_hash32(data, s, v[1] * mul, x + w[0])
    w = _weak_hash32(data, s + 32, z + w[1], y + _fetch64(data, s + 16))
    z, x = x, z
    return _hash_len16(_hash_len16(v[0], w[0], mul) + _shift_mix(y) * K0 + z, _hash_len16(v[1], w[1], mul) + x, mul)


def fingerprint64(data: np.ndarray) -> np.ndarray:
    """FarmHash Fingerprint64 (farmhashna::Hash64) of every row of ``data`` [B, L] uint8, as uint64 [B]:
    what tf.fingerprint computes of each row's bytes."""
    data = np.ascontiguousarray(data, np.uint8)
    length = data.shape[1]
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps, as farmhash's does
        if length <= 16:
            return _len0to16(data, length)
        if length <= 32:
            return _len17to32(data, length)
        if length <= 64:
            return _len33to64(data, length)
        return _len_over64(data, length)


def permutation_seeds(keys: np.ndarray) -> np.ndarray:
    """[B, 2] int32 stateless seeds, a fingerprint of each row of ``keys`` [B, k] (seed, stream id,
    position, epoch[, source]): the fingerprint's little-endian bytes read as two int32, as the graph's."""
    rows = np.ascontiguousarray(np.asarray(keys).astype("<i8"))
    fingerprint = fingerprint64(rows.view(np.uint8).reshape(rows.shape[0], -1))
    return fingerprint.astype("<u8").view("<i4").reshape(-1, 2).astype(np.int32)


def permutation_seeds_in_graph(keys: Any) -> Any:
    """:func:`permutation_seeds` in the graph: [B, 2] int32 tensor of ``keys`` [B, k], tf.fingerprint
    of each row: a fresh permutation for every example at every step, the same on every run."""
    import tensorflow as tf

    fingerprint = tf.fingerprint(tf.cast(keys, tf.int64))  # [B, 8] uint8
    return tf.bitcast(tf.reshape(fingerprint, [-1, 2, 4]), tf.int32)
