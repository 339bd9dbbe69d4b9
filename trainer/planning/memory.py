"""The analytic memory model of one replica's training step.

Every term is a count of the tensors the code allocates, from their shapes and dtypes; nothing is
fitted to measurements (benchmarks/memory.py measures how close it comes). What a replica holds:

* weights (float32 variables, also under the mixed policies) and AdamW's two slots per trained
  variable (trainer/runtime/optimization.py);
* the gradient accumulator the controller sums micro-step gradients into (trainer/runtime/
  controller.py ``_micro_steps``: one float32 copy of the trained variables, zeros before the
  first micro-step, allocated before the forward pass);
* the Transformer-XL memory (pretraining: trainer/tasks/pretraining.py ``MemoryState``, train and
  eval memories, and the new memory a step computes before it is stored; fine-tuning on long
  documents: the memory the last segment reads);
* the input batch and the masks built from it on the device, shared by every layer;
* the activations the backward pass needs, per layer and remat mode (the tensors the gradients
  of trainer/layers/attention.py, feed_forward.py and transformer_block.py read), and those of the
  network around the layers and of its head (trainer/models/network.py, pretrainer.py,
  sequence_model.py, question_answering.py);
* the largest transient: the backward working set of one layer's attention and, under remat,
  what that layer recomputes, in two stages (its feed-forward sub-layer's backward pass runs first
  and frees what it recomputed before the attention's working set exists).

The peak comes in one of two phases: the start of the backward pass (every saved activation, the
transient, the tied embedding's dense gradient) or the update after it (activations freed; the
gradients summed, divided, clipped and applied variable by variable, so only the largest
variables are held twice). ``MemoryBreakdown.total`` is the larger (with long documents, of three).

Long documents (fine-tuning with ``max_segments`` N > 1 and a memory of M): a step reads N
segments of L pieces in order. Only the last keeps activations for the backward pass, and they
are those of one segment whose keys span K = M + L (``layer_activations`` with ``mem_len`` M);
the N - 1 earlier segments run forward only, one after another (XLNetNetwork.encode_segments
starts a segment once the memory it reads is complete), so what one of them holds at its peak
besides the memory it reads (``earlier_segment_bytes``) is a third phase, before the last
segment's activations exist, whatever N; the memory the last segment reads is held until its
backward pass (``memory_state_bytes``). So the peak grows with M, not with N.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

from tfrecords.errors import UsageError
from trainer.configs.training import REMAT_MODES
from trainer.models.config import ModelConfig

FLOAT32 = 4
BOOL = 1
INT32 = 4
# Tensors of [rows, d_inner] the gradient of each feed-forward activation reads: tf.nn.gelu's tanh
# form keeps its input, the tanh, 1 + tanh and 0.5 x; the erf form its input, x / sqrt(2),
# 1 + erf and 0.5 x; relu its output (then also the second projection's input).
ACTIVATION_SAVED = {"gelu": 4, "gelu_exact": 4, "relu": 1}
# Copies of the largest variable the update phase holds besides the weights, the slots and the
# accumulator: the gradients are summed into the accumulator, divided by the global count, clipped
# and applied one variable at a time (controller._micro_steps, _replica_gradients), each new copy
# replacing the old one, so only the variables in flight are held twice.
UPDATE_GRADIENT_COPIES = 2


@dataclasses.dataclass(frozen=True)
class StepShape:
    """What shapes one replica's micro-step.

    ``batch``: rows per replica per micro-step (multiple choice: examples x options);
    ``seq_len``; ``num_predict``: query-stream rows per sequence (0: content stream only, as in
    fine-tuning); ``mem_len``: memory length (0 without memory); ``eval_batch``: rows of the
    pretraining eval memory per replica; ``head``: "lm", "sequence" or "squad"; ``num_labels``;
    ``precision``: a LoopConfig precision; ``accumulation_steps``: micro-steps per step;
    ``segments``: segments of ``seq_len`` pieces read per row, in order (fine-tuning on long
    documents, ``max_segments``; 1 otherwise), each after a memory of ``mem_len`` states.
    """

    batch: int
    seq_len: int
    num_predict: int = 0
    mem_len: int = 0
    eval_batch: int = 0
    head: str = "lm"
    num_labels: int = 2
    precision: str = "float32"
    accumulation_steps: int = 1
    segments: int = 1

    @property
    def activation_bytes(self) -> int:
        return FLOAT32 if self.precision == "float32" else 2

    def replace(self, **changes) -> "StepShape":
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class MemoryBreakdown:
    """One replica's memory for one step, in bytes (see the module docstring for each term)."""

    weights: int
    gradients: int
    optimizer_slots: int
    activations_per_layer: Mapping[str, int]  # remat mode -> bytes one layer keeps for the backward pass
    activations: int  # the network's saved activations under this breakdown's remat mode (layers + rest)
    memory_state: int
    input_batch: int
    transient: int
    update_phase: int  # what the update phase holds beyond the accumulator: the variables in flight
    remat: str
    phase: str  # "backward", "update" or (long documents) "earlier segments": where the peak is
    earlier_segments: int = 0  # long documents: the forward-only earlier segments' peak (earlier_segment_bytes)

    @property
    def total(self) -> int:
        persistent = self.weights + self.optimizer_slots + self.gradients + self.memory_state + self.input_batch
        return persistent + max(self.activations + self.transient, self.earlier_segments, self.update_phase)

    def to_dict(self) -> dict:
        return {"weights": self.weights, "gradients": self.gradients, "optimizer_slots": self.optimizer_slots,
                "activations_per_layer": dict(self.activations_per_layer), "activations": self.activations,
                "memory_state": self.memory_state, "input_batch": self.input_batch, "transient": self.transient,
                "update_phase": self.update_phase, "earlier_segments": self.earlier_segments, "total": self.total,
                "remat": self.remat, "phase": self.phase}


def parameter_counts(model: ModelConfig, head: str, num_labels: int = 2) -> tuple[int, int]:
    """(all parameters, trained parameters) of the network with ``head`` ("lm": pretraining, every
    variable trained; "sequence" or "squad": fine-tuning, which leaves mask_emb and lm_bias out)."""
    d, n, h, di, v = model.d_model, model.n_head, model.d_head, model.d_inner, model.vocab_size
    bias_sets = model.n_layer if model.untie_r else 1
    block = 5 * d * n * h + 2 * d + (d * di + di) + (di * d + d) + 2 * d
    network = v * d + d + v + 3 * bias_sets * n * h + model.n_layer * 2 * n * h + model.n_layer * block
    if head == "lm":
        return network, network
    if head == "sequence":
        extra = d * d + d + d * num_labels + num_labels
    else:  # squad: start_logits, end_logits (dense_0, LayerNorm, dense_1), answer_class
        extra = (d + 1) + (2 * d * d + d + 2 * d + d + 1) + (2 * d * d + d + d)
    return network + extra, network + extra - d - v


def _stream_saved(model: ModelConfig, shape: StepShape, rows: int, query: bool) -> dict[str, int]:
    """Bytes one layer keeps for one stream of ``rows`` query rows per sequence, by part: "core" (the
    attention core remat=attention recomputes), "activation" (GELU's intermediates beyond its input,
    which remat=attention recomputes too), "feed_forward" (the whole feed-forward sub-layer's, the
    activation's included), "attention_rest" (the rest of the attention sub-layer) and "queries"."""
    b, a = shape.batch, shape.activation_bytes
    n, h, d, di = model.n_head, model.d_head, model.d_model, model.d_inner
    k = shape.mem_len + shape.seq_len
    scores = b * n * rows * k
    dropout = model.dropout > 0
    core = 3 * b * rows * n * h * a  # (q + r_w_bias), (q + r_r_bias), (q + r_s_bias), each scaled
    core += scores * a  # the softmax's output
    if model.dropatt > 0:
        core += scores * (BOOL + a)  # the dropout's keep mask and its output
    if query:
        core += scores * INT32  # gather_relative's indices into the distance table
    # the attention vectors, head-merged for the output projection; the LayerNorm (computed in
    # float32): its input and the centred input; the output dropout's mask
    attention_rest = b * rows * d * a + 2 * (b * rows * d * FLOAT32) + (b * rows * d * BOOL if dropout else 0)
    activation = ACTIVATION_SAVED[model.ff_activation] * b * rows * di * a
    feed_forward = b * rows * d * a + activation + 2 * (b * rows * d * FLOAT32)  # input, activation, LayerNorm
    if dropout:
        feed_forward += b * rows * di * (BOOL + a) + b * rows * d * BOOL  # inner dropout; the output's mask
    return {"core": core, "activation": activation - b * rows * di * a, "feed_forward": feed_forward,
            "attention_rest": attention_rest, "queries": b * rows * n * h * a}


def layer_activations(model: ModelConfig, shape: StepShape, last: bool = False) -> dict[str, int]:
    """Bytes one layer keeps for the backward pass, by remat mode.

    none: everything its gradient reads; attention: the same but the attention scores'
    intermediates (kept instead: the projected queries, one per stream) and the feed-forward
    activation's intermediates (kept: its pre-activation); full: only the layer's
    inputs, the content stream and (pretraining) the query stream. ``last``: the last layer of a
    two-stream network, whose content-stream output no loss reads, so that its content stream's
    attention and feed-forward keep nothing (the query stream still reads its keys and values).
    """
    b, a = shape.batch, shape.activation_bytes
    d, n, h = model.d_model, model.n_head, model.d_head
    k = shape.mem_len + shape.seq_len
    inputs = b * shape.seq_len * d * a + b * shape.num_predict * d * a
    keys_values = _keys_and_values(model, shape)
    r = k + shape.seq_len if model.attn_type == "bi" else k + 1
    groups = 2 if shape.num_predict and model.bi_data else 1  # bi_data: pretraining only
    keys_values += groups * r * n * h * a  # the position keys
    keys_values += b * (shape.seq_len + shape.num_predict) * k * BOOL  # each stream's segment difference, per layer
    if shape.mem_len and shape.precision != "float32":
        keys_values += b * shape.mem_len * d * a  # the memory cast to the compute dtype
    part = _streams_saved(model, shape, last)
    everything = part["core"] + part["attention_rest"] + part["feed_forward"]
    return {"none": inputs + keys_values + everything,
            "attention": inputs + keys_values + everything - part["core"] - part["activation"] + part["queries"],
            "full": inputs}


def _streams_saved(model: ModelConfig, shape: StepShape, last: bool = False) -> dict[str, int]:
    """``_stream_saved``'s parts summed over the layer's streams (``last``: see layer_activations)."""
    streams = [] if last and shape.num_predict else [_stream_saved(model, shape, shape.seq_len, False)]
    if shape.num_predict:
        streams.append(_stream_saved(model, shape, shape.num_predict, True))
    return {name: sum(s[name] for s in streams) for name in streams[0]}


def _keys_and_values(model: ModelConfig, shape: StepShape) -> int:
    """Bytes of one layer's keys and values [B, N, M + L, H], which both streams read."""
    k = shape.mem_len + shape.seq_len
    return 2 * shape.batch * k * model.n_head * model.d_head * shape.activation_bytes


def recomputed_parts(model: ModelConfig, shape: StepShape) -> dict[str, dict[str, int]]:
    """What one layer's backward pass recomputes and holds, by stage: "feed_forward" (first, the
    feed-forward sub-layer's set) and "attention" (after it, the attention sub-layer's), for
    remat=attention (GELU's intermediates, then the attention cores) and remat=full (the layer)."""
    part = _streams_saved(model, shape)
    layer = layer_activations(model, shape)
    return {"attention": {"feed_forward": part["activation"], "attention": part["core"]},
            "full": {"feed_forward": layer["none"] - layer["full"],
                     "attention": part["core"] + part["attention_rest"] + _keys_and_values(model, shape)}}


def attention_working_set(model: ModelConfig, shape: StepShape) -> int:
    """Bytes the backward pass of one layer's content-stream attention holds at once: the
    gradients of the probabilities, the scores, the content term and the (negated) segment term
    [B, N, L, K], and of the position term before rel_shift [B, N, L, R]."""
    k = shape.mem_len + shape.seq_len
    r = k + shape.seq_len if model.attn_type == "bi" else k + 1
    return shape.batch * model.n_head * shape.seq_len * (4 * k + r) * shape.activation_bytes


def network_activations(model: ModelConfig, shape: StepShape) -> int:
    """Bytes kept for the backward pass outside the layers: the dropout masks of the embeddings
    and of the output, and the head (pretraining: the query stream's output and the cross
    entropy's gradient over the vocabulary; SQuAD: the end-logit layers on [h ; h_start])."""
    b, a, d, l, p = shape.batch, shape.activation_bytes, model.d_model, shape.seq_len, shape.num_predict
    rows = l + p
    kept = 2 * b * rows * d * BOOL if model.dropout > 0 else 0  # embedding and output dropout masks
    if shape.head == "lm":
        kept += b * p * d * a + b * p * model.vocab_size * FLOAT32
    elif shape.head == "squad":
        # the final states, [h ; h_start], the tanh, the LayerNorm's two float32 tensors, its output
        kept += b * l * d * (a + 2 * a + a + 2 * FLOAT32 + a)
    else:
        kept += b * d * (2 * a + BOOL)  # the summary of <cls> and its dropout
    return kept


def head_working_set(model: ModelConfig, shape: StepShape) -> int:
    """Bytes the backward pass of the head holds at once: for the LM head the gradient of the
    logits [B, P, vocab] in float32 and in the compute dtype."""
    if shape.head != "lm":
        return 0
    return shape.batch * shape.num_predict * model.vocab_size * (FLOAT32 + shape.activation_bytes)


def input_bytes(model: ModelConfig, shape: StepShape) -> int:
    """The micro-batch and the masks built from it once per step: ids, segments, the permutation
    mask, the content / query attention masks and segment differences."""
    b, l, p = shape.batch, shape.seq_len, shape.num_predict
    k = shape.mem_len + l
    ids = 4 * b * l * INT32 * shape.segments  # long documents: every segment's ids, segments and mask
    masks = b * l * l * BOOL + 2 * b * l * k * BOOL  # blocked, content mask, content segment difference
    if p:
        masks += 2 * b * p * k * BOOL + b * l * l * INT32  # query mask and segments; permutation ranks
    return ids + masks


def memory_state_bytes(model: ModelConfig, shape: StepShape) -> int:
    """The Transformer-XL memory, float32, one [batch, mem_len, d_model] per layer each. Pretraining:
    the train memory, the new memory a step computes before it is stored, and the eval memory.
    Fine-tuning on long documents: the memory the last segment reads, which the gradients of its
    key and value projections read too (its own new memory is never computed: nothing reads it)."""
    if not shape.mem_len:
        return 0
    per_row = model.n_layer * shape.mem_len * model.d_model * FLOAT32
    if shape.head != "lm":
        return per_row * shape.batch
    return per_row * (2 * shape.batch + shape.eval_batch)


def earlier_segment_bytes(model: ModelConfig, shape: StepShape) -> int:
    """Long documents: what one of the forward-only segments before the last holds at its peak,
    beside the memory it reads (``memory_state_bytes``): the new memory it builds (float32, one
    [batch, mem_len, d_model] per layer) and one layer in flight: its input and output [B, L,
    d_model], its keys and values over K = M + L with the position keys, and the larger of its
    attention's scores (the position term [B, N, L, R] before rel_shift, the shifted one and the
    content term [B, N, L, K], which their sum replaces) and its feed-forward's inner activations
    (two [B, L, d_inner]). Nothing is kept for a backward pass and the segments run one after
    another, before the last segment's activations exist: a phase of its own, whatever their number;
    0 with one segment."""
    if shape.segments <= 1:
        return 0
    b, l, a, d = shape.batch, shape.seq_len, shape.activation_bytes, model.d_model
    k = shape.mem_len + l
    r = k + l if model.attn_type == "bi" else k + 1
    new_memory = model.n_layer * b * shape.mem_len * d * FLOAT32
    layer = 2 * b * l * d * a + _keys_and_values(model, shape) + r * model.n_head * model.d_head * a
    scores = b * model.n_head * l * (2 * k + r) * a
    return new_memory + layer + max(scores, 2 * b * l * model.d_inner * a)


def memory_breakdown(model: ModelConfig, shape: StepShape, remat: str = "none") -> MemoryBreakdown:
    """The predicted memory of one replica's step with ``shape`` under ``remat``."""
    if remat not in REMAT_MODES:
        raise UsageError(f"remat must be one of {', '.join(REMAT_MODES)}, got {remat!r}")
    _, trained = parameter_counts(model, shape.head, shape.num_labels)
    per_layer = layer_activations(model, shape)
    activations = ((model.n_layer - 1) * per_layer[remat] + layer_activations(model, shape, last=True)[remat]
                   + network_activations(model, shape))
    working = attention_working_set(model, shape)
    # The backward pass of a layer runs its feed-forward sub-layer first, then its attention: what
    # remat recomputes for the first is freed before the attention's working set exists.
    stages = recomputed_parts(model, shape).get(remat, {"feed_forward": 0, "attention": 0})
    transient = max(stages["feed_forward"], stages["attention"] + working, head_working_set(model, shape))
    if shape.head == "lm":
        transient += model.vocab_size * model.d_model * FLOAT32  # the tied embedding's dense gradient
    largest = max(model.vocab_size * model.d_model, model.d_model * model.d_inner, model.d_model * model.n_head
                  * model.d_head)
    update = UPDATE_GRADIENT_COPIES * largest * FLOAT32
    weights = parameter_counts(model, shape.head, shape.num_labels)[0] * FLOAT32
    earlier = earlier_segment_bytes(model, shape)
    phases = {"backward": activations + transient, "update": update, "earlier segments": earlier}
    phase = max(phases, key=phases.get)  # ties: the first, backward
    return MemoryBreakdown(weights=weights, gradients=trained * FLOAT32, optimizer_slots=2 * trained * FLOAT32,
                           activations_per_layer=per_layer, activations=activations,
                           memory_state=memory_state_bytes(model, shape), input_batch=input_bytes(model, shape),
                           transient=transient, update_phase=update, remat=remat, phase=phase,
                           earlier_segments=earlier)
