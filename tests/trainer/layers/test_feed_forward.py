"""The feed-forward activations ModelConfig accepts, each the function its name promises."""
from __future__ import annotations

import math

import numpy as np
import pytest

from trainer.layers.feed_forward import ACTIVATIONS
from trainer.models.config import FF_ACTIVATIONS, ModelConfig


def test_every_config_activation_has_a_layer_function():
    assert set(ACTIVATIONS) == set(FF_ACTIVATIONS)


def test_gelu_exact_is_x_times_the_normal_cdf_and_gelu_is_the_tanh_form():
    x = np.array([-2.0, -0.5, 0.0, 0.7, 3.0], np.float32)
    exact = [v * 0.5 * (1.0 + math.erf(v / math.sqrt(2.0))) for v in x]
    tanh = [0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3))) for v in x]
    np.testing.assert_allclose(np.asarray(ACTIVATIONS["gelu_exact"](x)), exact, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(ACTIVATIONS["gelu"](x)), tanh, rtol=1e-6, atol=1e-7)
    assert not np.allclose(exact, tanh, rtol=0, atol=1e-6)


def test_an_unknown_activation_is_refused_by_name():
    with pytest.raises(ValueError, match="ff_activation must be one of gelu, gelu_exact, relu, got 'swish'"):
        ModelConfig(ff_activation="swish")
