"""The in-graph recurrence of multi-segment exports (trainer/serving/segment_reading.py) against
``XLNetNetwork.encode_segments``, the Python definition it must equal."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from trainer.models.config import model_preset, sequence_model_config
from trainer.models.network import build_network
from trainer.serving.segment_reading import first_real_segment, read_segments
from trainer.serving.text_encoder import XLNetTextEncoder

from support.bundled_data import corpus_lines

LENGTH, SEGMENTS = 12, 3


@pytest.fixture(scope="module")
def network(vocab):
    tf.keras.utils.set_random_seed(2)
    config = model_preset("tiny").replace(vocab_size=vocab.vocab_size, n_layer=2, d_model=32, n_head=2, d_head=16,
                                          d_inner=64)
    return build_network(sequence_model_config(config).replace(mem_len=18, reuse_len=0))


@pytest.fixture(scope="module")
def inputs(vocab) -> dict[str, tf.Tensor]:
    """Three texts: about three segments, about two, and one shorter than a segment."""
    encoder = XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), LENGTH, uncased=False)
    long = " ".join(corpus_lines(2, longer_than=60))
    texts = [long, long[:len(long) // 3], "Short."]
    return encoder.encode_segments(tf.constant(texts), max_segments=SEGMENTS)


def test_read_segments_equals_encode_segments_at_every_real_position(network, inputs):
    read = read_segments(network, **inputs).numpy()
    expected, _ = network.encode_segments(**inputs)
    mask = inputs["input_mask"].numpy() > 0
    assert mask[0].all() and not mask[1, 0].any()  # the batch mixes lengths
    np.testing.assert_allclose(read[mask], expected.numpy()[mask], atol=1e-5)
    assert not read[~mask].any()  # padding positions are 0
    alone, _ = network.encode(*(inputs[name][:, -1] for name in ("input_ids", "segment_ids", "input_mask")))
    assert np.abs(read[0, -1] - alone.numpy()[0]).max() > 1e-3  # the memory is read


def test_leading_segments_no_row_reaches_are_skipped_without_changing_a_state(network, inputs):
    short = {name: value[1:] for name, value in inputs.items()}  # the two texts that leave segment 0 empty
    assert int(first_real_segment(short["input_mask"])) == 1
    read = read_segments(network, **short).numpy()
    expected, _ = network.encode_segments(**short)
    mask = short["input_mask"].numpy() > 0
    np.testing.assert_allclose(read[mask], expected.numpy()[mask], atol=1e-5)


def test_a_network_without_memory_is_refused(vocab, inputs):
    network = build_network(sequence_model_config(model_preset("tiny").replace(vocab_size=vocab.vocab_size,
                                                                               n_layer=1)))
    with pytest.raises(ValueError, match="mem_len > 0 and reuse_len 0"):
        read_segments(network, **inputs)
