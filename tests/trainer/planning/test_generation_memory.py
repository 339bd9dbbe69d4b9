"""The memory of a generation (trainer/planning/generation.py) and the bound `xlnet generate` and
`xlnet export` check before any work."""
import pytest

from tfrecords.errors import UsageError
from trainer.models.config import model_preset
from trainer.planning.generation import check_generation_cache, generation_bytes, largest_fitting_mem_len

BASE = model_preset("base")
GIB = 1024 ** 3


def one_pass(max_length: int):
    """The signature's reading: one pass of ``max_length`` pieces, no memory."""
    return lambda mem_len: (max_length, 0)


def test_each_cache_position_costs_its_keys_values_and_position_key_in_every_layer():
    per_position = (2 * BASE.n_layer * 2 * BASE.n_head * BASE.d_head * 4  # keys and values, counted twice
                    + BASE.n_layer * BASE.n_head * BASE.d_head * 4 + BASE.d_model * 4)  # position keys, encodings
    assert generation_bytes(BASE, 1384, 128, 0) - generation_bytes(BASE, 384, 128, 0) == 1000 * per_position


def test_a_prompt_segment_reading_memory_costs_more_than_one_without():
    assert generation_bytes(BASE, 384, 512, 384) > generation_bytes(BASE, 384, 512, 0)


def test_the_largest_fitting_cache_fits_and_one_more_position_does_not():
    budget = 4 * GIB
    largest = largest_fitting_mem_len(BASE, budget, one_pass(128))
    assert generation_bytes(BASE, largest, 128, 0) <= budget < generation_bytes(BASE, largest + 1, 128, 0)
    assert largest_fitting_mem_len(BASE, 1024, one_pass(128)) == 0  # not even the weights fit


def test_a_cache_beyond_the_memory_is_refused_naming_the_flag_the_need_and_the_largest_that_fits():
    memory = (8 * GIB, "a test's memory")
    check_generation_cache("--mem-len", BASE, 384, lambda size: (min(size, 512), size), memory=memory)
    with pytest.raises(UsageError) as error:
        check_generation_cache("--mem-len", BASE, 10 ** 8, lambda size: (min(size, 512), size), memory=memory,
                               why=" (-1: the model's mem_len)")
    message = str(error.value)
    largest = largest_fitting_mem_len(BASE, int(8 * GIB * 0.95), lambda size: (min(size, 512), size))
    assert message.startswith("--mem-len 100000000 (-1: the model's mem_len): a generation cache of 100000000 "
                              "positions needs about ")
    assert "more than 95% of a test's memory (8.00 GiB)" in message
    assert message.endswith(f"the largest that fits is --mem-len {largest}") and 384 < largest < 10 ** 8
