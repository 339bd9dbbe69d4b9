"""A Hugging Face directory from someone else cannot make us read another file, read or allocate without bound, or
print a traceback (trainer/conversion/safetensors_files.py, trainer/conversion/huggingface_weights.py): an index
whose shard names leave the directory, weights files that are not regular files, headers that promise more than
their files hold, a config.json that lies about its sizes, and JSON of the wrong types or nested too deep are each
one line naming the file and the entry or field, before any tensor is read or anything is built."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.numpy

import xlnet_cli
from trainer.conversion.huggingface_weights import HuggingFaceFormatError, load_huggingface_network
from trainer.conversion.safetensors_files import WeightsFileError

REPO = Path(__file__).resolve().parents[3]
INDEX = "model.safetensors.index.json"
SHARD = "model-00001-of-00001.safetensors"
DEEP = "[" * 100000 + "]" * 100000  # json.loads raises RecursionError on it


@pytest.fixture(scope="module")
def exported(tmp_path_factory, vocab) -> Path:
    """A tiny model's Hugging Face directory, written by our export."""
    from support.interop_models import tiny_config, write_model_dir
    from trainer.conversion.huggingface_format import write_huggingface_directory

    base = tmp_path_factory.mktemp("hostile")
    network, _ = write_model_dir(str(base / "model"), tiny_config(vocab.vocab_size), vocab, seed=5)
    write_huggingface_directory(str(base / "hf"), network, network.config, vocab.special_ids.to_dict(),
                                vocab.model_proto, uncased=False)
    return base / "hf"


@pytest.fixture
def copy_of(exported, tmp_path) -> Path:
    shutil.copytree(exported, tmp_path / "hf")
    return tmp_path / "hf"


@pytest.fixture
def sharded(copy_of) -> Path:
    """The copy with its weights as one shard named by an index."""
    (copy_of / "model.safetensors").rename(copy_of / SHARD)
    write_index(copy_of, {name: SHARD for name in safetensors.numpy.load_file(str(copy_of / SHARD))})
    return copy_of


def write_index(directory: Path, weight_map) -> None:
    (directory / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def rewrite_config(directory: Path, **changes) -> None:
    values = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**values, **changes}))


def drop_tensor(directory: Path, name: str) -> None:
    tensors = safetensors.numpy.load_file(str(directory / "model.safetensors"))
    del tensors[name]
    safetensors.numpy.save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})


def import_error(source: Path, tmp_path: Path, capsys, status: int) -> str:
    """The stderr of `xlnet import-checkpoint --huggingface SOURCE`, which must exit ``status`` in one line and
    write nothing."""
    assert xlnet_cli.main(["import-checkpoint", "--huggingface", str(source), "--output",
                           str(tmp_path / "imported")]) == status
    error = capsys.readouterr().err
    assert error.startswith("xlnet import-checkpoint: error: ") and len(error.strip().splitlines()) == 1, error
    assert not (tmp_path / "imported" / "checkpoints").exists()
    return error


# ------------------------------------------------------------------ 1. the index stays in the directory
@pytest.mark.parametrize("shard, problem", [
    ("/etc/hostname", "it is an absolute path"), ("/dev/zero", "it is an absolute path"),
    ("../model.safetensors", "it holds a '/'"), ("..", "it has an empty, '.' or '..' part"),
    ("sub/model.safetensors", "it holds a '/'"), ("gs://bucket/model.safetensors", "it holds a '/'"),
    ("c:model.safetensors", "it names another location (a scheme or drive)"),
    ("a\\model.safetensors", "it holds a backslash"), (5, "it is a number, not a file name"),
    (["model.safetensors"], "it is a list, not a file name")])
def test_an_index_naming_anything_but_a_plain_file_name_exits_3_naming_the_index_and_the_entry(
        sharded, tmp_path, capsys, shard, problem):
    weight_map = json.loads((sharded / INDEX).read_text())["weight_map"]
    write_index(sharded, {**weight_map, "transformer.mask_emb": shard})
    error = import_error(sharded, tmp_path, capsys, status=3)
    assert error == (f"xlnet import-checkpoint: error: {sharded / INDEX}: weight_map['transformer.mask_emb'] names "
                     f"{shard!r}, not a file of the directory ({problem}); shard names are plain file names\n")


@pytest.mark.parametrize("index, found", [([1, 2], "expected a JSON object with a \"weight_map\", found a list"),
                                          ({"weight_map": []}, "\"weight_map\" must be a non-empty object"),
                                          ({"weight_map": "x"}, "\"weight_map\" must be a non-empty object")])
def test_an_index_of_the_wrong_json_types_is_named(sharded, tmp_path, capsys, index, found):
    (sharded / INDEX).write_text(json.dumps(index))
    assert f"{sharded / INDEX}: {found}" in import_error(sharded, tmp_path, capsys, status=3)


def test_an_index_nested_too_deep_is_named(sharded, tmp_path, capsys):
    (sharded / INDEX).write_text(DEEP)
    assert f"{sharded / INDEX} is not valid JSON: it nests arrays" in import_error(sharded, tmp_path, capsys, status=3)


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/hostname"])
def test_a_shard_linked_outside_the_directory_is_refused_without_reading_it(sharded, target):
    (sharded / SHARD).unlink()
    (sharded / SHARD).symlink_to(target)
    with pytest.raises(WeightsFileError) as raised:
        load_huggingface_network(str(sharded))
    assert str(raised.value) == (f"{sharded / INDEX}: {sharded / SHARD} is a symbolic link to "
                                 f"{os.path.realpath(target)}, outside {sharded}")


def test_a_weights_file_that_is_a_fifo_is_refused_without_waiting_for_a_writer(copy_of):
    (copy_of / "model.safetensors").unlink()
    os.mkfifo(copy_of / "model.safetensors")
    with pytest.raises(WeightsFileError, match="model.safetensors is not a regular file"):
        load_huggingface_network(str(copy_of))


def test_a_hugging_face_cache_snapshot_linking_into_its_blobs_loads(exported, tmp_path):
    """The Hub client's cache: snapshots/REVISION/FILE are links to ../../blobs/HASH."""
    cache = tmp_path / "models--someone--xlnet"
    (cache / "blobs").mkdir(parents=True)
    snapshot = cache / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for index, file in enumerate(sorted(exported.iterdir())):
        shutil.copy(file, cache / "blobs" / f"blob{index}")
        (snapshot / file.name).symlink_to(Path("..") / ".." / "blobs" / f"blob{index}")
    assert load_huggingface_network(str(snapshot)).config.vocab_size > 0


def test_a_header_that_promises_more_than_the_file_holds_is_refused_before_reading(copy_of):
    weights = copy_of / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:60])  # the header's length says more than the 52 bytes after it
    with pytest.raises(WeightsFileError) as raised:
        load_huggingface_network(str(copy_of))
    header_bytes = int.from_bytes(data[:8], "little")
    assert str(raised.value) == (f"{weights} is truncated or damaged (60 bytes; its header claims {header_bytes} "
                                 "bytes): copy or download it again")


def test_a_header_whose_tensor_sizes_disagree_with_its_shapes_is_refused(copy_of):
    weights = copy_of / "model.safetensors"
    data = weights.read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    header["transformer.mask_emb"]["shape"] = [1, 1, 10**9]  # the byte range stays 64 bytes
    text = json.dumps(header).encode()
    weights.write_bytes(len(text).to_bytes(8, "little") + text + data[8 + length:])
    with pytest.raises(WeightsFileError, match=r"the header gives transformer.mask_emb \(F32 \[1, 1, 1000000000\], "
                                               r"4000000000 bytes\) 64 bytes; the file is damaged"):
        load_huggingface_network(str(copy_of))


# ------------------------------------------------- 2. the config against every header, in bounded memory
# The campaign's inputs, each refused in one subprocess whose peak memory (ru_maxrss) is measured around each
# refusal, under a 4 GiB address-space limit so that a regression fails fast instead of taking the machine's
# memory. Before the check of every header, vocab_size 2e9 took 8.0 GB and 64 s, d_inner 4e8 a
# ResourceExhaustedError traceback. (One subprocess for all: TensorFlow's import is most of its time.)
MEASURE = """
import contextlib, io, json, resource, sys, time
import xlnet_cli
from trainer.conversion.huggingface_weights import HuggingFaceFormatError, load_huggingface_network
from trainer.models.config import ModelConfig
from trainer.models.network import build_network

build_network(ModelConfig(vocab_size=100, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=24))  # warm
for kind, directory, output in json.loads(sys.argv[1]):
    before, started, stderr = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.monotonic(), io.StringIO()
    with contextlib.redirect_stderr(stderr):
        if kind == "load":
            try:
                load_huggingface_network(directory)
                outcome = "loaded"
            except HuggingFaceFormatError as error:
                outcome = str(error)
        else:
            outcome = xlnet_cli.main(["import-checkpoint", "--huggingface", directory, "--output", output])
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    print(json.dumps({"outcome": outcome, "stderr": stderr.getvalue(), "grown_bytes": grown,
                      "seconds": time.monotonic() - started}))
"""
# case -> (what is run, the tensor dropped, config.json's change)
LIES = {"vocab_size 2e9": ("load", "transformer.word_embedding.weight", {"vocab_size": 2 * 10**9}),
        "d_inner 4e8": ("load", "transformer.layer.0.ff.layer_1.weight", {"d_inner": 4 * 10**8}),
        "import d_inner 4e8": ("import", "transformer.layer.0.ff.layer_1.weight", {"d_inner": 4 * 10**8}),
        "import d_inner 5e6": ("import", "transformer.layer.0.ff.layer_1.weight", {"d_inner": 5 * 10**6})}


@pytest.fixture(scope="module")
def refusals(exported, tmp_path_factory) -> dict[str, dict]:
    """case -> {"outcome", "stderr", "grown_bytes", "seconds"} of each lying directory of ``LIES``."""
    import resource

    base, cases = tmp_path_factory.mktemp("lies"), []
    for index, (kind, dropped, changes) in enumerate(LIES.values()):
        directory = base / f"hf{index}"
        shutil.copytree(exported, directory)
        drop_tensor(directory, dropped)
        rewrite_config(directory, **changes)
        cases.append((kind, str(directory), str(base / f"imported{index}")))

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    run = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(cases)], capture_output=True, text=True,
                         cwd=REPO, timeout=600, preexec_fn=limit_memory,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(zip(LIES, (json.loads(line) for line in run.stdout.strip().splitlines()[-len(LIES):])))


def bounded(result: dict) -> bool:
    """The refusal grew the process's peak memory by less than 100 MB, within 30 s."""
    return result["grown_bytes"] < 100 << 20 and result["seconds"] < 30


def test_vocab_size_2e9_with_the_embedding_missing_is_refused_in_bounded_memory(refusals):
    result = refusals["vocab_size 2e9"]
    assert "missing tensor transformer.word_embedding.weight" in result["outcome"] and bounded(result), result


def test_d_inner_4e8_with_a_feed_forward_tensor_missing_is_refused_in_bounded_memory(refusals):
    result = refusals["d_inner 4e8"]
    assert "missing tensor transformer.layer.0.ff.layer_1.weight" in result["outcome"] and bounded(result), result


@pytest.mark.parametrize("d_inner", [4 * 10**8, 5 * 10**6])
def test_import_checkpoint_with_a_lying_d_inner_exits_2_in_one_line_in_bounded_memory(refusals, d_inner):
    result = refusals[f"import d_inner {d_inner:.0e}".replace("e+0", "e")]
    assert result["outcome"] == 2 and bounded(result), result
    error = result["stderr"]
    assert error.startswith("xlnet import-checkpoint: error: ") and error.count("\n") == 1, error
    assert ("(model.safetensors) does not fit the model: missing tensor transformer.layer.0.ff.layer_1.weight; "
            f"tensor transformer.layer.0.ff.layer_1.bias has shape [24], the config needs [{d_inner}]") in error


# --------------------------------------------------- 3 and 4. config.json's JSON: depth and types
def test_a_config_json_nested_too_deep_is_one_line(copy_of, tmp_path, capsys):
    (copy_of / "config.json").write_text(DEEP)
    error = import_error(copy_of, tmp_path, capsys, status=2)
    assert f"{copy_of / 'config.json'} is not valid JSON: it nests arrays or objects deeper than" in error


@pytest.mark.parametrize("field, value, said", [
    ("xlnet_pretraining", 5, "xlnet_pretraining: expected an object, got a number 5"),
    ("architectures", 5, "architectures: expected a list, each a string, got a number 5"),
    ("architectures", "XLNetLMHeadModel",
     "architectures: expected a list, each a string, got a string \"XLNetLMHeadModel\""),
    ("architectures", [["XLNetLMHeadModel"]],
     "architectures: expected a list, each a string, got a list [[\"XLNetLMHeadModel\"]]"),
    ("ff_activation", ["gelu"], "ff_activation: expected a string, got a list [\"gelu\"]"),
    ("id2label", ["a", "b"], "id2label: expected an object, got a list [\"a\", \"b\"]"),
    ("same_length", "no", "same_length: expected true or false, got a string \"no\"")])
def test_a_config_field_of_the_wrong_json_type_is_named_with_what_it_holds(copy_of, tmp_path, capsys, field, value,
                                                                          said):
    rewrite_config(copy_of, **{field: value})
    assert import_error(copy_of, tmp_path, capsys, status=2) == (
        f"xlnet import-checkpoint: error: {copy_of / 'config.json'}: {said}\n")


def test_a_config_json_that_is_not_an_object_is_named(copy_of, tmp_path, capsys):
    (copy_of / "config.json").write_text("[1, 2]")
    assert f"{copy_of / 'config.json'}: expected a JSON object" in import_error(copy_of, tmp_path, capsys, status=2)


@pytest.mark.parametrize("name", ["config.json", "spiece.model", "tokenizer_config.json"])
def test_any_file_of_the_directory_linked_to_dev_zero_exits_3_without_reading_it(copy_of, tmp_path, capsys, name):
    (copy_of / name).unlink(missing_ok=True)
    (copy_of / name).symlink_to("/dev/zero")
    assert import_error(copy_of, tmp_path, capsys, status=3) == (
        f"xlnet import-checkpoint: error: {copy_of}: {copy_of / name} is a symbolic link to /dev/zero, outside "
        f"{copy_of}\n")


def test_a_spiece_model_that_is_a_fifo_exits_3_without_waiting_for_a_writer(copy_of, tmp_path, capsys):
    (copy_of / "spiece.model").unlink()
    os.mkfifo(copy_of / "spiece.model")
    assert f"{copy_of / 'spiece.model'} is not a regular file" in import_error(copy_of, tmp_path, capsys, status=3)
