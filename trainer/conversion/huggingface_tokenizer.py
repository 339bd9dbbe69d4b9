"""tokenizer.json for transformers' XLNetTokenizer, written from a SentencePiece model without
transformers, tokenizers or protobuf.

transformers v5's XLNetTokenizer is a ``tokenizers`` Unigram tokenizer. Given only spiece.model
it converts the model through sentencepiece's protobuf module, which fails when the installed
protobuf runtime is older than that module's generated code (TensorFlow and Apache Beam pin
protobuf 6 today). A tokenizer.json holds the same pieces, scores and normalisation table, so
loading needs neither; it is what ``XLNetTokenizer.save_pretrained`` writes itself. Its pipeline
is XLNetTokenizer's: quote fix, NFKD, strip accents, lower-case when uncased, SentencePiece's
precompiled normalisation table; whitespace split and ``▁`` prefixes; ``A <sep> <cls>`` and
``A <sep> B <sep> <cls>`` with token types 0, 1 and 2 (<cls>).
"""
from __future__ import annotations

import base64
from typing import Any, Mapping

from tfrecords.protobuf_wire import fields

WORD_BOUNDARY = "\u2581"


def precompiled_charsmap(sp_model_proto: bytes) -> bytes:
    """ModelProto.normalizer_spec (field 3).precompiled_charsmap (field 2): SentencePiece's
    normalisation table, b"" when the model has none (identity normalisation)."""
    for number, wire, value in fields(sp_model_proto):
        if number == 3 and wire == 2:
            for inner_number, inner_wire, inner in fields(value):
                if inner_number == 2 and inner_wire == 2:
                    return bytes(inner)
    return b""


def tokenizer_json(sp_model_proto: bytes, special_ids: Mapping[str, int], uncased: bool) -> dict[str, Any]:
    """The tokenizer.json of XLNetTokenizer for this vocabulary and casing."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=sp_model_proto)
    vocab = [[processor.id_to_piece(i), processor.get_score(i)] for i in range(processor.get_piece_size())]
    special = {name: processor.id_to_piece(int(special_ids[name])) for name in
               ("unk", "bos", "eos", "cls", "sep", "pad", "mask", "eod", "eop")}
    added = [{"id": int(special_ids[name]), "content": special[name], "single_word": False,
              "lstrip": name == "mask", "rstrip": False, "normalized": False, "special": True}
             for name in ("unk", "bos", "eos", "cls", "sep", "pad", "mask", "eod", "eop")]
    normalizers = [{"type": "Replace", "pattern": {"String": "``"}, "content": '"'},
                   {"type": "Replace", "pattern": {"String": "''"}, "content": '"'},
                   {"type": "NFKD"}, {"type": "StripAccents"}]
    if uncased:
        normalizers.append({"type": "Lowercase"})
    charsmap = precompiled_charsmap(sp_model_proto)
    if charsmap:
        normalizers.append({"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")})
    metaspace = {"type": "Metaspace", "replacement": WORD_BOUNDARY, "prepend_scheme": "always", "split": True}
    sep, cls = special["sep"], special["cls"]

    def piece(name: str, type_id: int) -> dict:
        return {"SpecialToken": {"id": name, "type_id": type_id}}

    def sequence(name: str, type_id: int) -> dict:
        return {"Sequence": {"id": name, "type_id": type_id}}

    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": sorted(added, key=lambda token: token["id"]),
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [sequence("A", 0), piece(sep, 0), piece(cls, 2)],
            "pair": [sequence("A", 0), piece(sep, 0), sequence("B", 1), piece(sep, 1), piece(cls, 2)],
            "special_tokens": {token: {"id": token, "ids": [int(special_ids[name])], "tokens": [token]}
                               for name, token in (("sep", sep), ("cls", cls))}},
        "decoder": dict(metaspace),
        "model": {"type": "Unigram", "unk_id": int(special_ids["unk"]), "vocab": vocab, "byte_fallback": False},
    }
