"""What a run gives back: callbacks (and stopping early), MLflow, TensorBoard, the checkpoints
it keeps, the disk it used, and the trained model (``RunResult.model``, ``raysfl export``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import raysfl
from raysfl import checkpoint
from raysfl.errors import ConfigError
from raysfl.evaluation import evaluate


def _events(path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_a_callback_stops_the_run_cleanly_and_everything_comes_back(quick, tmp_path, monkeypatch, capsys):
    seen = []

    class Recorder(raysfl.Callback):
        def on_run_start(self, run_dir, config):
            seen.append(("start", config["algo"]))

        def on_round(self, row):
            seen.append(row["round"])

        def on_run_end(self, run_dir, rows, error):
            seen.append(("end", len(rows), error))

    callbacks = [Recorder(), lambda row: row["round"] == 3]  # stop after round 3
    # checkpoints every 2 rounds: round 3 is not due, but a stopped run still leaves its checkpoint
    cfg = quick(algo="splitfed_v2", rounds=6, checkpoint_every=2, keep_checkpoints=1, keep_best=True, progress=True)
    res = raysfl.run(cfg, callbacks=callbacks)
    assert res.stopped and [r["round"] for r in res.metrics] == [1, 2, 3]
    assert seen == [("start", "splitfed_v2"), 1, 2, 3, ("end", 3, None)]
    # kept: the newest (3) and the best of those saved (2 or 3); round 1 was never saved
    kept = checkpoint.rounds_saved(res.run_dir)
    best = max((r["test_accuracy"], -r["round"]) for r in res.metrics if r["round"] in (2, 3))
    assert kept == sorted({3, -best[1]})
    err = capsys.readouterr().err
    assert "stopped               by a callback after round 3" in err
    assert f"disk used" in err and f"{len(kept)} checkpoint" in err
    # the model back: the one the run evaluated last
    from raysfl.data import load_dataset

    ds = load_dataset("digits")
    model = res.model()
    assert evaluate(model, ds.x_test, ds.y_test, ds.to_tensor)[0] == pytest.approx(res.final["test_accuracy"])
    # raysfl export: the same weights as a plain state_dict file
    from raysfl.cli import main

    assert main(["export", str(res.run_dir)]) == 0
    exported = torch.load(res.run_dir / "model.pt", weights_only=True)
    assert exported.keys() == model.state_dict().keys()
    assert all(torch.equal(exported[k], v) for k, v in model.state_dict().items())
    assert main(["export", str(res.run_dir), "--clients"]) == 2
    assert "has no models of the clients' own" in capsys.readouterr().err
    assert main(["export", str(res.run_dir), "--round", "1"]) == 2
    assert "no checkpoint of round 1; kept: " in capsys.readouterr().err
    # TensorBoard: one run (no sub-runs), grouped tags, the config, accuracy against simulated time
    # and bytes, hparams that are hyperparameters
    assert [p.name for p in (res.run_dir / "tb").iterdir() if p.is_dir()] == []
    tb = _events(res.run_dir / "tb")
    tags = set(tb.Tags()["scalars"])
    assert {"accuracy/test_accuracy", "loss/train_loss", "bytes/bytes_up", "time/sim_time_s", "faults/failures",
            "clients/participants", "compute/client_flops", "faults/below_min_included"} <= tags
    assert not [t for t in tags if "/" not in t] and "algorithm/below_min_included" not in tags
    assert "config/text_summary" in tb.Tags()["tensors"]
    by_time = tb.Scalars("accuracy_vs_sim_time/test_accuracy")
    assert [e.step for e in by_time] == [round(1000 * r["sim_time_total_s"]) for r in res.metrics]
    sent = np.cumsum([r["bytes_up"] + r["bytes_down"] for r in res.metrics])
    by_bytes = tb.Scalars("accuracy_vs_bytes/test_accuracy")
    assert [e.step for e in by_bytes] == sent.tolist()
    assert [e.value for e in by_bytes] == pytest.approx([r["test_accuracy"] for r in res.metrics])
    assert tb.Scalars("hparams/final_test_accuracy")[-1].value == pytest.approx(res.final["test_accuracy"])
    hp = tb.PluginTagToContent("hparams")
    assert set(hp) >= {"_hparams_/experiment", "_hparams_/session_start_info"}
    from tensorboard.plugins.hparams import plugin_data_pb2

    info = plugin_data_pb2.HParamsPluginData.FromString(hp["_hparams_/session_start_info"]).session_start_info
    assert {"lr", "algo", "clients", "seed"} <= set(info.hparams)
    bookkeeping = [k for k in info.hparams if k.split(".")[0] in (
        "out", "resume", "progress", "checkpoint_every", "keep_checkpoints", "keep_best", "max_restarts", "resources")]
    assert not bookkeeping, bookkeeping
    # a stopped run resumes from the round it stopped at
    resumed = raysfl.run(raysfl.resume_config(res.run_dir, {"rounds": 4, "progress": False}))
    assert [r["round"] for r in resumed.metrics] == [1, 2, 3, 4] and not resumed.stopped


@pytest.mark.slow  # ~18 s, most of it MLflow's sqlite store being made; CI runs the slow tests
def test_mlflow_logs_a_run_as_mlflow_users_expect(quick, tmp_path, monkeypatch, capsys):
    """Issue 46: artifacts beside the sqlite store (not in the working directory), the run id and
    artifact location printed once, only the params that apply, typed; summary metrics; tb/; the
    trained model loadable with mlflow.pytorch.load_model and predicting as the run's final
    test accuracy says."""
    import json

    mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install 'raysfl[mlflow]')")
    import mlflow.pytorch

    store, cwd = tmp_path / "store", tmp_path / "cwd"
    store.mkdir()
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    uri = f"sqlite:///{store / 'mlflow.db'}"
    # --mlflow URI (a config setting, as on the command line) and a logger of your own, side by side
    res = raysfl.run(quick(algo="fedavg", rounds=3, local_steps=8, mlflow=uri),
                     callbacks=[raysfl.trackers.MLflowLogger(uri, experiment="mine", artifacts=False)])
    assert list(cwd.iterdir()) == []  # no ./mlruns, no ./mlflow.db
    client = mlflow.MlflowClient(tracking_uri=uri)
    runs = {e: client.search_runs([client.get_experiment_by_name(e).experiment_id])[0] for e in ("raysfl", "mine")}
    err = capsys.readouterr().err
    for experiment, run in runs.items():
        assert run.info.status == "FINISHED" and run.info.run_name == res.run_dir.name
        beside = (store / "mlartifacts").as_uri()
        assert run.info.artifact_uri.startswith(beside + "/")
        said = [line for line in err.splitlines() if run.info.run_id in line]
        assert said == [f"raysfl: MLflow run {run.info.run_id} (experiment '{experiment}', {uri}); "
                        f"artifacts: {run.info.artifact_uri}"]
        history = client.get_metric_history(run.info.run_id, "test_accuracy")
        assert [(m.step, m.value) for m in history] == [(r["round"], pytest.approx(r["test_accuracy"]))
                                                        for r in res.metrics]
        metrics = run.data.metrics
        assert metrics["final_test_accuracy"] == pytest.approx(res.final["test_accuracy"])
        assert metrics["best_test_accuracy"] == pytest.approx(max(r["test_accuracy"] for r in res.metrics))
        assert metrics["best_test_loss"] == pytest.approx(min(r["test_loss"] for r in res.metrics))
    assert not client.list_artifacts(runs["mine"].info.run_id)  # artifacts=False
    # params: what applies to this run, typed (JSON text; a string as it is)
    run = runs["raysfl"]
    params = run.data.params
    assert params["algo"] == "fedavg" and params["partition"] == "iid"
    assert json.loads(params["lr"]) == res.config.lr and json.loads(params["local_steps"]) == 8
    assert json.loads(params["devices.memory_gb"]) == [2.0, 16.0] and json.loads(params["deterministic"]) is False
    left_out = [k for k in params if k.split(".")[0] in (
        "alpha", "classes_per_client", "shards_per_client", "local_epochs", "out", "name", "progress", "mlflow",
        "mlflow_artifacts", "resources", "checkpoint_every", "keep_checkpoints", "resume", "faults", "server_lr")]
    assert not left_out, left_out
    assert "None" not in params.values() and not any(v.startswith("(") for v in params.values())
    # the run's files and tb/, where MLflow says they are: under the store's directory
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.json", "metrics.parquet", "checkpoints", "tb", "state_dict"} <= arts
    tb = [a.path for a in client.list_artifacts(run.info.run_id, "tb")]
    assert tb and all(p.startswith("tb/events.out.tfevents.") for p in tb)
    assert sorted(p.name for p in (res.run_dir / "tb").iterdir()) == sorted(p.split("/")[-1] for p in tb)
    local = client.download_artifacts(run.info.run_id, "state_dict/model.pt", str(tmp_path / "down"))
    state = torch.load(local, weights_only=True)
    trained = res.model()
    assert state.keys() == trained.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in trained.state_dict().items())
    # the MLflow model: loads with mlflow.pytorch.load_model, predicts as the run's final accuracy says
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    loaded = mlflow.pytorch.load_model(f"runs:/{run.info.run_id}/model")
    from raysfl.data import load_dataset

    ds = load_dataset("digits")
    x = ds.to_tensor(ds.x_test)
    with torch.no_grad():
        out, expected = loaded(x), trained(x)
    assert torch.allclose(out, expected, atol=1e-5)
    accuracy = float((out.argmax(1).numpy() == ds.y_test).mean())
    assert accuracy == pytest.approx(res.final["test_accuracy"], abs=1e-9)
    assert accuracy > 0.2  # trained: better than chance (0.1), so the check tells models apart
    assert not list(cwd.iterdir())


def test_mlflow_artifacts_where_asked_and_an_experiment_keeps_its_own(tmp_path, monkeypatch, capsys):
    """--mlflow-artifacts: a new experiment keeps its artifacts there; MLflow fixes the location
    when it creates the experiment, so another one asked later is refused in one line, before the
    run. The flag needs --mlflow, and an empty location is refused."""
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install 'raysfl[mlflow]')")
    from raysfl.resolve import validate
    from raysfl.trackers import MLflowLogger

    monkeypatch.chdir(tmp_path)
    uri, arts = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}", tmp_path / "arts"
    (tmp_path / "store").mkdir()
    cfg = validate(raysfl.config_from_kwargs(mlflow=uri, mlflow_artifacts=str(arts), progress=False))
    logger = MLflowLogger(cfg.mlflow, artifact_location=cfg.mlflow_artifacts)
    (tmp_path / "run").mkdir()
    logger.on_run_start(tmp_path / "run", cfg.to_dict())
    assert logger.artifact_uri == f"{arts.as_uri()}/{logger.run_id}/artifacts"
    assert f"artifacts: {logger.artifact_uri}" in capsys.readouterr().err
    logger.on_run_end(tmp_path / "run", [], None)
    # the experiment exists: the same location again is fine, and so is none (the experiment's own)
    validate(raysfl.config_from_kwargs(mlflow=uri, mlflow_artifacts=str(arts), progress=False))
    again = MLflowLogger(uri)
    again.on_run_start(tmp_path / "run", cfg.to_dict())
    assert again.artifact_uri.startswith(arts.as_uri() + "/")
    again.on_run_end(tmp_path / "run", [], None)
    other = tmp_path / "other"
    with pytest.raises(ConfigError) as e:
        validate(raysfl.config_from_kwargs(mlflow=uri, mlflow_artifacts=str(other), progress=False))
    assert str(e.value) == (f"MLflow experiment 'raysfl' in '{uri}' keeps its artifacts in {arts.as_uri()}, fixed "
                            f"when it was created, not in {other.as_uri()}: drop --mlflow-artifacts, or log to "
                            f"another store (--mlflow sqlite:///other/mlflow.db)")
    with pytest.raises(ConfigError, match=r"^mlflow-artifacts 'arts' needs --mlflow URI"):
        validate(raysfl.config_from_kwargs(mlflow_artifacts="arts", progress=False))
    with pytest.raises(ConfigError, match=r"^mlflow-artifacts must be a directory or an artifact URI"):
        validate(raysfl.config_from_kwargs(mlflow=uri, mlflow_artifacts=" ", progress=False))
    assert {p.name for p in tmp_path.iterdir()} <= {"arts", "run", "store"}  # the cwd: no mlruns/, no mlflow.db


def test_a_model_torch_export_cannot_trace_is_a_warning_and_the_rest_is_logged(tmp_path, monkeypatch, capsys):
    """A global model with Python control flow on tensor values cannot be exported (MLflow's pt2
    format): one warning line names the cause; its state_dict is logged and the run ends FINISHED."""
    mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install 'raysfl[mlflow]')")
    from raysfl import trained
    from raysfl.trackers import MLflowLogger

    class Branchy(torch.nn.Module):
        input_shape = (3,)

        def forward(self, x):
            return x * 2 if x.sum() > 0 else x - 1

    monkeypatch.setattr(trained, "whole_model", lambda config, run_dir, state: Branchy())
    monkeypatch.chdir(tmp_path)
    uri, run_dir = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "run"
    run_dir.mkdir()
    logger = MLflowLogger(uri)
    logger.on_run_start(run_dir, {"algo": "fedavg"})
    logger.on_model({"w": torch.ones(2)})
    logger.on_run_end(run_dir, [], None)
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warned) == 1 and warned[0].startswith("raysfl: warning: MLflow: the model was not logged "
                                                     "(GuardOnDataDependentSymNode: "), warned
    client = mlflow.MlflowClient(uri)
    assert client.get_run(logger.run_id).info.status == "FINISHED"
    assert [a.path for a in client.list_artifacts(logger.run_id)] == ["state_dict"]


def test_mlflow_params_are_the_settings_that_apply_and_summaries_are_the_tasks_own():
    """Only the settings a run's partition and schedule use (alpha for dirichlet, not for iid;
    local epochs only without local steps); a run without an accuracy (regression) has the best
    and final test loss as its summary, no NaN accuracy."""
    import json

    from raysfl.metrics import summary
    from raysfl.resolve import validate
    from raysfl.trackers import params

    iid = params(validate(raysfl.config_from_kwargs(partition="iid", local_epochs=2.0)).to_dict())
    assert "alpha" not in iid and json.loads(iid["local_epochs"]) == 2.0
    dirichlet = params(validate(raysfl.config_from_kwargs(partition="dirichlet", alpha=0.3, local_steps=4)).to_dict())
    assert json.loads(dirichlet["alpha"]) == 0.3 and "local_epochs" not in dirichlet
    assert "classes_per_client" not in dirichlet and "shards_per_client" not in dirichlet
    shards = params(validate(raysfl.config_from_kwargs(partition="shards", shards_per_client=3)).to_dict())
    assert json.loads(shards["shards_per_client"]) == 3 and "alpha" not in shards
    nan = float("nan")
    rows = [{"round": r, "test_accuracy": nan, "test_loss": loss, "sim_time_total_s": 1.0 * r}
            for r, loss in ((1, 0.9), (2, 0.5), (3, 0.6))]
    assert summary(rows) == {"final_test_loss": 0.6, "best_test_loss": 0.5, "rounds": 3.0, "bytes_sent_mb": 0.0,
                             "sim_time_total_s": 3.0}


@pytest.mark.slow  # ~25 s on CI: MLflow's file store
def test_mlflow_directory_store_with_the_opt_in(quick, tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install 'raysfl[mlflow]')")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3: the directory store is opt-in
    uri, where = (tmp_path / "mlruns").as_uri(), tmp_path / "elsewhere"
    # --mlflow-artifacts (config mlflow_artifacts): the new experiment keeps its artifacts there
    res = raysfl.run(quick(algo="psl", rounds=1, mlflow=uri, mlflow_artifacts=str(where)))
    client = mlflow.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("raysfl").experiment_id])
    assert run.info.artifact_uri.startswith(where.as_uri() + "/") and (where / run.info.run_id).is_dir()
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert run.info.status == "FINISHED" and "checkpoints" in arts  # PSL: no global model, the checkpoint
    assert not {"model", "state_dict"} & arts and run.data.params["algo"] == "psl" and res.final["round"] == 1


def test_mlflow_is_optional_and_its_mistakes_are_one_line(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"needs the mlflow package, which is not installed; fix: pip install "
                                          r"'raysfl\[mlflow\]'"):
        raysfl.run(raysfl.config_from_kwargs(mlflow=str(tmp_path / "m"), progress=False, out=str(tmp_path)))


def test_mlflow_file_store_without_opt_in_is_refused_before_the_run(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install 'raysfl[mlflow]')")
    from raysfl.resolve import validate

    import mlflow

    if int(mlflow.__version__.split(".")[0]) < 3:
        pytest.skip("MLflow 2 takes a directory store without the opt-in")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    cfg = raysfl.config_from_kwargs(mlflow=(tmp_path / "m").as_uri(), progress=False)
    with pytest.raises(ConfigError, match="set MLFLOW_ALLOW_FILE_STORE=true, or use a database URI") as e:
        validate(cfg)
    assert "\n" not in str(e.value)


def test_callbacks_in_the_centralised_run_and_bad_callbacks(tmp_path):
    cfg = raysfl.config_from_kwargs(algo="centralized", rounds=5, local_steps=2, out=str(tmp_path), progress=False)
    res = raysfl.run(cfg, callbacks=lambda row: row["round"] >= 2)
    assert res.stopped and len(res.metrics) == 2 and checkpoint.rounds_saved(res.run_dir) == [1, 2]
    assert res.model().num_blocks == 4 and res.client_models() == {}
    with pytest.raises(ConfigError, match="a callback must be a function of the metrics row"):
        raysfl.run(cfg, callbacks=[42])


def test_rows_digest_row_by_row_is_the_hash_of_all_the_rows_each_row_serialised_once():
    """A checkpoint's hash of the metrics rows (checked on --resume) is fed row by row as a run
    grows (each row serialised once, not every row at every checkpoint) and stays the hash of the
    rows' canonical JSON list that manifests written before hold; a list that does not extend the
    last one is hashed from its start."""
    import hashlib
    import json

    reads = []

    class Row(dict):
        def items(self):
            reads.append(self["round"])
            return super().items()

    def whole(rows):  # the manifests' hash, as it was computed at once
        canon = [{k: checkpoint._canonical(v) for k, v in sorted(dict.items(r)) if v is not None} for r in rows]
        return hashlib.sha256(json.dumps(canon, sort_keys=True, default=str).encode()).hexdigest()

    rows = [Row(round=r, test_accuracy=acc, algo="psl", late=None, flag=r % 2 == 0, servers=[0, r])
            for r, acc in enumerate([0.5, float("nan"), 3, 0.75], 1)]
    digest = checkpoint.RowsDigest()
    assert digest.of([]) == whole([]) == checkpoint.rows_digest([])
    for n in (1, 2, 2, 4):
        assert digest.of(rows[:n]) == whole(rows[:n])
    assert reads == [1, 2, 3, 4]  # each row once
    other = [Row(round=1, test_accuracy=0.6)] + rows[1:]
    assert digest.of(other) == whole(other) != whole(rows)  # not an extension: from its start
    assert checkpoint.rows_digest(rows) == whole(rows)


def test_keep_checkpoints_prunes_all_but_the_newest_and_the_best(tmp_path):
    state = {"round": 0, "counters": {}, "federation": {"fed": {"global": {}}}}
    rows = [{"round": r, "test_accuracy": acc} for r, acc in enumerate([0.5, 0.9, 0.6, float("nan"), 0.7], 1)]
    for r in range(1, 6):
        checkpoint.save(tmp_path, r, {**state, "round": r})
        saved = checkpoint.rounds_saved(tmp_path)
        checkpoint.prune(tmp_path, 2, checkpoint.best_round(rows[:r], saved))
    assert checkpoint.rounds_saved(tmp_path) == [2, 4, 5]
    checkpoint.prune(tmp_path, 1)
    assert checkpoint.rounds_saved(tmp_path) == [5]
    assert checkpoint.prune(tmp_path, 0) == []  # 0 keeps every one
    from raysfl.resolve import validate

    with pytest.raises(ConfigError, match="keep-checkpoints must be >= 0"):
        validate(raysfl.config_from_kwargs(keep_checkpoints=-1))


def test_the_model_of_clients_that_keep_their_own(quick):
    res = raysfl.run(quick(algo="psl", rounds=2))
    with pytest.raises(ConfigError, match="'psl' keeps no single global model"):
        res.state_dict()
    own = res.client_state_dicts()
    assert sorted(own) == [0, 1, 2, 3]
    # clients share the server side and differ in their own client side
    assert torch.equal(own[0]["blocks.3.weight"], own[1]["blocks.3.weight"])
    assert not torch.equal(own[0]["blocks.0.0.weight"], own[1]["blocks.0.0.weight"])
    from raysfl.cli import main

    assert main(["export", str(res.run_dir), "--clients", "--out", str(res.run_dir / "own")]) == 0
    assert len(list((res.run_dir / "own").glob("client_*.pt"))) == 4
    # load_run: the same from the directory alone
    again = raysfl.load_run(res.run_dir).client_state_dicts()
    assert all(torch.equal(again[2][k], v) for k, v in own[2].items())


def test_a_run_without_checkpoints_says_why_it_has_no_model(tmp_path):
    import json

    from raysfl.resolve import validate

    (tmp_path / "config.json").write_text(json.dumps(validate(raysfl.config_from_kwargs(checkpoint_every=0)).to_dict()))
    res = raysfl.load_run(tmp_path)
    assert res.config.checkpoint_every == 0 and res.metrics == []
    with pytest.raises(ConfigError, match="has no checkpoint to take the model from .*--checkpoint-every 0"):
        res.model()
    with pytest.raises(ConfigError, match="is not a run directory"):
        raysfl.load_run(tmp_path / "nope")


def test_runs_started_at_once_get_their_own_directories(tmp_path, monkeypatch):
    """Runs of the same config started in the same second (threads, as ``compare --parallel``
    and the benchmarks start them, or two processes) each claim a directory of their own --
    also when the other run creates the name between a look and the claim."""
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from raysfl.runtime.experiment import _new_run_dir

    cfg = raysfl.config_from_kwargs(algo="splitfed_v1", out=str(tmp_path))
    with ThreadPoolExecutor(8) as pool:
        dirs = list(pool.map(lambda _: _new_run_dir(cfg), range(16)))
    assert len(set(dirs)) == 16 and all(d.is_dir() and d.parent == tmp_path for d in dirs)
    # the race, made certain: the name is taken after any look at it
    cfg.name = "taken"
    (tmp_path / "taken").mkdir()
    monkeypatch.setattr(Path, "exists", lambda self: False)
    assert _new_run_dir(cfg) == tmp_path / "taken-1"
