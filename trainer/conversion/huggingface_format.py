"""The Hugging Face transformers XLNet format: config.json, model.safetensors, spiece.model.

Both directions, without torch, for the TensorFlow commands (`xlnet export --format huggingface`,
`xlnet import-checkpoint --huggingface`): the config mapping, the tensor names and checks and the
safetensors reading are the portable rules of trainer/conversion/huggingface_weights.py (which also loads a
network on any Keras backend); this module adds the vocabulary and tokenizer files and writes a directory.
Every file goes through trainer/runtime/storage.py, so a directory may be local or gs://.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping, Optional


from trainer.conversion.huggingface_tokenizer import tokenizer_json
from trainer.conversion.safetensors_files import checked_file
from trainer.conversion.huggingface_weights import (  # noqa: F401  (the names the commands and tests import here)
    CONFIG,
    TASK_ARCHITECTURES,
    WEIGHTS,
    Binding,
    HuggingFaceFormatError,
    HuggingFaceWeights,
    export_tensors,
    huggingface_config,
    joiner,
    load_tensors,
    model_bindings,
    read_huggingface_weights,
)
from trainer.models.config import ModelConfig
from trainer.models.head_spec import HeadSpec
from trainer.models.network import XLNetNetwork
from trainer.runtime import file_system
from trainer.runtime.storage import exists, read_bytes, read_json, write_bytes, write_json

VOCAB = "spiece.model"
TOKENIZER_CONFIG = "tokenizer_config.json"
TOKENIZER = "tokenizer.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"


@dataclasses.dataclass
class HuggingFaceModel(HuggingFaceWeights):
    """What a transformers XLNet directory holds, read and checked: the weights (our config, the head or
    None, the tensors), the vocabulary (bytes and special ids) and, when the tokenizer says, the casing."""

    sp_model_proto: bytes
    special_ids: dict[str, int]
    uncased: Optional[bool]

    def bindings(self, network: XLNetNetwork, head_model=None) -> list[Binding]:
        return model_bindings(network, head_model, self.prefix, self.lm_head)

    def load_into(self, network: XLNetNetwork, head_model=None) -> None:
        """Checks every tensor against ``network`` (and ``head_model``) and only then assigns them."""
        load_tensors(self, network, head_model)


def read_huggingface_directory(directory: str, **overrides: Any) -> HuggingFaceModel:
    """Reads config.json, the safetensors weights, spiece.model and tokenizer_config.json (when
    present) of a transformers XLNet directory (local or gs://) and checks the config.

    ``overrides``: ModelConfig fields from command-line flags (None = not given).
    """
    from tfrecords.vocabulary import parse_vocab

    directory = directory.rstrip("/") or "/"
    join = joiner(directory)
    vocab = None

    def same_vocabulary(config: ModelConfig, source: str) -> None:  # once config.json is read, before the weights
        nonlocal vocab
        if not exists(join(VOCAB)):
            raise HuggingFaceFormatError(
                f"{directory} lacks {VOCAB}, the SentencePiece model (transformers v5's tokenizer save_pretrained "
                f"writes only tokenizer.json: copy {VOCAB} from the model's Hub repository or original release)")
        checked_file(join(VOCAB), directory, directory)
        vocab = parse_vocab(read_bytes(join(VOCAB)), join(VOCAB), source=join(VOCAB))
        if vocab.vocab_size != config.vocab_size:
            raise HuggingFaceFormatError(f"{join(VOCAB)} has {vocab.vocab_size} pieces but {source} has vocab_size "
                                         f"{config.vocab_size}: they are not from the same model")

    weights = read_huggingface_weights(directory, "--huggingface", check=same_vocabulary, **overrides)
    uncased = None
    if exists(join(TOKENIZER_CONFIG)):
        checked_file(join(TOKENIZER_CONFIG), directory, directory)
        tokenizer = read_json(join(TOKENIZER_CONFIG))
        if isinstance(tokenizer, dict) and isinstance(tokenizer.get("do_lower_case"), bool):
            uncased = tokenizer["do_lower_case"]
    return HuggingFaceModel(**{field.name: getattr(weights, field.name)
                               for field in dataclasses.fields(HuggingFaceWeights)},
                            sp_model_proto=vocab.model_proto, special_ids=vocab.special_ids.to_dict(), uncased=uncased)


def tokenizer_config(sp_model_proto: bytes, special_ids: Mapping[str, int], uncased: bool) -> dict[str, Any]:
    """tokenizer_config.json for XLNetTokenizer: its flags, our casing and our special pieces."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=sp_model_proto)
    piece = lambda name: processor.id_to_piece(int(special_ids[name]))  # noqa: E731
    return {"tokenizer_class": "XLNetTokenizer", "do_lower_case": bool(uncased), "remove_space": True,
            "keep_accents": False, "padding_side": "left",
            "bos_token": piece("bos"), "eos_token": piece("eos"), "unk_token": piece("unk"),
            "sep_token": piece("sep"), "pad_token": piece("pad"), "cls_token": piece("cls"),
            "mask_token": piece("mask"), "additional_special_tokens": [piece("eop"), piece("eod")]}


def write_huggingface_directory(output: str, network: XLNetNetwork, model_config: ModelConfig,
                                special_ids: Mapping[str, int], sp_model_proto: bytes, uncased: bool, head=None,
                                head_spec: Optional[HeadSpec] = None) -> list[str]:
    """Writes config.json, model.safetensors, spiece.model, tokenizer_config.json, tokenizer.json
    (trainer/conversion/huggingface_tokenizer.py) and special_tokens_map.json to ``output`` (local or gs://);
    returns the files written.

    ``model_config``: the configuration to record (the model directory's; ``network`` may be its
    whole-sequence version). ``head``/``head_spec``: an XLNetForSequenceTask or
    XLNetForQuestionAnswering and what it is, for a fine-tuned model (loaded by
    XLNetForSequenceClassification / XLNetForMultipleChoice / XLNetForQuestionAnswering), else
    XLNetLMHeadModel.
    """
    import safetensors.numpy

    join = joiner(output.rstrip("/") or "/")
    config = huggingface_config(model_config, special_ids, head_spec)  # refuses what it cannot express first
    file_system.makedirs(output)
    # transformers refuses a safetensors file whose metadata lacks the framework format.
    write_bytes(join(WEIGHTS), safetensors.numpy.save(export_tensors(network, head), metadata={"format": "pt"}))
    write_bytes(join(VOCAB), sp_model_proto)
    tokenizer = tokenizer_config(sp_model_proto, special_ids, uncased)
    write_json(join(TOKENIZER_CONFIG), tokenizer)
    # Compact, as tokenizers writes it: one line per piece would make a 32000-piece file needlessly long.
    write_bytes(join(TOKENIZER), json.dumps(tokenizer_json(sp_model_proto, special_ids, uncased),
                                            ensure_ascii=False).encode("utf-8"))
    write_json(join(SPECIAL_TOKENS_MAP), {key: value for key, value in tokenizer.items()
                                          if key.endswith("_token") or key == "additional_special_tokens"})
    write_json(join(CONFIG), config)  # last: a directory with config.json is complete
    return [join(name) for name in (CONFIG, WEIGHTS, VOCAB, TOKENIZER_CONFIG, TOKENIZER, SPECIAL_TOKENS_MAP)]

