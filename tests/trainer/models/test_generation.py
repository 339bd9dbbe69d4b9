"""Cached two-stream generation: exact against the uncached pass, sampling, stopping, batches."""
import numpy as np
import pytest
import tensorflow as tf
from support.strong_networks import strong_inference_network

from trainer.models.generation import (
    MAX_NEW_TOKENS_CAP,
    choose_tokens,
    excluded_symbol_ids,
    extend_generation,
    generate,
    generate_uncached,
    start_generation,
    stop_symbol_ids,
    uncached_next_logits,
)
from trainer.models.inference_network import inference_network

PROMPT_LENGTHS = [6, 2, 4]
CACHE = 16


@pytest.fixture(scope="module")
def network():
    return strong_inference_network(mem_len=CACHE)


@pytest.fixture(scope="module")
def prompts():
    """Three LEFT-padded prompts of different lengths (padding id 5)."""
    ids = np.random.default_rng(7).integers(9, 40, [3, max(PROMPT_LENGTHS)]).astype(np.int32)
    for row, length in enumerate(PROMPT_LENGTHS):
        ids[row, :max(PROMPT_LENGTHS) - length] = 5
    return ids


def test_cached_logits_equal_the_full_two_stream_pass_at_every_step(network, prompts):
    tokens = np.random.default_rng(8).integers(9, 40, [3, 8]).astype(np.int32)
    cache, logits = start_generation(network, prompts, PROMPT_LENGTHS)
    for step in range(tokens.shape[1] + 1):
        expected = uncached_next_logits(network, prompts, PROMPT_LENGTHS, tokens[:, :step])
        np.testing.assert_allclose(logits, expected, atol=1e-4, err_msg=f"step {step}")
        if step < tokens.shape[1]:
            cache, logits = extend_generation(network, cache, tokens[:, step])
    assert float(tf.reduce_max(tf.abs(logits[0] - logits[1]))) > 0.1  # rows differ: the comparison can fail


def test_greedy_tokens_equal_uncached_generation(network, prompts):
    cached = generate(network, prompts, PROMPT_LENGTHS, 7)
    uncached = generate_uncached(network, prompts, PROMPT_LENGTHS, 7)
    np.testing.assert_array_equal(cached["generated_ids"], uncached["generated_ids"])
    np.testing.assert_allclose(cached["token_log_probs"], uncached["token_log_probs"], atol=1e-4)
    assert len(set(cached["generated_ids"].numpy().ravel())) > 3


def test_greedy_picks_the_most_likely_token_and_logs_its_probability(network, prompts):
    out = generate(network, prompts, PROMPT_LENGTHS, 1)
    logits = uncached_next_logits(network, prompts, PROMPT_LENGTHS, np.zeros([3, 0], np.int32))
    np.testing.assert_array_equal(out["generated_ids"][:, 0], np.argmax(logits, axis=-1))
    np.testing.assert_allclose(out["token_log_probs"][:, 0], np.max(tf.nn.log_softmax(logits), axis=-1), atol=1e-5)


def test_the_same_seed_gives_the_same_tokens_and_another_seed_others(network, prompts):
    settings = dict(temperature=1.5, top_k=20, top_p=0.95)
    first = generate(network, prompts, PROMPT_LENGTHS, 8, seed=11, **settings)["generated_ids"].numpy()
    again = generate(network, prompts, PROMPT_LENGTHS, 8, seed=11, **settings)["generated_ids"].numpy()
    other = generate(network, prompts, PROMPT_LENGTHS, 8, seed=12, **settings)["generated_ids"].numpy()
    np.testing.assert_array_equal(first, again)
    assert (first != other).any()


def test_each_prompt_of_a_batch_generates_what_it_generates_alone(network, prompts):
    settings = dict(temperature=1.0, top_k=10, seed=4)
    batch = generate(network, prompts, PROMPT_LENGTHS, 6, **settings)
    for row, length in enumerate(PROMPT_LENGTHS):
        alone = generate(network, prompts[row:row + 1, -length:], [length], 6, **settings)
        np.testing.assert_array_equal(batch["generated_ids"][row], alone["generated_ids"][0])
        np.testing.assert_allclose(batch["token_log_probs"][row], alone["token_log_probs"][0], atol=1e-5)


@pytest.mark.slow
def test_alone_equals_batched_after_the_cache_is_full(prompts):
    small = strong_inference_network(mem_len=3)  # the 6-token prompt already overflows it
    batch = generate(small, prompts, PROMPT_LENGTHS, 6)
    for row, length in enumerate(PROMPT_LENGTHS):
        alone = generate(small, prompts[row:row + 1, -length:], [length], 6)
        np.testing.assert_allclose(batch["token_log_probs"][row], alone["token_log_probs"][0], atol=1e-5)


def test_a_full_cache_drops_the_oldest_positions(network, prompts):
    # Prompt 6 + 5 tokens exceeds a cache of 3: the logits then differ from the full pass.
    small = inference_network(network, mem_len=3)
    tokens = np.random.default_rng(9).integers(9, 40, [3, 5]).astype(np.int32)
    cache, logits = start_generation(small, prompts, PROMPT_LENGTHS)
    for step in range(5):
        cache, logits = extend_generation(small, cache, tokens[:, step])
    assert cache.keys[0].shape[2] == 3
    full = uncached_next_logits(small, prompts, PROMPT_LENGTHS, tokens)
    assert float(tf.reduce_max(tf.abs(logits - full))) > 1e-2


def test_the_width_of_the_recent_part_does_not_change_the_logits_before_or_after_the_cache_is_full(network, prompts):
    small = inference_network(network, mem_len=3)  # prompt 6 + 9 tokens: the window slides from the start
    tokens = np.random.default_rng(9).integers(9, 40, [3, 9]).astype(np.int32)
    logits = {}
    for width in (1, 2, 4, 16):
        cache, step_logits = start_generation(small, prompts, PROMPT_LENGTHS, recent_columns=width)
        logits[width] = [step_logits]
        for step in range(9):
            cache, step_logits = extend_generation(small, cache, tokens[:, step])
            logits[width].append(step_logits)
    for width in (2, 4, 16):
        np.testing.assert_allclose(np.stack(logits[width]), np.stack(logits[1]), atol=1e-5)


def test_the_recent_part_is_merged_when_full(network, prompts):
    cache, _ = start_generation(network, prompts, PROMPT_LENGTHS, recent_columns=4)
    filled = []
    for token in range(6):
        cache, _ = extend_generation(network, cache, tf.fill([3], 9 + token))
        filled.append(int(cache.filled))
    assert filled == [1, 2, 3, 0, 1, 2]
    assert cache.keys[0].shape[2] == CACHE and cache.recent_keys[0].shape[2] == 4


def test_a_row_stops_at_its_stop_token_and_is_padded(network, prompts):
    free = generate(network, prompts, PROMPT_LENGTHS, 6)["generated_ids"].numpy()
    # A row that, left free, produces a token for the first time after its first step stops there.
    row_stopping, stop_step = next((row, step) for row in range(3) for step in range(1, 6)
                                   if free[row, step] not in free[row, :step])
    stop = int(free[row_stopping, stop_step])
    first_stop = [list(row).index(stop) if stop in row else None for row in free]
    out = generate(network, prompts, PROMPT_LENGTHS, 6, stop_ids=[stop], pad_id=5)
    width = max(PROMPT_LENGTHS)
    for row, at in enumerate(first_stop):
        ids, log_probs = out["generated_ids"][row].numpy(), out["token_log_probs"][row].numpy()
        end = 6 if at is None else at + 1
        np.testing.assert_array_equal(ids[:end], free[row, :end])  # the stop token itself is kept
        np.testing.assert_array_equal(ids[end:], -1)
        np.testing.assert_array_equal(log_probs[end:], 0.0)
        assert (log_probs[:end] < 0).all()
        assert int(out["num_generated"][row]) == end
        np.testing.assert_array_equal(out["input_mask"][row, width:], [1] * end + [0] * (6 - end))
        np.testing.assert_array_equal(out["input_ids"][row, width + end:], 5)
    assert first_stop[row_stopping] == stop_step


def test_outputs_describe_what_the_model_ran_on(network, prompts):
    out = generate(network, prompts, PROMPT_LENGTHS, 3)
    width = max(PROMPT_LENGTHS)
    np.testing.assert_array_equal(out["input_ids"][:, :width], prompts)
    np.testing.assert_array_equal(out["input_ids"][:, width:], out["generated_ids"])
    np.testing.assert_array_equal(out["segment_ids"], np.zeros([3, width + 3]))
    expected_mask = [[0] * (width - length) + [1] * (length + 3) for length in PROMPT_LENGTHS]
    np.testing.assert_array_equal(out["input_mask"], expected_mask)


def test_top_k_of_one_and_a_tiny_top_p_are_greedy():
    logits = tf.constant(np.random.default_rng(1).normal(0, 2, [4, 30]), tf.float32)
    greedy = np.argmax(logits, axis=-1)
    for step in range(3):
        np.testing.assert_array_equal(choose_tokens(logits, 2.0, 1, 1.0, seed=step, step=step), greedy)
        np.testing.assert_array_equal(choose_tokens(logits, 2.0, 0, 1e-6, seed=step, step=step), greedy)


def test_samples_follow_the_softmax_of_logits_over_temperature():
    probabilities = np.array([0.6, 0.3, 0.1])
    temperature = 2.0
    logits = tf.constant(np.log(probabilities)[None].repeat(4000, 0) * temperature, tf.float32)
    chosen = choose_tokens(logits, temperature, 0, 1.0, seed=tf.range(4000), step=0).numpy()
    frequencies = np.bincount(chosen, minlength=3) / 4000
    np.testing.assert_allclose(frequencies, probabilities, atol=0.03)


def test_top_k_and_top_p_keep_only_the_likeliest_tokens():
    logits = tf.constant(np.log([[0.5, 0.3, 0.15, 0.05]]).repeat(500, 0), tf.float32)
    by_k = choose_tokens(logits, 1.0, 2, 1.0, seed=tf.range(500), step=0).numpy()
    by_p = choose_tokens(logits, 1.0, 0, 0.9, seed=tf.range(500), step=0).numpy()  # 0.5 + 0.3 < 0.9: three
    assert set(by_k) == {0, 1}
    assert set(by_p) == {0, 1, 2}


def test_excluded_tokens_are_never_chosen_greedily_or_by_sampling():
    logits = tf.constant(np.log([[0.5, 0.3, 0.15, 0.05]]).repeat(500, 0), tf.float32)
    assert set(choose_tokens(logits, 0.0, 0, 1.0, seed=0, step=0, excluded_ids=[0]).numpy()) == {1}
    sampled = choose_tokens(logits, 1.0, 0, 1.0, seed=tf.range(500), step=0, excluded_ids=[0, 2]).numpy()
    assert set(sampled) == {1, 3}
    by_k = choose_tokens(logits, 1.0, 2, 1.0, seed=tf.range(500), step=0, excluded_ids=[1]).numpy()
    assert set(by_k) == {0, 2}  # top_k counts the tokens that may be chosen


def test_the_special_symbols_that_stop_a_row_and_those_never_generated():
    special = {"unk": 0, "bos": 1, "eos": 2, "cls": 3, "sep": 4, "pad": 5, "mask": 6, "eod": 7, "eop": 8}
    assert stop_symbol_ids(special) == [7, 2]
    assert excluded_symbol_ids(special) == [0, 1, 3, 4, 5, 6]  # <eop> is text: a paragraph break


def test_generation_never_emits_an_excluded_token(network, prompts):
    greedy = generate(network, prompts, PROMPT_LENGTHS, 6)["generated_ids"].numpy()
    excluded = sorted(set(greedy.ravel().tolist()))
    out = generate(network, prompts, PROMPT_LENGTHS, 6, excluded_ids=excluded)["generated_ids"].numpy()
    assert not set(out.ravel().tolist()) & set(excluded)
    uncached = generate_uncached(network, prompts, PROMPT_LENGTHS, 6, excluded_ids=excluded)["generated_ids"]
    np.testing.assert_array_equal(out, uncached)


@pytest.mark.parametrize("setting, value, message", [
    ("max_new_tokens", 0, "max_new_tokens must be >= 1"),
    ("max_new_tokens", MAX_NEW_TOKENS_CAP + 1, f"max_new_tokens must be <= {MAX_NEW_TOKENS_CAP}"),
    ("temperature", -0.5, "temperature must be >= 0"),
    ("top_k", -1, "top_k must be >= 0"),
    ("top_p", 0.0, r"top_p must be in \(0, 1\]"),
    ("top_p", 1.5, r"top_p must be in \(0, 1\]"),
])
def test_bad_settings_are_refused_naming_them(network, prompts, setting, value, message):
    settings = {"max_new_tokens": 2, setting: value}
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        generate(network, prompts, PROMPT_LENGTHS, **settings)


def test_an_empty_prompt_is_refused(network, prompts):
    with pytest.raises(tf.errors.InvalidArgumentError, match="a prompt must hold a token"):
        generate(network, prompts, [6, 0, 4], 2)


@pytest.mark.slow
def test_generate_in_a_tf_function_gives_the_eager_tokens(network, prompts):
    settings = dict(temperature=0.8, top_p=0.9, seed=3, stop_ids=[20])
    traced = tf.function(lambda n: generate(network, prompts, PROMPT_LENGTHS, n, **settings))
    eager = generate(network, prompts, PROMPT_LENGTHS, 5, **settings)
    out = traced(tf.constant(5))
    for name in ("generated_ids", "input_ids", "input_mask"):
        np.testing.assert_array_equal(out[name], eager[name])
    np.testing.assert_allclose(out["token_log_probs"], eager["token_log_probs"], atol=1e-5)


def test_the_loop_ends_when_every_row_has_stopped_and_pads_the_rest(network, prompts):
    out = generate(network, prompts, PROMPT_LENGTHS, 5, stop_ids=list(range(40)))  # every token stops its row
    first = generate(network, prompts, PROMPT_LENGTHS, 1)
    np.testing.assert_array_equal(out["generated_ids"][:, 0], first["generated_ids"][:, 0])
    np.testing.assert_array_equal(out["generated_ids"][:, 1:], -1)
    np.testing.assert_array_equal(out["token_log_probs"][:, 1:], 0.0)
    np.testing.assert_array_equal(out["num_generated"], [1, 1, 1])
    assert out["input_ids"].shape == (3, max(PROMPT_LENGTHS) + 5)
