"""The Hugging Face transformers XLNet weights, on any Keras backend: config.json <-> ModelConfig,
the names of our variables in transformers, and model.safetensors read with NumPy and ``safetensors``.

Portable: NumPy, ``safetensors`` and Keras only, no TensorFlow import (a local directory is read with
Python's own I/O through trainer/runtime/storage.py; a gs:// one needs TensorFlow's file system, imported
only then). trainer/conversion/huggingface_format.py builds the TensorFlow commands (`xlnet export --format
huggingface`, `xlnet import-checkpoint --huggingface`) on these rules, with the tokenizer files;
:func:`load_huggingface_network` is the loader for every backend. Names and layouts are those of transformers
v5 (``XLNetLMHeadModel``, ``XLNetForSequenceClassification``, ``XLNetForMultipleChoice``,
``XLNetForQuestionAnswering``):

* ``transformer.word_embedding.weight`` [vocab, d_model], ``transformer.mask_emb`` [1, 1, d_model];
* per layer ``transformer.layer.{i}.rel_attn.{q,k,v,o,r}`` [d_model, n_head, d_head] (our layout),
  ``rel_attn.{r_w_bias,r_r_bias,r_s_bias}`` [n_head, d_head] (a slice of our stacked
  [n_layer, ...] biases, or our one shared set when untie_r is off), ``rel_attn.seg_embed``
  [2, n_head, d_head], ``rel_attn.layer_norm.{weight,bias}``, ``ff.layer_norm.{weight,bias}``,
  ``ff.layer_{1,2}.{weight,bias}`` (torch Linear weights are [out, in]: our kernels transposed);
* ``lm_loss.bias`` [vocab] (``lm_loss.weight`` is tied to the word embedding and not saved);
* heads: ``sequence_summary.summary.{weight,bias}`` [d_model, d_model] and ``logits_proj``
  [num_labels or 1, d_model] (+ bias), the XLNetForSequenceTask of trainer/models/sequence_model.py; for
  squad (trainer/models/question_answering.py, layers named as transformers' poolers) ``start_logits.dense``
  [1, d_model], ``end_logits.dense_0`` [d_model, 2 d_model], ``end_logits.LayerNorm``,
  ``end_logits.dense_1`` [1, d_model], ``answer_class.dense_0`` [d_model, 2 d_model] and
  ``answer_class.dense_1.weight`` [1, d_model] (no bias), each with the concatenation order of
  both (end: [h_j ; h_start], answer class: [start ; <cls>]), and config.json's
  ``start_n_top``/``end_n_top`` as our beam widths.

Hugging Face has no ``untie_r``: its biases are always per layer. On import, biases equal
(bit for bit) in every layer come back tied (untie_r false), which is what our export of a tied
model writes; otherwise they stay per layer (untie_r true). Fields of our ModelConfig that
transformers has no field for (bi_data, mem_len and reuse_len as pretraining uses them, dropatt)
travel in config.json under ``"xlnet_pretraining"``, a key transformers keeps and ignores, so a
round trip gives back the same configuration.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import posixpath
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional

import numpy as np

from tfrecords.errors import UsageError
from tfrecords.json_documents import json_kind, load_json
from trainer.conversion.safetensors_files import (
    FLOAT_DTYPES,
    TensorHeader,
    WeightsFile,
    WeightsFileError,
    checked_file,
    index_shard_names,
    numpy_dtype_problem,
    read_header,
    read_tensor,
    read_tensors,
)
from trainer.models.config import ModelConfig, expected_type, has_type, shown, type_problems
from trainer.models.head_spec import HeadSpec
from trainer.runtime.storage import StorageError, exists, read_bytes, read_json

if TYPE_CHECKING:  # the network's module: loaded only when a network is built (load_huggingface_network)
    import keras

    from trainer.models.network import XLNetNetwork

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
TORCH_WEIGHTS = "pytorch_model.bin"
PRETRAINING_KEY = "xlnet_pretraining"  # our ModelConfig fields transformers has no field for
PRETRAINING_FIELDS = ("bi_data", "mem_len", "reuse_len", "dropatt")
BASE_PREFIX = "transformer."
LAYER_NORM_EPSILON = 1e-12  # fixed in our layers (trainer/layers/attention.py)

# Our ff_activation -> transformers' name. Ours "gelu" is the original's tanh approximation,
# transformers' "gelu_new"; transformers' "gelu" is the exact (erf) GELU, ours "gelu_exact".
ACTIVATION_TO_HF = {"gelu": "gelu_new", "relu": "relu", "gelu_exact": "gelu"}
ACTIVATION_FROM_HF = {hf: ours for ours, hf in ACTIVATION_TO_HF.items()}

LM_ARCHITECTURE = "XLNetLMHeadModel"
BASE_ARCHITECTURE = "XLNetModel"
# Our fine-tuning task -> the transformers class holding the same head.
TASK_ARCHITECTURES = {"classification": "XLNetForSequenceClassification",
                      "regression": "XLNetForSequenceClassification",
                      "multiple-choice": "XLNetForMultipleChoice",
                      "squad": "XLNetForQuestionAnswering"}
NOT_YET = {"XLNetForQuestionAnsweringSimple": "its qa_outputs layer scores starts and ends independently; "
                                              "`xlnet finetune --task squad` has XLNetForQuestionAnswering's head "
                                              "(start_logits, end_logits conditioned on the start, answer_class), "
                                              "so import an XLNetForQuestionAnswering model instead",
           "XLNetForTokenClassification": "`xlnet finetune` has no token-classification task"}
# Tensor-name prefixes of each head (for a config.json without "architectures").
HEAD_PREFIXES = ("logits_proj.", "sequence_summary.", "start_logits.", "end_logits.", "answer_class.")
# XLNetConfig summary settings our SequenceSummary implements (last position, dense + tanh).
SUMMARY = {"summary_type": "last", "summary_use_proj": True, "summary_activation": "tanh"}


class HuggingFaceFormatError(UsageError):
    """A Hugging Face directory, config or tensor set we cannot use; the message names the file or field."""


# ------------------------------------------------------------------------------------ heads
def head_config_fields(head: Optional[HeadSpec]) -> dict[str, Any]:
    """config.json fields that say which class loads the model and, for its head, the labels."""
    if head is None:
        return {"architectures": [LM_ARCHITECTURE]}
    if head.task == "squad":
        return {"architectures": [TASK_ARCHITECTURES[head.task]], "start_n_top": head.start_n_top,
                "end_n_top": head.end_n_top}
    fields: dict[str, Any] = {"architectures": [TASK_ARCHITECTURES[head.task]], **SUMMARY}
    if head.task == "classification":
        fields["problem_type"] = "single_label_classification"
        fields["id2label"] = {str(i): label for i, label in enumerate(head.labels)}
        fields["label2id"] = {label: i for i, label in enumerate(head.labels)}
    elif head.task == "regression":
        fields["problem_type"] = "regression"
        fields["id2label"], fields["label2id"] = {"0": "LABEL_0"}, {"LABEL_0": 0}
    return fields


def head_from_config(values: Mapping[str, Any], names: Iterable[str], source: str) -> Optional[HeadSpec]:
    """The head a config.json (and its tensor ``names``) describes, or None for a bare or LM model."""
    architectures = values.get("architectures") or []
    if len(architectures) > 1:
        raise HuggingFaceFormatError(f"{source}: architectures {architectures} names several classes; "
                                     "expected one XLNet class")
    if not architectures:
        names = list(names)
        if any(name.startswith(HEAD_PREFIXES) for name in names):
            task = "squad" if any(name.startswith("answer_class.") for name in names) else "classification"
            raise HuggingFaceFormatError(f"{source} has no \"architectures\" but the weights hold a head: "
                                         f"add e.g. \"architectures\": [\"{TASK_ARCHITECTURES[task]}\"]")
        return None
    architecture = architectures[0]
    if architecture in NOT_YET:
        raise HuggingFaceFormatError(f"{source}: architectures {architecture} is not supported: "
                                     f"{NOT_YET[architecture]}")
    if architecture in (LM_ARCHITECTURE, BASE_ARCHITECTURE):
        return None
    if architecture not in TASK_ARCHITECTURES.values():
        known = sorted({LM_ARCHITECTURE, BASE_ARCHITECTURE, *TASK_ARCHITECTURES.values()})
        raise HuggingFaceFormatError(f"{source}: architectures {architecture} is not an XLNet class we import "
                                     f"(one of {', '.join(known)})")
    if architecture == TASK_ARCHITECTURES["squad"]:
        widths = {key: values.get(key, 5) for key in ("start_n_top", "end_n_top")}  # XLNetConfig's defaults
        bad = [f"{key} {value!r}" for key, value in widths.items()
               if isinstance(value, bool) or not isinstance(value, int) or value < 1]
        if bad:
            raise HuggingFaceFormatError(f"{source}: {' and '.join(bad)} is not supported (the beam widths must be "
                                         "integers of at least 1)")
        return HeadSpec("squad", **widths)
    for key, needed in SUMMARY.items():
        if values.get(key, needed) != needed:
            raise HuggingFaceFormatError(f"{source}: {key} {values[key]!r} is not supported (the head summarises "
                                         f"with {key} {needed!r})")
    if values.get("summary_proj_to_labels"):
        raise HuggingFaceFormatError(f"{source}: summary_proj_to_labels true is not supported (the summary "
                                     "projects to d_model)")
    if architecture == TASK_ARCHITECTURES["multiple-choice"]:
        return HeadSpec("multiple-choice")
    id2label = values.get("id2label") or {"0": "LABEL_0", "1": "LABEL_1"}  # transformers' default: 2 labels
    try:
        labels = tuple(str(id2label[key]) for key in sorted(id2label, key=int))
    except (ValueError, TypeError):
        raise HuggingFaceFormatError(f"{source}: id2label keys must be class ids 0..n-1") from None
    problem = values.get("problem_type")
    if problem == "regression" or (problem is None and len(labels) == 1):
        return HeadSpec("regression")
    if problem not in (None, "single_label_classification"):
        raise HuggingFaceFormatError(f"{source}: problem_type {problem!r} is not supported (only "
                                     "single_label_classification and regression)")
    if len(labels) < 2:
        raise HuggingFaceFormatError(f"{source}: classification needs at least 2 labels in id2label, got {len(labels)}")
    return HeadSpec("classification", labels)


# --------------------------------------------------------------------------------- config
def huggingface_config(config: ModelConfig, special_ids: Mapping[str, int], head: Optional[HeadSpec] = None
                       ) -> dict[str, Any]:
    """Our ModelConfig (plus the vocabulary's special ids and the head) -> config.json values that
    transformers' XLNetConfig loads. HuggingFaceFormatError names a field it cannot express."""
    if config.d_head * config.n_head != config.d_model:
        raise HuggingFaceFormatError(f"model_config.json has d_head {config.d_head} with d_model {config.d_model} and "
                                     f"n_head {config.n_head}: transformers requires d_head = d_model / n_head")
    if config.attn_type != "bi":
        raise HuggingFaceFormatError(f"model_config.json has attn_type {config.attn_type!r}: only 'bi' is exported")
    if config.ff_activation not in ACTIVATION_TO_HF:
        raise HuggingFaceFormatError(f"model_config.json has ff_activation {config.ff_activation!r}, which has no "
                                     "transformers name here")
    values = {
        "model_type": "xlnet", "vocab_size": config.vocab_size, "d_model": config.d_model,
        "n_layer": config.n_layer, "n_head": config.n_head, "d_head": config.d_head, "d_inner": config.d_inner,
        "ff_activation": ACTIVATION_TO_HF[config.ff_activation], "attn_type": "bi",
        "initializer_range": config.initializer_range, "layer_norm_eps": LAYER_NORM_EPSILON,
        "dropout": config.dropout, "clamp_len": config.clamp_len, "same_length": False,
        # Inference settings for transformers users: whole sequences, no pretraining batch layout.
        "bi_data": False, "mem_len": None, "reuse_len": None, "use_mems_eval": True, "use_mems_train": False,
        "summary_type": "last", "summary_use_proj": True, "summary_activation": "tanh",
        "summary_last_dropout": config.dropout, "start_n_top": 5, "end_n_top": 5,
        "pad_token_id": special_ids["pad"], "bos_token_id": special_ids["bos"], "eos_token_id": special_ids["eos"],
        "tie_word_embeddings": True, "dtype": "float32",
        PRETRAINING_KEY: {name: getattr(config, name) for name in PRETRAINING_FIELDS},
    }
    values.update(head_config_fields(head))
    return values


# config.json's numbers that are ModelConfig fields of the same name (typed there), and the others read.
SHARED_NUMBERS = ("vocab_size", "n_layer", "d_model", "n_head", "d_head", "d_inner", "clamp_len", "dropout",
                  "initializer_range")
OTHER_NUMBERS = {"n_token": int, "layer_norm_eps": float}


def config_type_problems(values: Mapping[str, Any]) -> list[str]:
    """``FIELD: expected TYPE, got VALUE`` for each number of config.json that we read and that holds
    another type (a string, null, a bool): the typed check --config gets (trainer/models/config.py),
    so that a value is named before any arithmetic on it."""
    problems = type_problems(ModelConfig, {name: values[name] for name in SHARED_NUMBERS if name in values})
    return problems + [f"{name}: expected {expected_type(kind)}, got {shown(values[name])}"
                       for name, kind in OTHER_NUMBERS.items() if name in values and not has_type(values[name], kind)]


# config.json's other fields that we read, and their JSON type (null is read as absent).
OTHER_FIELDS: dict[str, Any] = {"architectures": tuple[str, ...], "model_type": str, "attn_type": str,
                                "ff_activation": str, "problem_type": str, "summary_type": str,
                                "summary_activation": str, "same_length": bool, "summary_use_proj": bool,
                                "summary_proj_to_labels": bool, "start_n_top": int, "end_n_top": int,
                                PRETRAINING_KEY: dict, "id2label": dict}


def check_field_types(values: Mapping[str, Any], source: str) -> None:
    """Every field of config.json we read holds its JSON type (numbers: :func:`config_type_problems`), before any
    is used: HuggingFaceFormatError names the file, each wrong field and what it holds instead (a string where a
    list of class names is expected is said as such)."""
    problems = config_type_problems(values)
    for name, kind in OTHER_FIELDS.items():
        value = values.get(name)
        if value is not None and not (isinstance(value, dict) if kind is dict else has_type(value, kind)):
            wanted = "an object" if kind is dict else expected_type(kind)
            value_shown = shown(value)
            value_shown = value_shown if len(value_shown) <= 80 else value_shown[:77] + "..."
            problems.append(f"{name}: expected {wanted}, got {json_kind(value)} {value_shown}")
    if problems:
        raise HuggingFaceFormatError(f"{source}: " + "; ".join(problems))


def model_config_from_huggingface(values: Mapping[str, Any], source: str, **overrides: Any) -> ModelConfig:
    """config.json values -> our ModelConfig (untie_r true; the tensors decide, see ``tied_biases``).

    Fields transformers has no field for come from ``"xlnet_pretraining"`` when our export wrote
    it, else from the ModelConfig defaults; ``overrides`` (command-line flags, None = not given)
    win over both. A field we cannot honour raises HuggingFaceFormatError naming it.
    """
    if values.get("model_type") != "xlnet":
        raise HuggingFaceFormatError(f"{source}: model_type {values.get('model_type')!r} is not 'xlnet'")
    problems = config_type_problems(values)
    if problems:
        raise HuggingFaceFormatError(f"{source}: " + "; ".join(problems))
    if "vocab_size" not in values and "n_token" in values:  # the old name, which transformers still maps
        values = dict(values, vocab_size=values["n_token"])
    missing = [key for key in ("vocab_size", "d_model", "n_layer", "n_head", "d_inner") if key not in values]
    if missing:
        raise HuggingFaceFormatError(f"{source} lacks {', '.join(missing)}")
    refused = []
    if values.get("attn_type", "bi") != "bi":
        refused.append(f"attn_type {values['attn_type']!r} (only 'bi')")
    if values.get("same_length", False):
        refused.append("same_length true (only false)")
    if float(values.get("layer_norm_eps", LAYER_NORM_EPSILON)) != LAYER_NORM_EPSILON:
        refused.append(f"layer_norm_eps {values['layer_norm_eps']} (only {LAYER_NORM_EPSILON})")
    d_model, n_head = int(values["d_model"]), int(values["n_head"])
    d_head = values.get("d_head") or (d_model // n_head if n_head else 0)
    if n_head <= 0 or d_model % n_head or d_head != d_model // n_head:
        refused.append(f"d_head {d_head} with d_model {d_model} and n_head {n_head} (d_head must be d_model / n_head)")
    activation = values.get("ff_activation", "gelu")
    ours = ACTIVATION_FROM_HF.get(activation)
    if ours is None:
        refused.append(f"ff_activation {activation!r} (one of {', '.join(sorted(ACTIVATION_FROM_HF))})")
    if refused:
        raise HuggingFaceFormatError(f"{source}: cannot honour " + "; ".join(refused))
    extra = values.get(PRETRAINING_KEY) or {}
    dropout = float(values.get("dropout", ModelConfig.dropout))
    fields = dict(vocab_size=int(values["vocab_size"]), n_layer=int(values["n_layer"]), d_model=d_model,
                  n_head=n_head, d_head=int(d_head), d_inner=int(values["d_inner"]), ff_activation=ours,
                  untie_r=True, dropout=dropout, dropatt=dropout, attn_type="bi",
                  clamp_len=int(values.get("clamp_len", -1)),
                  initializer_range=float(values.get("initializer_range", ModelConfig.initializer_range)))
    fields.update({name: extra[name] for name in PRETRAINING_FIELDS if name in extra})
    fields.update({name: value for name, value in overrides.items() if value is not None})
    try:
        return ModelConfig(**fields)
    except ValueError as error:
        raise HuggingFaceFormatError(f"{source}: {error}") from None


# -------------------------------------------------------------------------------- tensors
@dataclasses.dataclass(frozen=True)
class Binding:
    """One transformers tensor and where it lives in our model.

    ``layer``: index into a stacked [n_layer, ...] variable (per-layer biases, seg_embed).
    ``transpose``: a torch Linear weight [out, in] against our Keras kernel [in, out].
    """

    name: str
    variable: keras.Variable
    layer: Optional[int] = None
    transpose: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        shape = tuple(self.variable.shape)[0 if self.layer is None else 1:]
        return shape[::-1] if self.transpose else shape

    def value(self) -> np.ndarray:
        """The tensor as transformers holds it."""
        value = self.variable.numpy()
        if self.layer is not None:
            value = value[self.layer]
        return np.ascontiguousarray(value.T if self.transpose else value)


def network_bindings(network: XLNetNetwork, prefix: str = BASE_PREFIX) -> list[Binding]:
    """Bindings of the encoder (``prefix`` + transformers' XLNetModel names); tied biases bind
    every layer's name to the one shared variable."""
    biases = network.attention_biases
    bindings = [Binding(f"{prefix}word_embedding.weight", network.word_embedding.embeddings),
                Binding(f"{prefix}mask_emb", network.mask_emb)]
    for i, block in enumerate(network.blocks):
        layer = f"{prefix}layer.{i}."
        attention, feed_forward = block.attention, block.feed_forward
        bindings += [Binding(f"{layer}rel_attn.{name}", getattr(attention, f"{name}_kernel")) for name in "qkvor"]
        bindings += [Binding(f"{layer}rel_attn.{name}", getattr(biases, name), i if biases.untie_r else None)
                     for name in ("r_w_bias", "r_r_bias", "r_s_bias")]
        bindings += [Binding(f"{layer}rel_attn.seg_embed", biases.seg_embed, i),
                     Binding(f"{layer}rel_attn.layer_norm.weight", attention.layer_norm.gamma),
                     Binding(f"{layer}rel_attn.layer_norm.bias", attention.layer_norm.beta),
                     Binding(f"{layer}ff.layer_norm.weight", feed_forward.layer_norm.gamma),
                     Binding(f"{layer}ff.layer_norm.bias", feed_forward.layer_norm.beta)]
        for dense in ("layer_1", "layer_2"):
            bindings += [Binding(f"{layer}ff.{dense}.weight", getattr(feed_forward, dense).kernel, transpose=True),
                         Binding(f"{layer}ff.{dense}.bias", getattr(feed_forward, dense).bias)]
    return bindings


def dense_bindings(name: str, dense, bias: bool = True) -> list[Binding]:
    """A Keras Dense as a torch Linear: ``name.weight`` [out, in] (the kernel transposed), ``name.bias``."""
    return [Binding(f"{name}.weight", dense.kernel, transpose=True)] + \
        ([Binding(f"{name}.bias", dense.bias)] if bias else [])


def question_answering_bindings(head) -> list[Binding]:
    """Bindings of a trainer.models.question_answering.XLNetForQuestionAnswering's own layers, as transformers'
    XLNetForQuestionAnswering names them (our layers carry the same names)."""
    start, end, answer = head.start_logits, head.end_logits, head.answer_class
    return [*dense_bindings("start_logits.dense", start.dense),
            *dense_bindings("end_logits.dense_0", end.dense_0),
            Binding("end_logits.LayerNorm.weight", end.layer_norm.gamma),
            Binding("end_logits.LayerNorm.bias", end.layer_norm.beta),
            *dense_bindings("end_logits.dense_1", end.dense_1),
            *dense_bindings("answer_class.dense_0", answer.dense_0),
            *dense_bindings("answer_class.dense_1", answer.dense_1, bias=False)]


def head_bindings(head) -> list[Binding]:
    """Bindings of a head model's own layers: an XLNetForSequenceTask's summary and logits_proj,
    or an XLNetForQuestionAnswering's start_logits, end_logits and answer_class."""
    if hasattr(head, "answer_class"):
        return question_answering_bindings(head)
    summary, projection = head.sequence_summary.summary, head.logits_proj
    return [Binding("sequence_summary.summary.weight", summary.kernel, transpose=True),
            Binding("sequence_summary.summary.bias", summary.bias),
            Binding("logits_proj.weight", projection.kernel, transpose=True),
            Binding("logits_proj.bias", projection.bias)]


def model_bindings(network: XLNetNetwork, head=None, prefix: str = BASE_PREFIX, lm_head: bool = True
                   ) -> list[Binding]:
    """Every tensor of the transformers model: the encoder plus ``head``'s layers, or plus
    ``lm_loss.bias`` when there is no head and ``lm_head`` (XLNetLMHeadModel; XLNetModel has none)."""
    bindings = network_bindings(network, prefix)
    if head is not None:
        bindings += head_bindings(head)
    elif lm_head:
        bindings.append(Binding("lm_loss.bias", network.lm_bias))
    return bindings


def export_tensors(network: XLNetNetwork, head=None) -> dict[str, np.ndarray]:
    """name -> float32 array of the transformers model (XLNetLMHeadModel, or the head's class)."""
    return {binding.name: binding.value() for binding in model_bindings(network, head)}


def expected_shapes(config: ModelConfig, head: Optional[HeadSpec] = None, prefix: str = BASE_PREFIX,
                    lm_head: bool = True) -> dict[str, tuple[int, ...]]:
    """name -> shape of every tensor of the transformers model ``config`` (and ``head``) makes, computed from the
    configuration alone: the names and shapes of :func:`model_bindings` (a test holds the two equal), known before
    anything is built, so that a directory is checked against them before a byte is allocated."""
    d, h, dh, di = config.d_model, config.n_head, config.d_head, config.d_inner
    shapes = {f"{prefix}word_embedding.weight": (config.vocab_size, d), f"{prefix}mask_emb": (1, 1, d)}
    for i in range(config.n_layer):
        layer = f"{prefix}layer.{i}."
        shapes.update({f"{layer}rel_attn.{name}": (d, h, dh) for name in "qkvor"})
        shapes.update({f"{layer}rel_attn.{name}": (h, dh) for name in ("r_w_bias", "r_r_bias", "r_s_bias")})
        shapes.update({f"{layer}rel_attn.seg_embed": (2, h, dh), f"{layer}rel_attn.layer_norm.weight": (d,),
                       f"{layer}rel_attn.layer_norm.bias": (d,), f"{layer}ff.layer_norm.weight": (d,),
                       f"{layer}ff.layer_norm.bias": (d,), f"{layer}ff.layer_1.weight": (di, d),
                       f"{layer}ff.layer_1.bias": (di,), f"{layer}ff.layer_2.weight": (d, di),
                       f"{layer}ff.layer_2.bias": (d,)})
    if head is not None and head.task == "squad":
        shapes.update({"start_logits.dense.weight": (1, d), "start_logits.dense.bias": (1,),
                       "end_logits.dense_0.weight": (d, 2 * d), "end_logits.dense_0.bias": (d,),
                       "end_logits.LayerNorm.weight": (d,), "end_logits.LayerNorm.bias": (d,),
                       "end_logits.dense_1.weight": (1, d), "end_logits.dense_1.bias": (1,),
                       "answer_class.dense_0.weight": (d, 2 * d), "answer_class.dense_0.bias": (d,),
                       "answer_class.dense_1.weight": (1, d)})
    elif head is not None:
        shapes.update({"sequence_summary.summary.weight": (d, d), "sequence_summary.summary.bias": (d,),
                       "logits_proj.weight": (head.num_labels, d), "logits_proj.bias": (head.num_labels,)})
    elif lm_head:
        shapes["lm_loss.bias"] = (config.vocab_size,)
    return shapes


def check_tensors(bindings: list[Binding], tensors: Mapping[str, np.ndarray], source: str,
                  optional: Iterable[str] = ()) -> None:
    """Names every missing, extra, mis-shaped or non-float tensor in one HuggingFaceFormatError.
    ``optional``: extra names allowed (the tied ``lm_loss.weight``, checked by the caller)."""
    held = {name: (tuple(array.shape), str(array.dtype), bool(np.issubdtype(array.dtype, np.floating)))
            for name, array in tensors.items()}
    check_fit({binding.name: binding.shape for binding in bindings}, held, source, optional)


def check_headers(expected: Mapping[str, tuple[int, ...]], headers: Mapping[str, TensorHeader], source: str,
                  optional: Mapping[str, tuple[int, ...]]) -> None:
    """:func:`check_tensors`'s check on the files' headers, before any tensor is read (or anything built);
    ``optional``: tensors allowed but not needed, with the shape they must have when present."""
    held = {name: (header.shape, header.dtype, header.dtype in FLOAT_DTYPES) for name, header in headers.items()}
    check_fit({**expected, **{name: shape for name, shape in optional.items() if name in headers}}, held, source,
              optional)


def check_fit(expected: Mapping[str, tuple[int, ...]], held: Mapping[str, tuple[tuple[int, ...], str, bool]],
              source: str, optional: Iterable[str]) -> None:
    """The one rule of both checks: ``held`` (name -> shape, dtype, whether a float) against ``expected``."""
    problems = [f"missing tensor {name}" for name in expected if name not in held]
    problems += [f"unexpected tensor {name}" for name in sorted(held)
                 if name not in expected and name not in set(optional)]
    for name, shape in expected.items():
        if name not in held:
            continue
        held_shape, dtype, is_float = held[name]
        if tuple(held_shape) != tuple(shape):
            problems.append(f"tensor {name} has shape {list(held_shape)}, the config needs {list(shape)}")
        elif not is_float:
            problems.append(f"tensor {name} has dtype {dtype}, expected a float type")
    if problems:
        raise HuggingFaceFormatError(f"{source} does not fit the model: " + "; ".join(problems))


def assign_tensors(bindings: list[Binding], tensors: Mapping[str, np.ndarray]) -> None:
    """Assigns checked tensors (``check_tensors``): per-layer slices are stacked into their
    variable, a tied variable takes its (identical) value once."""
    values: dict[int, tuple[keras.Variable, np.ndarray]] = {}  # by id: Keras 3 variables are not hashable
    for binding in bindings:
        value = np.asarray(tensors[binding.name], np.float32)
        value = value.T if binding.transpose else value
        variable = binding.variable
        if binding.layer is None:
            values[id(variable)] = (variable, value)
        else:
            stacked = values.setdefault(id(variable), (variable, np.empty(variable.shape, np.float32)))[1]
            stacked[binding.layer] = value
    for variable, value in values.values():
        variable.assign(value)


# Each layer's attention biases: bit-identical in every layer when a model ties them (untie_r false).
ATTENTION_BIASES = ("r_w_bias", "r_r_bias", "r_s_bias")


def tied_biases(tensors: Mapping[str, np.ndarray], n_layer: int, prefix: str = BASE_PREFIX) -> bool:
    """True when every layer holds bit-identical r_w/r_r/r_s biases (a model exported with
    untie_r false, or a one-layer model): they are imported as one shared set."""
    for name in ATTENTION_BIASES:
        layers = [tensors.get(f"{prefix}layer.{i}.rel_attn.{name}") for i in range(n_layer)]
        if any(layer is None for layer in layers):
            return False  # the shape check names what is missing
        first = np.asarray(layers[0])
        if any(np.asarray(layer).shape != first.shape or np.asarray(layer).tobytes() != first.tobytes()
               for layer in layers[1:]):
            return False
    return True


def check_config_against_tensors(config: ModelConfig, tensors: Mapping[str, Any], prefix: str,
                                 source: str) -> None:
    """The sizes of ``source`` (config.json) checked against the weights (``tensors``: name -> anything with a
    ``shape``, arrays or the files' TensorHeaders) before a network is built from them: a config with more layers than the weights hold, or an embedding, attention or
    feed-forward larger than its tensors, would otherwise build (for minutes, or out of memory) a
    model no weight fits. HuggingFaceFormatError names the file and the field. Tensors
    that are missing or extra are left to ``check_tensors``, which names them all."""
    layers = {int(name[len(prefix) + len("layer."):].split(".", 1)[0]) for name in tensors
              if name.startswith(f"{prefix}layer.") and name[len(prefix) + len("layer."):].split(".", 1)[0].isdigit()}
    if config.n_layer > len(layers):
        held = f"{len(layers)} layers ({prefix}layer.0 to {prefix}layer.{len(layers) - 1})" if layers else "no layer"
        raise HuggingFaceFormatError(f"{source}: n_layer {config.n_layer}, but its weights hold {held}; "
                                     "correct n_layer")
    expected = {f"{prefix}word_embedding.weight": ((config.vocab_size, config.d_model), "vocab_size and d_model"),
                f"{prefix}layer.0.rel_attn.q": ((config.d_model, config.n_head, config.d_head),
                                                "d_model, n_head and d_head"),
                f"{prefix}layer.0.ff.layer_1.weight": ((config.d_inner, config.d_model), "d_inner and d_model")}
    for name, (shape, fields) in expected.items():
        held = tensors.get(name)
        if held is not None and math.prod(shape) > math.prod(held.shape):  # same size, other shape: check_tensors says
            raise HuggingFaceFormatError(f"{source}: {fields} make {name} {list(shape)}, but its weights hold "
                                         f"{list(held.shape)}; correct {fields}")


def check_tied_output(tensors: Mapping[str, np.ndarray], prefix: str, source: str) -> None:
    """``lm_loss.weight``, when saved, must be the word embedding: our output layer is tied to it."""
    if "lm_loss.weight" not in tensors:
        return
    embedding = tensors.get(f"{prefix}word_embedding.weight")
    if embedding is None or not np.array_equal(tensors["lm_loss.weight"], embedding):
        raise HuggingFaceFormatError(f"{source}: lm_loss.weight differs from {prefix}word_embedding.weight; only a "
                                     "tied output layer (tie_word_embeddings true) can be imported")




# ------------------------------------------------------------------------------ directory
def joiner(directory: str):
    """A path joiner for one directory: plain strings, never pathlib (gs://b/x must stay gs://b/x)."""
    return lambda name: posixpath.join(directory, name)


def check_readable_here(path: str) -> None:
    """A path with a scheme (gs://) is read through TensorFlow's file system (trainer/runtime/storage.py):
    where TensorFlow is not installed (a JAX or PyTorch machine), one sentence naming the path."""
    if "://" in path and importlib.util.find_spec("tensorflow") is None:
        raise HuggingFaceFormatError(f"{path} is not a local path: reading it needs TensorFlow's file system "
                                     "(tf.io.gfile), and TensorFlow is not installed here; copy the directory to a "
                                     "local path first (e.g. gsutil -m cp -r) and load that")


def is_directory(path: str) -> bool:
    """Whether ``path`` is a directory: a local one without TensorFlow, a gs:// one through tf.io.gfile."""
    if "://" not in path:
        return os.path.isdir(path)
    import tensorflow as tf  # only for a path with a scheme, see check_readable_here

    return tf.io.gfile.isdir(path)


def read_directory_headers(directory: str) -> tuple[list[WeightsFile], dict[str, TensorHeader]]:
    """The weights files of a transformers model directory (model.safetensors, or every shard its
    model.safetensors.index.json names) and every tensor's header, checked (trainer/conversion/safetensors_files.py)
    and nothing else read. A pytorch_model.bin alone is refused with the way out."""
    join = joiner(directory)
    if exists(join(WEIGHTS)):
        return headers_of([checked_file(join(WEIGHTS), directory, directory)])
    if exists(join(WEIGHTS_INDEX)):
        index_path = join(WEIGHTS_INDEX)
        checked_file(index_path, directory, directory)
        weight_map = index_shard_names(load_json(read_bytes(index_path), index_path, WeightsFileError), index_path)
        files = []
        for shard in sorted(set(weight_map.values())):
            if not exists(join(shard)):
                raise HuggingFaceFormatError(f"{index_path} names shard {shard}, which {directory} lacks")
            files.append(checked_file(join(shard), directory, index_path))
        files, headers = headers_of(files)
        unlisted = sorted(set(weight_map) - set(headers))
        if unlisted:
            raise HuggingFaceFormatError(f"{index_path} maps tensors no shard holds: {', '.join(unlisted)}")
        return files, headers
    if exists(join(TORCH_WEIGHTS)):
        raise HuggingFaceFormatError(
            f"{directory} holds {TORCH_WEIGHTS} but no {WEIGHTS}: PyTorch pickles are not read here. Convert it "
            "with transformers, which writes safetensors: python -c \"from transformers import AutoModel; "
            f"AutoModel.from_pretrained('{directory}').save_pretrained('{directory.rstrip('/')}-safetensors')\" "
            "(then copy spiece.model beside it), or take model.safetensors from the Hub repository")
    raise HuggingFaceFormatError(f"{directory} has neither {WEIGHTS} nor {WEIGHTS_INDEX} (a Hugging Face model "
                                 "directory written by save_pretrained)")


def headers_of(files: list[WeightsFile]) -> tuple[list[WeightsFile], dict[str, TensorHeader]]:
    """``files`` and the headers of all their tensors; a tensor in two files, or a dtype NumPy cannot hold
    (bfloat16: the way out named), is refused."""
    headers: dict[str, TensorHeader] = {}
    for weights in files:
        for name, header in read_header(weights)[1].items():
            if name in headers:
                raise WeightsFileError(f"{weights.path} and {headers[name].file} both hold tensor {name}")
            headers[name] = header
    problem = numpy_dtype_problem(headers)
    if problem:
        raise HuggingFaceFormatError(problem)
    return files, headers


# -------------------------------------------------------------------------------- weights
@dataclasses.dataclass
class HuggingFaceWeights:
    """config.json and the weights of a transformers XLNet directory, read and checked against each
    other: our config (untie_r from the tensors), the head config.json names (or None), the tensors,
    their name prefix ("transformer." or "" for a bare XLNetModel) and whether they hold the LM head."""

    config: ModelConfig
    head: Optional[HeadSpec]
    tensors: dict[str, np.ndarray]
    prefix: str
    lm_head: bool
    config_source: str  # config.json's path, the source named by the config's errors
    source: str  # "<directory> (model.safetensors)", the source named by the tensors' errors


def read_huggingface_weights(directory: str, flag: Optional[str] = None,
                             check: Optional[Callable[[ModelConfig, str], None]] = None,
                             **overrides: Any) -> HuggingFaceWeights:
    """Reads config.json and the safetensors weights of a transformers XLNet directory (local, or gs:// where
    TensorFlow is installed) and checks them: config.json's fields and types, then every tensor's header against
    the config (:func:`check_config_against_tensors`, :func:`check_headers`), and only then reads the tensors, so
    that a directory that lies is refused before anything is allocated or built.

    ``flag``: the command-line flag that named ``directory``, for its errors. ``check``: the caller's own check of
    the config (and config.json's path), before the weights' (the import's: spiece.model's size). ``overrides``:
    ModelConfig fields from command-line flags (None = not given).
    """
    checked = read_checked_headers(directory, flag, check, **overrides)
    tensors = {name: array for weights in checked.files for name, array in read_tensors(weights).items()}
    config = checked.config.replace(untie_r=not tied_biases(tensors, checked.config.n_layer, checked.prefix))
    return HuggingFaceWeights(config, checked.head, tensors, checked.prefix, checked.lm_head, checked.config_source,
                              source=checked.source)


def read_huggingface_config(directory: str, flag: Optional[str] = None, **overrides: Any) -> ModelConfig:
    """The ModelConfig of a transformers XLNet directory, checked as :func:`read_huggingface_weights` checks it,
    with only the headers and the attention biases read (a run that reads the config first, and the weights
    once its network is built, reads the weights once)."""
    checked = read_checked_headers(directory, flag, **overrides)
    config = checked.config
    biases = {name: read_tensor(header) for name, header in checked.headers.items()
              if name.rsplit(".", 1)[-1] in ATTENTION_BIASES}
    return config.replace(untie_r=not tied_biases(biases, config.n_layer, checked.prefix))


@dataclasses.dataclass
class CheckedHeaders:
    """A transformers XLNet directory with config.json and every tensor's header read and checked against each
    other, no tensor read: the config before untie_r (which the tensors tell), the head, the tensors' prefix,
    whether they hold the LM head, the weights files and the headers."""

    config: ModelConfig
    head: Optional[HeadSpec]
    prefix: str
    lm_head: bool
    config_source: str
    source: str
    files: list[WeightsFile]
    headers: dict[str, TensorHeader]


def read_checked_headers(directory: str, flag: Optional[str] = None,
                         check: Optional[Callable[[ModelConfig, str], None]] = None,
                         **overrides: Any) -> CheckedHeaders:
    """config.json and the weights' headers of ``directory``, checked against each other
    (:func:`read_huggingface_weights` says how)."""
    directory = directory.rstrip("/") or "/"
    join = joiner(directory)
    check_readable_here(directory)
    if not is_directory(directory):
        raise HuggingFaceFormatError(f"{flag + ' ' if flag else ''}{directory!r} is not a directory")
    try:
        if exists(join(CONFIG)):
            checked_file(join(CONFIG), directory, directory)
        values = read_json(join(CONFIG))
    except StorageError as error:
        raise HuggingFaceFormatError(f"{error} (a Hugging Face model directory has {CONFIG})") from None
    if not isinstance(values, dict):
        raise HuggingFaceFormatError(f"{join(CONFIG)}: expected a JSON object")
    source = join(CONFIG)
    check_field_types(values, source)
    files, headers = read_directory_headers(directory)
    head = head_from_config(values, headers, source)
    architectures = values.get("architectures") or []
    prefix = "" if architectures == [BASE_ARCHITECTURE] or not any(n.startswith(BASE_PREFIX) for n in headers) \
        else BASE_PREFIX
    lm_head = head is None and (architectures == [LM_ARCHITECTURE] or (not architectures and "lm_loss.bias" in headers))
    config = model_config_from_huggingface(values, source, **overrides)
    if check is not None:
        check(config, source)
    # Every tensor's header against the config before a byte of tensor data is read or anything is built: a config
    # that lies (vocab_size 2e9 with the embedding missing) is refused here, in the memory of the headers.
    check_config_against_tensors(config, headers, prefix, source)
    weights_source = f"{directory} ({WEIGHTS})"
    tied_output = {"lm_loss.weight": (config.vocab_size, config.d_model)}  # saved by some, tied to the embedding
    check_headers(expected_shapes(config, head, prefix, lm_head), headers, weights_source, optional=tied_output)
    return CheckedHeaders(config, head, prefix, lm_head, source, weights_source, files, headers)


def load_tensors(weights: HuggingFaceWeights, network: XLNetNetwork, head_model=None) -> None:
    """Checks every tensor of ``weights`` against ``network`` (and ``head_model``) and only then assigns
    them; without an LM head in the weights, the network's output bias is set to zeros (a neutral one)."""
    bindings = model_bindings(network, head_model, weights.prefix, weights.lm_head)
    check_tensors(bindings, weights.tensors, weights.source, optional=("lm_loss.weight",))
    check_tied_output(weights.tensors, weights.prefix, weights.source)
    assign_tensors(bindings, weights.tensors)
    if not weights.lm_head:
        network.lm_bias.assign(np.zeros(network.lm_bias.shape, np.float32))


def load_huggingface_network(directory: str, dtype: Optional[str] = None, remat: str = "none",
                             pretraining: bool = False) -> XLNetNetwork:
    """The XLNet network of a Hugging Face directory (config.json and model.safetensors, as
    `xlnet export --format huggingface` or transformers' save_pretrained write them), on the current Keras
    backend: built from config.json (``build_network(config, dtype, remat)``) and given its weights, with
    NumPy and safetensors only.

    For inference unless ``pretraining``: bi_data off, so that any batch (of 1 too) is encoded row by row, as
    transformers does with the same directory. ``pretraining=True`` keeps what the directory's
    ``"xlnet_pretraining"`` block records (our export's bi_data, for a network that continues pretraining on
    bi_data records: [forward half, backward half] batches, even in size), as `xlnet import-checkpoint
    --huggingface` does.

    A local directory is read with Python's own I/O; a gs:// one needs TensorFlow's file system (a
    HuggingFaceFormatError names the path where TensorFlow is not installed). The encoder and the LM output
    bias are loaded (a model without an LM head gets a zero bias); a fine-tuned model's head tensors
    (XLNetForSequenceClassification, ...) are not read: `xlnet import-checkpoint --huggingface` imports a head.
    Every tensor is checked before any is read or assigned, and before the network is built: a missing file, a
    config the weights do not fit, a missing, unexpected or mis-shaped tensor raise HuggingFaceFormatError naming
    the file and the tensors; a damaged or forged weights file or index, WeightsFileError (a DataError).
    """
    from trainer.models.network import build_network

    weights = read_huggingface_weights(directory, **({} if pretraining else {"bi_data": False}))
    if weights.head is not None:  # the encoder only: the head's layers are not built here
        weights = dataclasses.replace(weights, tensors={name: value for name, value in weights.tensors.items()
                                                        if not name.startswith(HEAD_PREFIXES)})
    network = build_network(weights.config, dtype=dtype, remat=remat)
    load_tensors(weights, network)
    return network
