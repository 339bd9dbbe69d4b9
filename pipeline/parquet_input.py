"""`xlnet preprocess --input-format parquet`: the documents of a Parquet file, one per row.

A row's ``--text-field`` column (a string column) is one document whose non-blank lines are its sentences,
as a JSON line's text field is (FineWeb, RedPajama and most Hugging Face datasets ship Parquet). An ``id``
column of strings or integers, when there is one, names each document in the ``--removed`` audit; otherwise
a document is ``"PATH:ROW"`` (rows numbered from 1). Rows are read in file order, a batch at a time, through
pyarrow (Apache Beam's own Parquet IO reads with it) from a handle Beam's filesystems opened, so the
documents take the same keys, and hence the same splits and streams, as every other format's, on any runner
and for any number of workers.

The rules of the line formats, per row: a null text, or one holding a NUL character, is an invalid line
(``stats["invalid_lines"]``); a text longer than ``max_line_bytes`` in UTF-8 is an over-long one
(``stats["long_lines"]``); each row counts as a line (``stats["lines"]``).

A file that is not Parquet, lacks the column or holds something other than strings in it is a data problem
the launcher finds before any work (``check_parquet_files``: one line naming the file and column, exit 3).
"""
from __future__ import annotations

from collections import Counter
from typing import BinaryIO, Iterator, Optional

from tfrecords.errors import DataError

ID_COLUMN = "id"
# Rows converted to Python at a time: bounds what a reader holds beyond pyarrow's row group.
BATCH_ROWS = 1024


class ParquetInputError(DataError):
    """A Parquet input that cannot give documents: not Parquet, no such column, or not a string column."""


def _string_type(data_type) -> bool:
    """Whether a column of this Arrow type holds text (plain, large, view or dictionary-encoded strings)."""
    import pyarrow as pa

    if pa.types.is_dictionary(data_type):
        data_type = data_type.value_type
    return pa.types.is_string(data_type) or pa.types.is_large_string(data_type) or (
        hasattr(pa.types, "is_string_view") and pa.types.is_string_view(data_type))


def _id_type(data_type) -> bool:
    """Whether an ``id`` column of this type names documents (strings or integers, as a JSON line's id)."""
    import pyarrow as pa

    return _string_type(data_type) or pa.types.is_integer(data_type)


def schema_problem(schema, path: str, text_field: str) -> Optional[str]:
    """Why a file of this Arrow schema gives no documents from ``text_field``, in one line; None when it does."""
    names = schema.names
    if text_field not in names:
        listed = ", ".join(repr(name) for name in names[:20]) + (", ..." if len(names) > 20 else "")
        return (f"{path}: no column {text_field!r} (--text-field) in this Parquet file; its columns are "
                f"{listed or 'none'}")
    data_type = schema.field(text_field).type
    if not _string_type(data_type):
        return f"{path}: column {text_field!r} (--text-field) holds {data_type}, not strings"
    return None


def open_parquet(handle: BinaryIO, path: str):
    """A pyarrow ParquetFile reading ``handle``; ParquetInputError naming ``path`` when it is not Parquet."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(handle)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise ParquetInputError(f"{path}: not a readable Parquet file ({error})") from None


def check_parquet_files(paths: list[str], text_field: str) -> None:
    """Reads each file's footer (its schema, not its rows); ParquetInputError in one line for the first that is
    not Parquet, has no ``text_field`` column or holds something other than strings in it."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    for path in paths:
        try:
            with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
                problem = schema_problem(open_parquet(handle, path).schema_arrow, path, text_field)
        except ParquetInputError:
            raise
        except (OSError, ValueError) as error:  # Beam's BeamIOError is an OSError
            raise ParquetInputError(f"{path}: cannot read: {error}") from None
        if problem:
            raise ParquetInputError(problem)


def parquet_documents(handle: BinaryIO, path: str, text_field: str, max_line_bytes: int, stats: Counter,
                      identified: bool) -> Iterator[tuple[str | int | None, list[str]]]:
    """(id, or None unless ``identified``; document) of every row of the Parquet file ``handle`` reads, in file
    order, by the rules of the module docstring."""
    parquet = open_parquet(handle, path)
    schema = parquet.schema_arrow
    problem = schema_problem(schema, path, text_field)
    if problem:  # the launcher checked it: the file changed since
        raise ParquetInputError(problem)
    with_ids = identified and ID_COLUMN in schema.names and _id_type(schema.field(ID_COLUMN).type)
    columns = [text_field] + ([ID_COLUMN] if with_ids and ID_COLUMN != text_field else [])
    row = 0
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns):
        texts = batch.column(text_field).to_pylist()
        ids = batch.column(ID_COLUMN).to_pylist() if with_ids else [None] * len(texts)
        for text, identity in zip(texts, ids):
            row += 1
            document = _row_document(text, max_line_bytes, stats)
            if document:
                yield (identity if identity is not None else f"{path}:{row}") if identified else None, document


def _row_document(text: Optional[str], max_line_bytes: int, stats: Counter) -> list[str]:
    """A row's text as a document (its non-blank lines, split as a JSON line's text is), counted as a line."""
    stats["lines"] += 1
    if text is None or "\x00" in text:
        stats["invalid_lines"] += 1
        return []
    if len(text) > max_line_bytes // 4 and len(text.encode("utf-8")) > max_line_bytes:  # 4 bytes at most a character
        stats["long_lines"] += 1
        return []
    return [sentence for sentence in text.splitlines() if sentence.strip()]
