"""`xlnet train` refuses data whose manifest does not describe its records before anything is built
(trainer/launch/pretraining_run.py runs tfrecords/verification.py check_shard_files): exit status 3,
one line naming the shard, the stream and the manifest field, no model directory written."""
from __future__ import annotations

import json
import shutil

import xlnet_cli
from support.bundled_data import SMALL_DATA_TRAINING


def test_a_manifest_promising_more_records_than_a_stream_holds_stops_train_at_start_up_with_status_3(
        small_data_dir, tmp_path, capsys):
    data, model_dir = tmp_path / "data", tmp_path / "model"
    shutil.copytree(small_data_dir, data)
    manifest = json.loads((data / "manifest.json").read_text())
    shard = manifest["splits"]["train"]["shards"][0]
    shard["streams"][-1]["records"] += 10
    shard["records"] += 10
    (data / "manifest.json").write_text(json.dumps(manifest))
    args = ["train", "--data", str(data), "--model-dir", str(model_dir), "--preset", "tiny"]
    for item in SMALL_DATA_TRAINING + ["vocab_size=1000", "train_steps=1"]:
        args += ["--set", item]
    code = xlnet_cli.main(args)
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"xlnet train: error: damaged data in {data}: {data}/train-00000-of-00002.tfrecord: the file ends after 228 "
        "records, the manifest lists 238 (records): stream 6 (55 records from record 183) holds only 45; "
        f"run `xlnet inspect {data} --verify` to check every record")
    assert not (model_dir / "model_config.json").exists()
