"""The ``remat`` setting end to end: every mode gives the losses and gradients of ``none`` (float32, dropout
and dropatt 0.1, to 1e-6) for pretraining with memory and bi_data, classification and SQuAD, under XLA,
on two mirrored replicas and with gradient accumulation; the dropout generators advance alike, a
resumed run repeats an uninterrupted one, and the saved training configuration records the mode.
The building blocks are tested in tests/trainer/layers/test_remat.py."""
from __future__ import annotations

import functools
import json
import re
from typing import Callable

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

import xlnet_cli
from tfrecords.manifest import load_manifest
from trainer.configs.overrides import resolve_configs
from trainer.models.config import model_preset, sequence_model_config
from trainer.models.network import build_network
from trainer.models.pretrainer import XLNetPretrainer
from trainer.models.question_answering import XLNetForQuestionAnswering, squad_losses
from trainer.models.sequence_model import XLNetForSequenceTask, task_loss
from trainer.runtime.model_dir import ModelDirectory
from trainer.tasks.pretraining import pretraining_controller

MODES = ("attention", "full")
CONFIG = model_preset("tiny").replace(vocab_size=120, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64,
                                      dropout=0.1, dropatt=0.1, mem_len=6, reuse_len=4, bi_data=True)
B, L, P = 4, 8, 3
RNG = np.random.default_rng(0)
INPUT_IDS = tf.constant(RNG.integers(5, 120, (B, L)), tf.int32)
SEGMENT_IDS = tf.constant([[0] * 3 + [1] * 4 + [2]] * B, tf.int32)
INPUT_MASK = tf.constant([[0] * 2 + [1] * 6, [1] * 8] * 2, tf.int32)


def pretraining_model(remat: str) -> tuple[keras.Model, callable]:
    """The pretrainer on dense features with memory [B, M, d_model] and bi_data; its loss."""
    model = XLNetPretrainer(CONFIG, L, P, 4, {"sep": 4, "cls": 3}, remat=remat)
    rng = np.random.default_rng(1)
    positions = np.stack([rng.permutation(L)[:P] for _ in range(B)])
    features = {"input_ids": INPUT_IDS, "segment_ids": SEGMENT_IDS,
                "perm_mask": tf.constant(rng.random((B, L, L)) < 0.5, tf.float32),
                "target_mapping": tf.one_hot(positions, L)}
    mems = [tf.constant(rng.normal(size=(B, CONFIG.mem_len, CONFIG.d_model)), tf.float32)] * CONFIG.n_layer
    return model, lambda: model.compute(features, mems, training=True)["loss"]


def classification_model(remat: str) -> tuple[keras.Model, callable]:
    model = XLNetForSequenceTask(build_network(sequence_model_config(CONFIG), remat=remat), "classification", 3)
    inputs = {"input_ids": INPUT_IDS, "segment_ids": SEGMENT_IDS, "input_mask": INPUT_MASK}
    labels = tf.constant([0, 2, 1, 1])
    return model, lambda: tf.reduce_mean(task_loss("classification", model(inputs, training=True), labels))


def squad_model(remat: str) -> tuple[keras.Model, callable]:
    model = XLNetForQuestionAnswering(build_network(sequence_model_config(CONFIG), remat=remat), 2, 2)
    inputs = {"input_ids": INPUT_IDS, "segment_ids": SEGMENT_IDS, "input_mask": INPUT_MASK,
              "p_mask": tf.constant([[1, 1, 1, 0, 0, 0, 0, 0]] * B, tf.float32),
              "start_positions": tf.constant([3, 4, 5, 3])}
    ends, impossible = tf.constant([5, 4, 6, 7]), tf.constant([0, 0, 1, 0])
    return model, lambda: tf.reduce_mean(squad_losses(model(inputs, training=True), inputs["start_positions"], ends,
                                                      impossible))


def step(build, remat: str, jit_compile: bool | None = None, precision: str = "float32") -> dict:
    """Loss, gradients and dropout-generator states after one training step's forward and backward
    pass, the model built from the same initial seed."""
    keras.mixed_precision.set_global_policy(precision)
    try:
        keras.utils.set_random_seed(11)
        model, loss_fn = build(remat)

        def gradients():
            with tf.GradientTape() as tape:
                loss = loss_fn()
            return loss, tape.gradient(loss, model.trainable_variables)

        run = gradients if jit_compile is None else tf.function(gradients, jit_compile=jit_compile)
        loss, grads = run()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    # mask_emb and lm_bias get no gradient from a fine-tuning head, in every mode
    return {"loss": float(loss), "grads": [None if g is None else tf.convert_to_tensor(g).numpy() for g in grads],
            "seeds": [v.numpy() for v in model.non_trainable_variables if "seed_generator" in v.path]}


@functools.lru_cache(maxsize=None)
def reference_step(build, jit_compile: bool | None = None, precision: str = "float32") -> dict:
    """``step`` with remat none, computed once per configuration."""
    return step(build, "none", jit_compile, precision)


def assert_same_step(got: dict, want: dict, tolerance: float = 1e-6) -> None:
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=tolerance, atol=tolerance)
    assert [g is None for g in got["grads"]] == [g is None for g in want["grads"]]
    for a, b in zip(got["grads"], want["grads"]):
        if b is not None:
            np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance)
    assert len(got["seeds"]) == len(want["seeds"]) > 0
    for a, b in zip(got["seeds"], want["seeds"]):
        np.testing.assert_array_equal(a, b)  # every generator advanced as often as with none


@pytest.mark.parametrize("remat", MODES)
def test_pretraining_with_memory_and_bi_data_equals_none(remat):
    assert_same_step(step(pretraining_model, remat, jit_compile=False), reference_step(pretraining_model, False))


@pytest.mark.parametrize("remat", MODES)
def test_classification_equals_none(remat):
    assert_same_step(step(classification_model, remat), reference_step(classification_model))


@pytest.mark.parametrize("remat", MODES)
def test_squad_equals_none(remat):
    assert_same_step(step(squad_model, remat, jit_compile=False), reference_step(squad_model, False))


# the slow twin runs the same check on the other region (XLA compiles for about 20 s each)
@pytest.mark.parametrize("remat", ["full", pytest.param("attention", marks=pytest.mark.slow)])
def test_under_xla_pretraining_equals_none(remat):
    assert_same_step(step(pretraining_model, remat, jit_compile=True), reference_step(pretraining_model, True))


@pytest.mark.parametrize("remat", ["full", pytest.param("attention", marks=pytest.mark.slow)])
def test_mixed_bfloat16_gives_finite_gradients_close_to_none(remat):
    got = step(pretraining_model, remat, jit_compile=False, precision="mixed_bfloat16")
    want = reference_step(pretraining_model, False, "mixed_bfloat16")
    assert all(np.isfinite(g).all() for g in got["grads"])
    # bfloat16 keeps 8 bits: the recomputed pass may round differently once kernels are fused anew
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-3)
    for a, b in zip(got["grads"], want["grads"]):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-2 * np.abs(b).max())  # 2% of each gradient's largest


def mirrored_step(strategy: tf.distribute.Strategy, remat: str) -> list[np.ndarray]:
    """The loss and gradients all-reduced over the replicas, each replica on half the batch."""
    keras.utils.set_random_seed(11)
    with strategy.scope():
        model, _ = pretraining_model(remat)
    positions = tf.constant(np.stack([np.arange(P)] * B), tf.int32)
    perm_mask = tf.constant(np.triu(np.ones((L, L)), 1)[None].repeat(B, 0), tf.float32)

    def replica(input_ids, segment_ids, perm, targets):
        features = {"input_ids": input_ids, "segment_ids": segment_ids, "perm_mask": perm,
                    "target_mapping": tf.one_hot(targets, L)}
        with tf.GradientTape() as tape:
            loss = model.compute(features, None, training=True)["loss"]
        grads = tape.gradient(loss, model.trainable_variables)
        return tf.distribute.get_replica_context().all_reduce("sum", [loss] + grads)

    @tf.function
    def run(values):
        return [strategy.experimental_local_results(t)[0] for t in strategy.run(replica, args=values)]

    half = B // strategy.num_replicas_in_sync
    values = strategy.experimental_distribute_values_from_function(
        lambda context: tuple(t[context.replica_id_in_sync_group * half:][:half]
                              for t in (INPUT_IDS, SEGMENT_IDS, perm_mask, positions)))
    return [t.numpy() for t in run(values)]


@pytest.fixture(scope="module")
def mirrored_reference(mirrored_strategy) -> list[np.ndarray]:
    return mirrored_step(mirrored_strategy, "none")


@pytest.mark.parametrize("remat", ["full", pytest.param("attention", marks=pytest.mark.slow)])
def test_two_mirrored_replicas_equal_none(mirrored_strategy, mirrored_reference, remat):
    for got, want in zip(mirrored_step(mirrored_strategy, remat), mirrored_reference):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------- through the controller and `xlnet train`
SMALL = ["n_layer=2", "d_model=32", "n_head=2", "d_head=16", "d_inner=64", "mem_len=16", "train_batch_size=4",
         "eval_batch_size=4", "steps_per_loop=2", "eval_steps=1", "warmup_steps=2", "eval_every=0",
         "dropout=0.1", "dropatt=0.1"]


def controller_gradients(data_dir, model_dir, remat: str) -> list[tuple[list[np.ndarray], float]]:
    """Global gradients and loss of the first two steps of a pretraining controller that accumulates
    two micro-steps per step (the second step's micro-steps run on the memory the first one left)."""
    model, train, _ = resolve_configs("tiny", None, SMALL + ["train_steps=2", "accumulation_steps=2",
                                                             f"remat={remat}"])
    controller = pretraining_controller(model.replace(vocab_size=8000), train, manifest=load_manifest(str(data_dir)),
                                        model_dir=str(model_dir), strategy=tf.distribute.get_strategy(),
                                        log=lambda line: None)
    assert controller.network.remat == remat
    iterator = iter(controller.train_dataset())
    return [controller.gradients(iterator) for _ in range(2)]


@pytest.fixture(scope="module")
def accumulated_reference(tiny_data_dir, tmp_path_factory):
    return controller_gradients(tiny_data_dir, tmp_path_factory.mktemp("none"), "none")


@pytest.mark.slow  # 40 s; the controller sums micro-steps alike in every mode, and remat equals none per step
@pytest.mark.parametrize("remat", ["full", "attention"])
def test_gradient_accumulation_through_the_controller_equals_none(tiny_data_dir, tmp_path, accumulated_reference,
                                                                  remat):
    for (grads, loss), (want_grads, want_loss) in zip(controller_gradients(tiny_data_dir, tmp_path, remat),
                                                      accumulated_reference):
        np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
        for got, want in zip(grads, want_grads):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def train(data_dir, model_dir, *settings: str) -> int:
    args = ["train", "--data", str(data_dir), "--model-dir", str(model_dir), "--preset", "tiny"]
    return xlnet_cli.main(args + [arg for item in SMALL + list(settings) for arg in ("--set", item)])


@pytest.mark.slow  # 26 s; remat keeps the seed generators' states as none does (tests/trainer/layers/test_remat.py)
def test_a_stopped_remat_full_run_resumes_to_the_losses_of_an_uninterrupted_one(tiny_data_dir, tmp_path):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    assert train(tiny_data_dir, straight, "remat=full", "train_steps=4", "checkpoint_every=2") == 0
    assert train(tiny_data_dir, stopped, "remat=full", "train_steps=2", "checkpoint_every=2") == 0
    assert train(tiny_data_dir, stopped, "remat=full", "train_steps=4", "checkpoint_every=2") == 0  # resumes at 2
    want, got = ModelDirectory(straight).step_losses(), ModelDirectory(stopped).step_losses()
    assert sorted(got) == [1, 2, 3, 4]
    np.testing.assert_allclose([got[s] for s in range(1, 5)], [want[s] for s in range(1, 5)], rtol=1e-5)
    assert json.loads((stopped / "train_config.json").read_text())["remat"] == "full"


# --------------------------------------------------------------- what the backward pass keeps
# Distinct sizes, so that a tensor's shape says what it is: K = M + L keys, F = d_inner.
KEPT_CONFIG = CONFIG.replace(n_layer=2, d_model=22, n_head=3, d_head=7, d_inner=40, mem_len=4, bi_data=False)
KB, KL, KP = 2, 12, 5


def random_pretraining_inputs(rng: np.random.Generator, vocab: int, batch: int, seq_len: int,
                               num_predict: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(input ids [B, L], a random permutation mask [B, L, L], target positions [B, P])."""
    ids = tf.constant(rng.integers(5, vocab, (batch, seq_len)), tf.int32)
    perm_mask = tf.constant(rng.random((batch, seq_len, seq_len)) < 0.5)
    positions = tf.constant(np.stack([rng.permutation(seq_len)[:num_predict] for _ in range(batch)]), tf.int32)
    return ids, perm_mask, positions


@functools.lru_cache(maxsize=None)
def kept_for_backward(remat: str) -> list[tuple[int, ...]]:
    """Shapes of the forward-pass tensors the backward pass of a pretraining step reads (its graph)."""
    keras.utils.set_random_seed(3)
    network = build_network(KEPT_CONFIG, remat=remat)
    ids, perm_mask, positions = random_pretraining_inputs(np.random.default_rng(2), 120, KB, KL, KP)
    mems = [tf.zeros((KB, KEPT_CONFIG.mem_len, KEPT_CONFIG.d_model))] * KEPT_CONFIG.n_layer
    forward_ops = []

    @tf.function
    def gradients():
        with tf.GradientTape() as tape:
            logits, _ = network(ids, ids * 0, perm_mask, None, mems, target_positions=positions, training=True)
            loss = tf.reduce_sum(logits)
        forward_ops.append(len(tf.compat.v1.get_default_graph().get_operations()))
        return tape.gradient(loss, network.trainable_variables)

    operations = gradients.get_concrete_function().graph.get_operations()
    forward = {op.name for op in operations[:forward_ops[-1]]}
    return [tuple(t.shape.as_list()) for op in operations[forward_ops[-1]:] for t in op.inputs
            if t.op.name in forward and t.shape.rank is not None]


def test_attention_remat_keeps_no_attention_score_tensor_for_the_backward_pass():
    klen = KEPT_CONFIG.mem_len + KL
    scores = {(KB, KEPT_CONFIG.n_head, rows, klen) for rows in (KL, KP)}
    assert scores & set(kept_for_backward("none"))  # probabilities, dropout masks, gather indices
    assert not scores & set(kept_for_backward("attention"))


def test_full_remat_keeps_no_tensor_inside_a_layer_for_the_backward_pass():
    inner = {(KB, rows, KEPT_CONFIG.d_inner) for rows in (KL, KP)}  # the feed-forward's activations
    heads = {(KB, KEPT_CONFIG.n_head, rows, KEPT_CONFIG.d_head) for rows in (KL, KP, KEPT_CONFIG.mem_len + KL)}
    assert inner & set(kept_for_backward("attention")) and heads & set(kept_for_backward("attention"))
    kept = set(kept_for_backward("full"))
    assert not (inner | heads) & kept
    assert {(KB, KL, KEPT_CONFIG.d_model), (KB, KP, KEPT_CONFIG.d_model)} <= kept  # each layer's two streams



# --------------------------------------------------------------- what a step keeps alive, and when
STEP_CONFIG = model_preset("tiny").replace(vocab_size=500, d_model=128, n_head=4, d_head=32, d_inner=512,
                                           dropout=0.1, dropatt=0.1, mem_len=128, reuse_len=128, bi_data=False)
SB, SL, SP = 8, 256, 42


def gradient_step(remat: str) -> tf.types.experimental.PolymorphicFunction:
    """A pretraining forward and backward pass (memory, dropout) of STEP_CONFIG as one tf.function."""
    keras.utils.set_random_seed(5)
    network = build_network(STEP_CONFIG, remat=remat)
    rng = np.random.default_rng(5)
    ids, perm_mask, positions = random_pretraining_inputs(rng, 500, SB, SL, SP)
    mems = [tf.constant(rng.normal(size=(SB, STEP_CONFIG.mem_len, STEP_CONFIG.d_model)), tf.float32)
            for _ in range(STEP_CONFIG.n_layer)]

    @tf.function
    def gradients():
        with tf.GradientTape() as tape:
            logits, _ = network(ids, ids * 0, perm_mask, None, mems, target_positions=positions, training=True)
            loss = tf.reduce_mean(logits)
        return tf.add_n([tf.reduce_sum(g) for g in tape.gradient(loss, network.trainable_variables)])

    return gradients


@pytest.mark.slow  # 8 to 14 s each
@pytest.mark.parametrize("remat", ["none", "full"])
def test_a_step_leaves_no_tensor_of_the_attention_scores_size_behind(remat):
    step = gradient_step(remat)
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    step().numpy()
    kept = tf.config.experimental.get_memory_info("CPU:0")["current"] - before
    # Grappler folded dropout's zeros_like(x) and the zero tensor of its rewrite of the scores' add
    # chain into constants the function keeps for good: measured 50.4 (none) and 34.3 MB (full)
    # kept here before; now what it folds of the smaller dropouts' element counters, once per shape:
    # 10.4 to 11.3 MB measured alone, 13.3 MB once after other tests. One more tensor of the scores'
    # size (12.6 MB) would exceed the bound.
    scores = 4 * SB * STEP_CONFIG.n_head * SL * (SL + STEP_CONFIG.mem_len)
    assert kept < 1.6 * scores, kept


@functools.cache
def full_step() -> tf.types.experimental.PolymorphicFunction:
    """One ``gradient_step("full")`` for the tests that only read its graph or its ops (7 s to trace)."""
    return gradient_step("full")


@pytest.mark.xdist_group("full_step")
def test_a_recomputed_dropout_hashes_its_mask_in_one_compiled_call_once_its_input_is_there():
    graph = full_step().get_concrete_function().graph
    compiled = [op for op in graph.get_operations() if op.type == "PartitionedCall" and "hash_dropout" in op.name
                and op.get_attr("_XlaMustCompile")]
    # per layer 4 attention and 4 feed-forward dropouts, 2 each in the last layer (query stream only)
    assert len(compiled) == 8 * (STEP_CONFIG.n_layer - 1) + 4
    # a mask built at the backward pass's start would live until its layer's turn
    assert all(op.control_inputs for op in compiled)


def executed_op_names(step: Callable[[], tf.Tensor], workdir: str) -> list[str]:
    """The names of the ops one call of ``step`` runs (one per run), read from the profiler's trace."""
    step()
    tf.profiler.experimental.start(workdir)
    step().numpy()
    tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    space.ParseFromString(tf.io.gfile.GFile(tf.io.gfile.glob(f"{workdir}/plugins/profile/*/*.xplane.pb")[0], "rb").read())
    return [plane.event_metadata[event.metadata_id].name
            for plane in space.planes for line in plane.lines for event in line.events]


@pytest.mark.slow  # 5 to 13 s
@pytest.mark.xdist_group("full_step")
def test_a_recomputed_layer_skips_its_last_matmul_which_no_gradient_reads(tmp_path):
    names = executed_op_names(full_step(), str(tmp_path))

    def forward_matmuls(dense: str) -> int:  # the gradient's matmuls are named .../Tensordot/MatMul/MatMul
        return sum(1 for name in names if re.search(rf"/ff_\d+/{dense}(_\d+)?/Tensordot/MatMul:", "/" + name))

    feed_forwards = 2 * (STEP_CONFIG.n_layer - 1) + 1  # per layer per stream; the last layer's query stream
    assert forward_matmuls("layer_1") == 2 * feed_forwards  # the forward pass and the recomputation
    assert forward_matmuls("layer_2") == feed_forwards  # the forward pass only
