"""The memory a generation needs, from its cache's shapes, and the bound `xlnet generate` and
`xlnet export` check before any work: a cache that would not fit this machine is refused.

A generation (trainer/models/generation.py) holds, besides the weights (float32):

* the key/value cache: per layer, keys and values [rows, n_head, mem_len + RECENT_COLUMNS,
  d_head], counted twice (a merge of the recent part builds the new settled part beside the old
  one), and the position keys [1, n_head, mem_len + 2, d_head] with their encodings
  [mem_len + 1, d_model];
* the reading of the prompt, one segment at a time: the memory it reads and the new one it builds
  (one [rows, memory, d_model] per layer each) and one layer in flight over keys memory + segment,
  the planner's ``earlier_segment_bytes`` (trainer/planning/memory.py) for a forward-only segment.

Everything is float32 (generation runs without a mixed policy). The sum is a bound from above:
both phases are counted as if they coexisted.
"""
from __future__ import annotations

from trainer.models.config import ModelConfig
from trainer.planning.memory import FLOAT32, StepShape, earlier_segment_bytes, memory_state_bytes, parameter_counts
from trainer.planning.plan import largest_fitting, refuse_beyond_memory

# No search for the largest fitting mem_len goes past this (positions).
MAX_SEARCHED_MEM_LEN = 1 << 40


def generation_bytes(model: ModelConfig, mem_len: int, segment_len: int, segment_memory: int, rows: int = 1) -> int:
    """Predicted peak bytes of generating ``rows`` rows with a cache of ``mem_len`` positions, the
    prompt read in segments of ``segment_len`` pieces, each reading a memory of ``segment_memory``
    states (0: the prompt is read in one pass, as the ``generate`` signature reads it)."""
    from trainer.models.generation import RECENT_COLUMNS  # (TensorFlow: only generation's callers plan this)

    n, h, d, layers = model.n_head, model.d_head, model.d_model, model.n_layer
    weights = parameter_counts(model, "lm")[0] * FLOAT32
    cache = 2 * layers * 2 * rows * n * (mem_len + RECENT_COLUMNS) * h * FLOAT32
    positions = layers * n * (mem_len + 2) * h * FLOAT32 + (mem_len + 1) * d * FLOAT32
    reading = StepShape(batch=rows, seq_len=segment_len, mem_len=segment_memory, head="sequence", segments=2)
    prompt = earlier_segment_bytes(model, reading) + memory_state_bytes(model, reading)
    logits = rows * model.vocab_size * FLOAT32
    return weights + cache + positions + prompt + logits


def largest_fitting_mem_len(model: ModelConfig, budget: int, segment_of, rows: int = 1) -> int:
    """The largest cache (positions) whose ``generation_bytes`` is within ``budget``; 0 when none is.
    ``segment_of(mem_len)`` -> (segment_len, segment_memory) of the prompt's reading at that cache."""
    return largest_fitting(lambda mem_len: generation_bytes(model, mem_len, *segment_of(mem_len), rows=rows), budget,
                           MAX_SEARCHED_MEM_LEN)


def machine_memory() -> tuple[int, str]:
    """(bytes, what they are) of the memory a generation runs in: the GPU's as TensorFlow reports
    it, else this machine's physical memory."""
    import tensorflow as tf

    from trainer.planning.devices import host_memory_bytes, reported_memory

    memory, source = reported_memory(tf.distribute.get_strategy())
    if memory:
        return memory, source
    return host_memory_bytes(), "this machine's physical memory"


def check_generation_cache(flag: str, model: ModelConfig, mem_len: int, segment_of, rows: int = 1,
                           memory: tuple[int, str] | None = None, why: str = "") -> None:
    """A UsageError naming ``flag`` when a cache of ``mem_len`` positions (``generation_bytes``, the
    prompt read as ``segment_of`` says) would need more than USABLE_FRACTION of ``memory``
    (default: ``machine_memory()``), with the largest cache that fits. ``why``: how ``mem_len``
    came about, when ``flag`` did not set it."""
    refuse_beyond_memory(flag, mem_len, lambda size: generation_bytes(model, size, *segment_of(size), rows=rows),
                         memory or machine_memory(),
                         f"a generation cache of {mem_len} positions", "not even a cache of 1 position fits", why,
                         f" (float32 keys and values of {model.n_layer} layers x {model.n_head} heads x {model.d_head}, "
                         "the weights and a prompt segment's pass)")
