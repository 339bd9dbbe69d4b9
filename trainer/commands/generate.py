"""`xlnet generate --model-dir M --prompt TEXT` (or `--prompts FILE`): continues text, printing tokens as they come.

Each prompt is tokenised as `xlnet score` reads a line (normalised, SentencePiece), read once as
the context (in segments of ``mem_len`` pieces, at most 512, each seeing the ``mem_len`` states
before it, as Transformer-XL reads a long text: memory is bounded by the cache however long the
prompt; a prompt of at most one segment is one pass, all its pieces seeing each other), then continued in natural order with the two-stream key/value cache of
trainer/models/generation.py: one query and one content position per new token, the past never
recomputed. Tokens are chosen as the ``generate`` signature chooses them (greedy at temperature
0, else seeded sampling with top_k / top_p: trainer/configs/generation.py), and each is printed,
detokenised, as soon as it is chosen. A prompt stops at ``max_new_tokens`` or after ``<eod>`` or
``<eos>`` (not printed).

Standard output: each prompt's continuation on its own line (``--prompts``: one line per prompt, in
order; blank lines of the file are skipped). Standard error: one JSON line per prompt with its
``prompt_tokens``, ``new_tokens``, ``stopped`` (true at a stop token) and ``seconds``.

A cache that would not fit this machine's memory (trainer/planning/generation.py: the cache's keys
and values and a prompt segment's working set, against 95% of the GPU's memory or this machine's)
is refused before the model is restored, naming ``--mem-len`` and the largest that fits.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from tfrecords.errors import UsageError

FLAGS = {"max_new_tokens": "--max-new-tokens", "temperature": "--temperature", "top_k": "--top-k",
         "top_p": "--top-p", "seed": "--seed", "mem_len": "--mem-len"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet generate`; the defaults and help of the generation settings are GenerateConfig's."""
    from trainer.configs.generation import GenerateConfig

    parser.add_argument("--model-dir", required=True,
                        help="model directory written by `xlnet train`, `xlnet import-checkpoint` or `xlnet finetune` "
                             "(local or gs://)")
    prompts = parser.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--prompt", help="the text to continue")
    prompts.add_argument("--prompts", metavar="FILE", help="a UTF-8 file of prompts, one per line (local or gs://)")
    for field in dataclasses.fields(GenerateConfig):
        kind = float if field.type in (float, "float") else int
        parser.add_argument(FLAGS[field.name], dest=field.name, type=kind, default=field.default,
                            help=field.metadata["help"])
    parser.add_argument("--checkpoint", default=None,
                        help="checkpoint prefix to generate with (default: the latest in MODEL_DIR/checkpoints)")


def generate_config(args: argparse.Namespace):
    """The GenerateConfig of the flags; a bad value is a UsageError naming its flag."""
    from trainer.configs.generation import GenerateConfig

    return GenerateConfig.from_dict({name: getattr(args, name) for name in FLAGS}, origins=FLAGS)


def check_flags(args: argparse.Namespace) -> None:
    """The generation settings checked before TensorFlow loads (xlnet_cli.py)."""
    generate_config(args)


def read_prompts(args: argparse.Namespace) -> list[str]:
    """The prompts of --prompt or --prompts (its non-blank lines); bad input is a UsageError naming the flag."""
    import tensorflow as tf

    if args.prompt is not None:
        try:
            args.prompt.encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError("--prompt is not valid UTF-8") from None
        return [args.prompt]
    try:
        with tf.io.gfile.GFile(args.prompts, "rb") as handle:
            data = handle.read()
    except tf.errors.OpError as error:
        raise UsageError(f"--prompts {args.prompts}: cannot read it ({error.message})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise UsageError(f"--prompts {args.prompts}: line {line} is not valid UTF-8") from None
    prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise UsageError(f"--prompts {args.prompts}: no prompt (an empty file, or only blank lines)")
    return prompts


def run(args: argparse.Namespace) -> int:
    """Continues every prompt, streaming its tokens; bad input raises a UsageError (exit 2)."""
    import sentencepiece as spm

    from trainer.inputs.corpus_documents import tokenize_document
    from trainer.models.generation import excluded_symbol_ids, stop_symbol_ids
    from trainer.runtime.restore import open_model_directory, resolve_uncased, restore_model

    config = generate_config(args)
    prompts = read_prompts(args)
    directory = open_model_directory(args.model_dir)
    uncased, _ = resolve_uncased(directory)
    processor = spm.SentencePieceProcessor(model_proto=directory.sp_model_proto)
    tokenized = [tokenize_document(processor, [prompt], uncased) for prompt in prompts]
    for number, ids in enumerate(tokenized, start=1):
        if len(ids) == 0:
            where = "--prompt" if args.prompt is not None else f"--prompts {args.prompts}: prompt {number}"
            raise UsageError(f"{where} holds no token to continue (empty after normalisation)")
    mem_len = config.resolved_mem_len(directory.model_config.mem_len, max(len(ids) for ids in tokenized))
    check_cache(config, directory.model_config, mem_len, max(len(ids) for ids in tokenized))
    restored = restore_model(directory, args.checkpoint)
    if restored.head_spec is not None:
        print(f"xlnet generate: note: {args.model_dir} is fine-tuned ({restored.head_spec.task}); its LM head (the "
              "tied embedding and lm_bias) is kept, but fine-tuning trained the embedding further", file=sys.stderr)
    special = directory.special_ids
    streamer = Streamer(restored.network, mem_len, stop_symbol_ids(special), excluded_symbol_ids(special))
    for ids in tokenized:
        started = time.time()
        printed, new_tokens, stopped = "", [], False
        for token in streamer.tokens(ids, config):
            if token is None:
                stopped = True
                break
            new_tokens.append(token)
            text = processor.decode(new_tokens)
            # A piece can change how the text before it decodes (a leading space): print what is new.
            piece = text[len(printed):] if text.startswith(printed) else processor.decode([token])
            sys.stdout.write(piece)
            sys.stdout.flush()
            printed = text
        sys.stdout.write("\n")
        sys.stdout.flush()
        print(json.dumps({"prompt_tokens": len(ids), "new_tokens": len(new_tokens), "stopped": stopped,
                          "mem_len": mem_len, "seconds": round(time.time() - started, 3)}), file=sys.stderr)
    return 0


def check_cache(config, model_config, mem_len: int, longest_prompt: int) -> None:
    """Refuses (UsageError naming --mem-len) a cache that would not fit this machine's memory, before
    the model is restored (trainer/planning/generation.py); the prompt is read in segments of
    ``prompt_segment_len(mem_len)`` pieces (Streamer)."""
    from trainer.models.generation import prompt_segment_len
    from trainer.planning.generation import check_generation_cache

    why = ""
    if config.mem_len == -1:
        why = (f" (-1: the model's mem_len)" if model_config.mem_len > 0 else
               f" (-1: the longest prompt's {longest_prompt} pieces and --max-new-tokens {config.max_new_tokens}, "
               "for a model without memory)")
    check_generation_cache("--mem-len", model_config, mem_len, lambda size: (prompt_segment_len(size), size), why=why)


class Streamer:
    """Yields a prompt's new tokens one at a time from the cached two-stream steps
    (trainer/models/generation.py: the prompt read by read_prompt in segments of ``mem_len`` pieces
    (at most 512: prompt_segment_len), each seeing the ``mem_len`` states before it, the cache built by start_from_memory, then
    extend_generation per token). Memory stays bounded by ``mem_len`` however long the prompt."""

    def __init__(self, network, mem_len: int, stop_ids: list[int], excluded_ids: list[int]):
        import tensorflow as tf

        from trainer.models.generation import extend_generation, prompt_segment_len, start_from_memory
        from trainer.models.inference_network import inference_network

        self.network = inference_network(network, mem_len)
        self.segment_len = prompt_segment_len(mem_len)
        self.stop_ids, self.excluded_ids = set(stop_ids), list(excluded_ids)
        # Traced once per segment and memory length (a few: the memory grows to mem_len, then stays),
        # once per cached length (start) and once (extend): the steps then run as graphs.
        self.segment = tf.function(lambda ids, mems: self.network.encode(ids, tf.zeros_like(ids), mems=mems)[1])
        self.start = tf.function(lambda mems, valid: start_from_memory(self.network, mems, valid))
        self.extend = tf.function(lambda cache, tokens: extend_generation(self.network, cache, tokens))

    def tokens(self, prompt_ids, config):
        """Yields each new token id (int) of ``prompt_ids``, then None when a stop token was chosen."""
        from trainer.models.generation import choose_tokens, read_prompt

        mems, valid = read_prompt(self.network, prompt_ids, self.segment_len, self.segment)
        cache, logits = self.start(mems, valid)
        for step in range(config.max_new_tokens):
            tokens = choose_tokens(logits, config.temperature, config.top_k, config.top_p, config.seed, step,
                                   self.excluded_ids)
            token = int(tokens[0])
            if token in self.stop_ids:
                yield None
                return
            yield token
            if step + 1 < config.max_new_tokens:
                cache, logits = self.extend(cache, tokens)
