"""The SQuAD head (trainer/layers/answer_span.py, trainer/models/question_answering.py): each layer against NumPy,
p_mask, the loss by hand, the beam against brute force, on features of the bundled SQuAD set."""
from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from trainer.configs.finetuning import FinetuneConfig
from trainer.inputs.squad import SquadTokenizer, build_features, read_squad
from trainer.layers.answer_span import AnswerClass, EndLogits, StartLogits
from trainer.models.config import model_preset, sequence_model_config
from trainer.models.network import build_network
from trainer.models.question_answering import XLNetForQuestionAnswering, squad_losses

from support.bundled_data import WIKI_QA

SEQ_LEN = 96


@pytest.fixture(scope="module")
def model(vocab) -> XLNetForQuestionAnswering:
    tf.keras.utils.set_random_seed(5)
    config = model_preset("tiny").replace(vocab_size=vocab.vocab_size, n_layer=2, d_model=32, n_head=2, d_head=16,
                                          d_inner=64)
    return XLNetForQuestionAnswering(build_network(sequence_model_config(config)), start_n_top=3, end_n_top=4,
                                     name="squad")


@pytest.fixture(scope="module")
def features(vocab):
    examples = read_squad(str(WIKI_QA)).examples[:6]
    return build_features(examples, SquadTokenizer(vocab, uncased=False), training=True, max_seq_length=SEQ_LEN,
                          doc_stride=FinetuneConfig.doc_stride, max_query_length=16)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * gamma + beta


def head_weights(model: XLNetForQuestionAnswering) -> list[tf.Variable]:
    return [w for layer in (model.start_logits, model.end_logits, model.answer_class) for w in layer.weights]


RNG = np.random.default_rng(0)
HIDDEN = RNG.normal(size=(2, 5, 4)).astype(np.float32)
P_MASK = np.array([[0, 0, 1, 1, 0], [1, 0, 0, 1, 0]], np.float32)


def test_start_logits_are_a_dense_projection_with_masked_positions_at_minus_1e30():
    layer = StartLogits(4)
    kernel, bias = (w.numpy() for w in layer.dense.weights)
    logits = layer(tf.constant(HIDDEN), tf.constant(P_MASK)).numpy()
    expected = np.where(P_MASK == 1, -1e30, (HIDDEN @ kernel)[..., 0] + bias)
    np.testing.assert_allclose(logits, expected, rtol=1e-5)
    assert logits.dtype == np.float32


def test_end_logits_are_dense_tanh_layernorm_dense_on_position_and_start_state():
    layer = EndLogits(4)
    layer.layer_norm.gamma.assign(RNG.normal(size=4))  # not the identity, so LayerNorm's weights matter
    starts = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    logits = layer(tf.constant(HIDDEN), tf.constant(starts), tf.constant(P_MASK)).numpy()
    (w0, b0), (gamma, beta), (w1, b1) = ([w.numpy() for w in sub.weights]
                                         for sub in (layer.dense_0, layer.layer_norm, layer.dense_1))
    pairs = np.concatenate([np.broadcast_to(HIDDEN[:, None], (2, 3, 5, 4)),
                            np.broadcast_to(starts[:, :, None], (2, 3, 5, 4))], axis=-1)
    expected = (layer_norm(np.tanh(pairs @ w0 + b0), gamma, beta) @ w1)[..., 0] + b1
    expected = np.where(P_MASK[:, None] == 1, -1e30, expected)
    assert logits.shape == (2, 3, 5)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)


def test_answer_class_is_dense_tanh_then_a_dense_without_bias():
    layer = AnswerClass(4, dropout=0.1)
    start, cls = HIDDEN[:, 0], HIDDEN[:, -1]
    (w0, b0), (w1,) = ([w.numpy() for w in sub.weights] for sub in (layer.dense_0, layer.dense_1))
    expected = (np.tanh(np.concatenate([start, cls], -1) @ w0 + b0) @ w1)[:, 0]
    # The logit is a sum of 4 products |tanh| * |w1| that add up to at most about 1e-2 (weights drawn at
    # std 0.02): float32 sums taken in another order (oneDNN's or Eigen's) differ by a few float32 eps of
    # that, 1e-9 (4.7e-10 the worst of 200 draws), whatever the logit; one near 0 (1.2e-6 was seen) has
    # no relative accuracy, so the absolute bound is 8 eps of 1e-2.
    np.testing.assert_allclose(layer(tf.constant(start), tf.constant(cls)).numpy(), expected, rtol=1e-5, atol=1e-8)


def test_the_loss_is_half_the_span_cross_entropies_plus_half_the_answer_class_cross_entropy():
    outputs = {"start_log_probs": tf.math.log(tf.constant([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]])),
               "end_log_probs": tf.math.log(tf.constant([[0.25, 0.25, 0.5], [0.2, 0.3, 0.5]])),
               "cls_logits": tf.constant([0.0, math.log(3.0)])}
    # row 0: starts at 0, ends at 1, answerable: ½(ln 2 + ln 4) + ½ · (−ln(1 − σ(0))) = ½ ln 8 + ½ ln 2 = 2 ln 2
    # row 1: cls at 2, impossible: ½(−ln 0.8 − ln 0.5) + ½ · (−ln σ(ln 3)) = ½(ln 1.25 + ln 2) + ½ ln(4/3)
    losses = squad_losses(outputs, tf.constant([0, 2]), tf.constant([1, 2]), tf.constant([0.0, 1.0])).numpy()
    np.testing.assert_allclose(losses, [2 * math.log(2), 0.5 * math.log(2.5) + 0.5 * math.log(4 / 3)], rtol=1e-6)
    without = squad_losses(outputs, tf.constant([0, 2]), tf.constant([1, 2]), tf.constant([0.0, 1.0]),
                           answer_class=False).numpy()
    np.testing.assert_allclose(without, [0.5 * math.log(8), 0.5 * math.log(2.5)], rtol=1e-6)


def test_weights_exist_at_construction_under_the_hugging_face_names(model):
    names = {w.path for w in head_weights(model)}
    assert names == {"start_logits/dense/kernel", "start_logits/dense/bias",
                     "end_logits/dense_0/kernel", "end_logits/dense_0/bias", "end_logits/LayerNorm/gamma",
                     "end_logits/LayerNorm/beta", "end_logits/dense_1/kernel", "end_logits/dense_1/bias",
                     "answer_class/dense_0/kernel", "answer_class/dense_0/bias", "answer_class/dense_1/kernel"}
    assert model.end_logits.dense_0.kernel.shape == (64, 32)


def test_teacher_forced_outputs_are_float32_log_probabilities_that_ignore_p_mask_positions(model, features):
    outputs = model(features.model_inputs(), training=False)
    assert set(outputs) == {"start_log_probs", "end_log_probs", "cls_logits"}
    batch = len(features)
    assert outputs["start_log_probs"].shape == outputs["end_log_probs"].shape == (batch, SEQ_LEN)
    assert outputs["cls_logits"].shape == (batch,) and outputs["cls_logits"].dtype == tf.float32
    for name in ("start_log_probs", "end_log_probs"):
        probabilities = np.exp(outputs[name].numpy())
        np.testing.assert_allclose(probabilities.sum(-1), 1.0, rtol=1e-5)
        assert (probabilities[features.p_mask == 1] == 0).all()


def test_the_beam_never_chooses_a_p_mask_position(model, features):
    outputs = model(features.model_inputs(with_targets=False))
    assert outputs["start_top_index"].shape == (len(features), 3)
    assert outputs["end_top_index"].shape == outputs["end_top_log_probs"].shape == (len(features), 12)
    for name in ("start_top_index", "end_top_index"):
        chosen = np.take_along_axis(features.p_mask, outputs[name].numpy(), axis=1)
        assert (chosen == 0).all()


def test_the_beam_equals_brute_force_over_teacher_forced_starts(model, features):
    inputs = features.model_inputs(with_targets=False)
    beam = {name: value.numpy() for name, value in model(inputs).items()}
    hidden, _ = model.network.encode(inputs["input_ids"], inputs["segment_ids"], input_mask=inputs["input_mask"])
    teacher = model.outputs_from_hidden(hidden, inputs["p_mask"], tf.zeros(len(features), tf.int32))
    starts = np.argsort(-teacher["start_log_probs"].numpy(), axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(beam["start_top_index"], starts)
    np.testing.assert_allclose(beam["start_top_log_probs"],
                               np.take_along_axis(teacher["start_log_probs"].numpy(), starts, 1), rtol=1e-5)
    np.testing.assert_allclose(beam["cls_logits"], teacher["cls_logits"].numpy(), rtol=1e-5)
    for i in range(3):  # start-major: entries [4 i, 4 i + 4) are the best ends of the i-th start
        ends = model.outputs_from_hidden(hidden, inputs["p_mask"], tf.constant(starts[:, i]))["end_log_probs"].numpy()
        best = np.argsort(-ends, axis=1, kind="stable")[:, :4]
        np.testing.assert_array_equal(beam["end_top_index"][:, 4 * i:4 * i + 4], best)
        np.testing.assert_allclose(beam["end_top_log_probs"][:, 4 * i:4 * i + 4],
                                   np.take_along_axis(ends, best, 1), rtol=1e-4, atol=1e-5)


def test_one_training_step_lowers_the_loss_on_a_batch(model, features):
    inputs = features.model_inputs()
    optimizer = tf.keras.optimizers.Adam(1e-3)

    def loss() -> tf.Tensor:
        outputs = model(inputs, training=False)
        return tf.reduce_mean(squad_losses(outputs, inputs["start_positions"], inputs["end_positions"],
                                           inputs["is_impossible"]))

    before = float(loss())
    for _ in range(3):
        with tf.GradientTape() as tape:
            value = loss()
        optimizer.apply_gradients(zip(tape.gradient(value, head_weights(model)), head_weights(model)))
    assert float(loss()) < before


def test_config_round_trips(model):
    copy = XLNetForQuestionAnswering.from_config(model.get_config())
    assert (copy.start_n_top, copy.end_n_top, copy.network.config) == (3, 4, model.network.config)
