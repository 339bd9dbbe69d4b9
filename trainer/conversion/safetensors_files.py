"""The safetensors files of a Hugging Face directory, read so that the directory cannot make us read anything
else, or read without bound.

A directory comes from someone else (the Hub, a colleague's bucket): its ``model.safetensors.index.json`` could
name ``/etc/hostname`` or ``/dev/zero``, and a header could promise tensors its file does not hold. So, before a
byte of tensor data is read:

* the index is a JSON object whose ``weight_map`` maps tensor names to plain file names of the directory (no
  '/', '\\', '..', absolute path or scheme; the manifest's rule for shard names, tfrecords/manifest.py, and no
  subdirectory);
* every weights file, and every other file read from the directory, is a regular file (not a device, a FIFO or a directory), and a symbolic link is followed only
  to a file inside the directory, or, for a Hugging Face cache snapshot (``.../snapshots/REVISION/``), inside
  that cache's ``blobs/`` (where the Hub's client keeps the files its snapshots link to);
* each file's header (at most :data:`MAX_HEADER_BYTES`, read alone) is checked against the file's size: every
  tensor's dtype known, its byte range its shape times its item size, the ranges back to back and ending at the
  end of the file, as safetensors itself requires.

Then the caller checks the configuration against every header (trainer/conversion/huggingface_weights.py) and
only then are the tensors read, each file whole: the bytes read are the bytes the checked headers account for.
A damaged or forged file or index is a :class:`WeightsFileError` (a DataError, exit status 3) naming the file and
the entry. Portable: NumPy and ``safetensors``; TensorFlow's file system only for a path with a scheme (gs://).
"""
from __future__ import annotations

import dataclasses
import math
import os
import posixpath
import stat
from typing import Any, Mapping

import numpy as np

from tfrecords.errors import DataError
from tfrecords.json_documents import json_kind, load_json
from tfrecords.manifest import shard_name_problem
from trainer.runtime.storage import failures_named

MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit on a header
# safetensors' dtypes and their item sizes in bytes.
ITEM_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
              "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
FLOAT_DTYPES = ("F16", "F32", "F64", "BF16", "F8_E5M2", "F8_E4M3")
NUMPY_LACKS = ("BF16", "F8_E5M2", "F8_E4M3")  # float types safetensors' NumPy API cannot load
# The NumPy dtypes of the others (little-endian, as safetensors stores them).
NUMPY_DTYPES = {"BOOL": "?", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2", "F16": "<f2", "I32": "<i4",
                "U32": "<u4", "F32": "<f4", "I64": "<i8", "U64": "<u8", "F64": "<f8"}


class WeightsFileError(DataError):
    """A weights file or index that is damaged or forged: it names what is not a file of the directory, or its
    header does not add up; the message names the file and the entry."""


@dataclasses.dataclass(frozen=True)
class TensorHeader:
    """One tensor as its file's header describes it (nothing read yet)."""

    dtype: str  # safetensors' name: F32, BF16, ...
    shape: tuple[int, ...]
    file: str
    start: int = 0  # where its bytes begin in the file


@dataclasses.dataclass(frozen=True)
class WeightsFile:
    """A checked weights file: its path and its size in bytes."""

    path: str
    size: int


# --------------------------------------------------------------------------------- the index
def index_shard_names(index: Any, index_path: str) -> dict[str, str]:
    """tensor name -> shard file name of a parsed model.safetensors.index.json, each name a plain file name of
    the index's directory; WeightsFileError names the index and the first entry that is not."""
    if not isinstance(index, dict):
        raise WeightsFileError(f"{index_path}: expected a JSON object with a \"weight_map\", found {json_kind(index)}")
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        found = "none" if weight_map is None else json_kind(weight_map)
        raise WeightsFileError(f"{index_path}: \"weight_map\" must be a non-empty object of tensor name -> shard "
                               f"file, found {found}")
    for name, shard in weight_map.items():
        problem = shard_file_problem(shard)
        if problem:
            raise WeightsFileError(f"{index_path}: weight_map[{name!r}] names {shard!r}, not a file of the "
                                   f"directory ({problem}); shard names are plain file names")
    return dict(weight_map)


def shard_file_problem(name: Any) -> str | None:
    """Why ``name`` (a weight_map value) is not a plain file name of the directory, or None."""
    if not isinstance(name, str):
        return f"it is {json_kind(name)}, not a file name"
    if "/" in name:
        return "it is an absolute path" if name.startswith("/") else "it holds a '/'"
    return shard_name_problem(name)


# ---------------------------------------------------------------------------- the files
def checked_file(path: str, directory: str, named_by: str) -> WeightsFile:
    """``path`` when it is a regular file the directory may hold (see the module's docstring), with its size;
    WeightsFileError names it and ``named_by`` (the index, or the directory). For the weights, and before any other
    file of the directory is read whole (config.json, the index, spiece.model): a link to /dev/zero is never read."""
    if "://" in path:
        import tensorflow as tf  # a path with a scheme: its file system is TensorFlow's (trainer/runtime/storage.py)

        with failures_named(path, "read"):
            if tf.io.gfile.isdir(path):
                raise WeightsFileError(f"{named_by}: {path} is a directory, not a weights file")
            return WeightsFile(path, tf.io.gfile.stat(path).length)
    outside = link_outside(path, directory)
    if outside:
        raise WeightsFileError(f"{named_by}: {path} is a symbolic link to {outside}, outside {directory}")
    with failures_named(path, "read"):
        status = os.stat(path)
    if not stat.S_ISREG(status.st_mode):
        raise WeightsFileError(f"{named_by}: {path} is not a regular file (a device, FIFO or directory)")
    return WeightsFile(path, status.st_size)


def link_outside(path: str, directory: str) -> str | None:
    """Where ``path`` leads when that is outside ``directory`` (and outside the blobs/ of the Hugging Face cache
    that holds a snapshot directory), else None."""
    target, home = os.path.realpath(path), os.path.realpath(directory)
    allowed = [home]
    if posixpath.basename(posixpath.dirname(home)) == "snapshots":  # CACHE/models--X/snapshots/REVISION
        allowed.append(posixpath.join(posixpath.dirname(posixpath.dirname(home)), "blobs"))
    return None if any(target.startswith(place + os.sep) for place in allowed) else target


def read_range(path: str, start: int, length: int) -> bytes:
    """``length`` bytes of a checked file from ``start``; a local one is opened non-blocking, so that a file
    swapped for a FIFO after its check cannot hang the read."""
    with failures_named(path, "read"):
        if "://" in path:
            import tensorflow as tf

            with tf.io.gfile.GFile(path, "rb") as handle:
                handle.seek(start)
                return handle.read(length)
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise WeightsFileError(f"{path} is not a regular file (a device, FIFO or directory)")
            handle.seek(start)
            return handle.read(length)


# --------------------------------------------------------------------------- the headers
def read_header(weights: WeightsFile) -> tuple[int, dict[str, TensorHeader]]:
    """(bytes before the tensor data, name -> TensorHeader) of one checked file, its header read alone and checked
    against the file's size; WeightsFileError names the file and what does not add up."""
    path, size = weights.path, weights.size
    cut = f"{path} is truncated or damaged ({size} bytes"
    if size < 8:
        raise WeightsFileError(f"{cut}, shorter than a safetensors header): copy or download it again")
    header_bytes = int.from_bytes(read_range(path, 0, 8), "little")
    if header_bytes > min(size - 8, MAX_HEADER_BYTES):
        raise WeightsFileError(f"{cut}; its header claims {header_bytes} bytes): copy or download it again")
    header = load_json(read_range(path, 8, header_bytes), path, WeightsFileError, "a safetensors file (its header)")
    if not isinstance(header, dict):
        raise WeightsFileError(f"{path}: its header is {json_kind(header)}, not an object of tensor name -> entry")
    tensors = {name: tensor_header(entry, name, path, 8 + header_bytes) for name, entry in header.items()
               if name != "__metadata__"}
    check_data_ranges({name: header[name]["data_offsets"] for name in tensors}, size - 8 - header_bytes, cut)
    return 8 + header_bytes, tensors


def tensor_header(entry: Any, name: str, path: str, data_start: int = 0) -> TensorHeader:
    """One header entry ({"dtype", "shape", "data_offsets"}) checked: a known dtype, a shape of sizes, a byte range
    of the length the shape and dtype make (``data_start``: where the file's tensor data begins)."""
    problem = entry_problem(entry)
    if problem:
        raise WeightsFileError(f"{path}: the header's entry for {name} {problem}")
    shape = tuple(entry["shape"])
    begin, end = entry["data_offsets"]
    needed = math.prod(shape) * ITEM_BYTES[entry["dtype"]]
    if end - begin != needed:
        raise WeightsFileError(f"{path}: the header gives {name} ({entry['dtype']} {list(shape)}, {needed} bytes) "
                               f"{end - begin} bytes; the file is damaged: copy or download it again")
    return TensorHeader(entry["dtype"], shape, path, data_start + begin)


def entry_problem(entry: Any) -> str | None:
    """What is wrong with a header entry's fields, or None."""
    if not isinstance(entry, dict):
        return f"is {json_kind(entry)}, not an object"
    if entry.get("dtype") not in ITEM_BYTES:
        return f"has dtype {entry.get('dtype')!r}, not a safetensors dtype ({', '.join(ITEM_BYTES)})"
    sizes = lambda value, count=None: isinstance(value, list) and (count is None or len(value) == count) and all(  # noqa: E731
        isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in value)
    if not sizes(entry.get("shape")):
        return f"has shape {entry.get('shape')!r}, not a list of sizes"
    offsets = entry.get("data_offsets")
    if not sizes(offsets, 2) or offsets[0] > offsets[1]:
        return f"has data_offsets {offsets!r}, not [begin, end]"
    return None


def check_data_ranges(offsets: Mapping[str, list[int]], data_bytes: int, cut: str) -> None:
    """The tensors' byte ranges lie back to back from 0 to the end of the file's data (safetensors' own rule):
    a file shorter than its header says is truncated; one with gaps or overlaps is damaged."""
    position = 0
    for name, (begin, end) in sorted(offsets.items(), key=lambda item: tuple(item[1])):
        if begin != position:
            raise WeightsFileError(f"{cut}; its header puts {name} at byte {begin} of the data, expected {position}): "
                                   "copy or download it again")
        position = end
    if position != data_bytes:
        raise WeightsFileError(f"{cut}; its header accounts for {position} bytes of tensor data, the file holds "
                               f"{data_bytes}): copy or download it again")


# ---------------------------------------------------------------------------- the tensors
def read_tensors(weights: WeightsFile) -> dict[str, np.ndarray]:
    """The tensors of one file whose header was checked (:func:`read_header`): its ``size`` bytes, no more."""
    import safetensors.numpy
    from safetensors import SafetensorError

    data = read_range(weights.path, 0, weights.size)
    try:
        return safetensors.numpy.load(data)
    except SafetensorError as error:  # changed since its header was read
        raise WeightsFileError(f"{weights.path} is truncated or damaged ({len(data)} bytes; safetensors: {error}): "
                               "copy or download it again") from None


def read_tensor(header: TensorHeader) -> np.ndarray:
    """One tensor of a file whose header was checked (:func:`read_header`), its bytes alone read: for a few small
    tensors of a large file (the attention biases that tell whether a model ties them)."""
    dtype = np.dtype(NUMPY_DTYPES[header.dtype])  # NUMPY_LACKS is refused with the headers (numpy_dtype_problem)
    length = math.prod(header.shape) * dtype.itemsize
    data = read_range(header.file, header.start, length)
    if len(data) != length:  # changed since its header was read
        raise WeightsFileError(f"{header.file} is truncated or damaged (it ended inside a tensor its header places): "
                               "copy or download it again")
    return np.frombuffer(data, dtype).reshape(header.shape)


def numpy_dtype_problem(headers: Mapping[str, TensorHeader]) -> str | None:
    """Why NumPy cannot read these tensors (bfloat16, float8), with the way out, or None. (Integer tensors NumPy
    reads; the check of every tensor against the configuration names them.)"""
    lacking = sorted({header.dtype for header in headers.values() if header.dtype in NUMPY_LACKS})
    if not lacking:
        return None
    files = ", ".join(sorted({header.file for header in headers.values() if header.dtype in NUMPY_LACKS}))
    if "BF16" in lacking:
        return (f"{files} holds bfloat16 tensors, which NumPy cannot read: bfloat16 weights need a float32 copy "
                "(save_pretrained after model.float())")
    return f"{files} holds {', '.join(lacking)} tensors, which NumPy cannot read: save a float32 copy"
