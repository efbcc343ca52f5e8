"""Experiment trackers as callbacks (:mod:`raysfl.callbacks`): MLflow.

TensorBoard needs no callback: every run writes ``tb/`` itself (:mod:`raysfl.metrics`).

:class:`MLflowLogger` logs a run to an MLflow tracking store, as an MLflow user expects (issue 46):

* where: the artifacts go beside the store -- ``mlartifacts/`` next to the database file of
  ``sqlite:///path/mlflow.db`` (not ``./mlruns`` of the working directory), inside the store
  for a directory store, where the server says for ``http://`` -- or wherever
  ``artifact_location`` (``--mlflow-artifacts``) says. MLflow fixes an experiment's artifact
  location when the experiment is created: an existing experiment keeps its own, and one that
  keeps them elsewhere than ``artifact_location`` asks is refused in one line. The MLflow run id
  and the artifact location are printed once, when the run starts;
* params: the settings that apply to the run (:func:`raysfl.metrics.applicable_settings`: no
  ``alpha`` for an iid partition, nothing operational such as ``out`` or ``resources.*``, no
  unset value), each as its typed value's text: ``0.05``, ``true``, ``[2.0, 16.0]`` (JSON),
  a string as it is;
* metrics: every numeric column of each round's metrics row at step = round, and at the end
  the run's summary (:func:`raysfl.metrics.summary`: ``final_test_accuracy``,
  ``best_test_accuracy``, or ``final_test_loss`` / ``best_test_loss`` for a loss without an
  accuracy, ``rounds``, ...) at the last round;
* artifacts, at the end: ``config.json``, ``clients.json``, the Parquet files, ``tb/`` (the
  TensorBoard events), the newest checkpoint (``checkpoints/round_NNNN.pt``, with the files of
  the clients' kept models it names, ``checkpoints/own/``) and the trained global model twice: as an MLflow model (``model``,
  :func:`mlflow.pytorch.log_model`, the whole model -- client part and server part joined --
  exported with ``torch.export``, so ``mlflow.pytorch.load_model("runs:/<run id>/model")``
  loads it without raysfl or pickle) and as a plain ``state_dict/model.pt`` (in your own
  module's keys for a model you brought, as ``raysfl export`` writes it). Neither for an
  algorithm without a global model (PSL, GAPSL, FLEX-SFL) or a run without checkpoints;

and the MLflow run ends FINISHED, or FAILED with the error. It talks to the store through
``MlflowClient``, so runs in threads (``raysfl compare``) log side by side; only
``log_model``, which knows MLflow's global state alone, runs one at a time on a thread of its
own (the caller's active MLflow run, if any, is left alone). From the command line:
``raysfl run --mlflow URI [--mlflow-artifacts LOCATION]`` (experiment "raysfl").

MLflow is an optional extra: ``pip install 'raysfl[mlflow]'`` (mlflow-skinny with SQLAlchemy
and Alembic, which a database store needs). Any tracking URI works (``http://host:5000``,
``sqlite:///mlflow.db``, a directory ``file:./mlruns``); MLflow 3 keeps the directory store in maintenance mode and
refuses it unless ``MLFLOW_ALLOW_FILE_STORE=true`` is set.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from pathlib import Path

from raysfl.callbacks import Callback
from raysfl.errors import ConfigError, connect_error, excerpt, first_line

_FIX = "pip install 'raysfl[mlflow]'"
ARTIFACTS = ("config.json", "clients.json", "metrics.parquet", "clients.parquet", "placement.json")
EXPERIMENT = "raysfl"  # the experiment of --mlflow
BESIDE_THE_STORE = "mlartifacts"  # a database file's artifacts: this directory next to it (MLflow server's name)


def _mlflow():
    try:
        import mlflow
    except ImportError:
        raise ConfigError(f"MLflow logging needs the mlflow package, which is not installed; fix: {_FIX}") from None
    return mlflow


def _client(uri: str | None):
    mlflow = _mlflow()
    try:
        client = mlflow.MlflowClient(tracking_uri=uri or None)
        client.search_experiments(max_results=1)  # reaches the store now: a bad URI fails before the run
    except Exception as e:  # noqa: BLE001 - MLflow raises its own and the store's errors
        first = first_line(e, None)
        if "unsupported URI" in first or isinstance(e, ImportError):
            raise ConfigError(f"MLflow cannot open the store {excerpt(uri)}: {first[:200]} (a database URI such as "
                              f"sqlite:///mlflow.db needs sqlalchemy and alembic); fix: {_FIX}") from None
        if "MLFLOW_ALLOW_FILE_STORE" in first:
            raise ConfigError(f"MLflow refuses the directory store {excerpt(uri)} (maintenance mode in MLflow 3): set "
                              f"MLFLOW_ALLOW_FILE_STORE=true, or use a database URI such as sqlite:///mlflow.db"
                              ) from None
        raise ConfigError(f"cannot log to MLflow at {excerpt(uri)}: {first[:300]}") from None
    return client


def check_mlflow(uri: str, artifacts: str | None = None) -> None:
    """Before the run: mlflow installed, the tracking store reachable, and its experiment
    "raysfl" (where it exists) keeping its artifacts where ``artifacts`` (``--mlflow-artifacts``)
    asks (one-line ConfigError). An empty URI or location is refused: MLflow would take an empty
    URI for its default store, a database in the current directory."""
    if not uri.strip():
        raise ConfigError(f"mlflow must be a tracking URI (e.g. file:./mlruns, http://host:5000), got {excerpt(uri)}")
    if artifacts is not None and not artifacts.strip():
        raise ConfigError(f"mlflow-artifacts must be a directory or an artifact URI (e.g. ./mlartifacts, "
                          f"s3://bucket/path), got {excerpt(artifacts)}")
    _check_server(uri)
    client = _client(uri)
    if artifacts is not None:
        _check_location(client, uri, EXPERIMENT, artifact_root(uri, artifacts))


def artifact_root(uri: str | None, artifacts: str | None = None) -> str | None:
    """Where a new experiment of store ``uri`` keeps its artifacts: ``artifacts`` (a directory,
    made absolute, or a URI such as ``s3://bucket/path``), else ``mlartifacts/`` beside a sqlite
    database file; None leaves it to MLflow (a directory store keeps them inside itself, a
    tracking server where it was told, another database ``./mlruns``)."""
    from urllib.parse import urlsplit

    if artifacts is not None:
        if "://" in artifacts or artifacts.startswith("file:"):
            return artifacts
        return Path(artifacts).expanduser().resolve().as_uri()
    if uri and uri.startswith("sqlite:///"):
        path = urlsplit(uri).path[1:]  # sqlite:///rel/mlflow.db -> rel/mlflow.db; sqlite:////abs -> /abs
        if path and path != ":memory:":
            return (Path(path).expanduser().resolve().parent / BESIDE_THE_STORE).as_uri()
    return None


def _local(location: str) -> str:
    """A location as a comparable string: a local path (``file:`` URI or path) resolved."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(location)
    if parts.scheme in ("", "file"):
        return str(Path(unquote(parts.path) if parts.scheme else location).expanduser().resolve())
    return location.rstrip("/")


def _check_location(client, uri: str | None, name: str, root: str | None) -> None:
    """An existing experiment ``name`` must keep its artifacts at ``root`` (asked with
    ``--mlflow-artifacts``): MLflow fixes the location when it creates the experiment."""
    exp = client.get_experiment_by_name(name)
    if exp is not None and root is not None and _local(exp.artifact_location) != _local(root):
        raise ConfigError(f"MLflow experiment '{name}' in {excerpt(uri)} keeps its artifacts in "
                          f"{exp.artifact_location}, fixed when it was created, not in {root}: drop "
                          f"--mlflow-artifacts, or log to another store (--mlflow sqlite:///other/mlflow.db)")


REACH_TIMEOUT_S = 3.0  # how long check_mlflow waits for a tracking server to take a connection


def _check_server(uri: str, timeout: float = REACH_TIMEOUT_S) -> None:
    """An http(s) tracking URI: its host resolves and takes a TCP connection within ``timeout``
    seconds, else one line naming the URI -- MLflow's own client retries a server that is not
    there for minutes (268 s for a port nothing listens on) before it gives up. A file or
    database store (file:, sqlite:, a path) needs no network and is not checked here."""
    from urllib.parse import urlsplit

    parts = urlsplit(uri.strip())
    if parts.scheme.lower() not in ("http", "https"):
        return
    try:
        host, port = parts.hostname, parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:  # a port that is not a number or out of range
        host = port = None
    if not host or not port:
        raise ConfigError(f"mlflow URI {excerpt(uri)} has no valid host:port; expected e.g. http://host:5000")
    why = connect_error(host, port, timeout)
    if why is None:
        return
    if why.startswith("does not resolve"):
        raise ConfigError(f"cannot reach the MLflow tracking server {excerpt(uri)}: host {excerpt(host)} {why}")
    raise ConfigError(f"cannot reach the MLflow tracking server {excerpt(uri)} ({why}); start it (mlflow server "
                      f"--host {host} --port {port}) or give another --mlflow URI, e.g. sqlite:///mlflow.db")


def params(config: dict) -> dict[str, str]:
    """The run's params as MLflow keeps them (text): the settings that apply
    (:func:`raysfl.metrics.applicable_settings`), a string as it is, any other value as JSON
    (``0.05``, ``true``, ``[2.0, 16.0]``), so ``json.loads`` gives each non-string back typed."""
    from raysfl.metrics import applicable_settings

    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in applicable_settings(config).items()}


def _chunks(items: list, n: int):
    for i in range(0, len(items), n):
        yield items[i:i + n]


# log_model reads MLflow's global tracking URI: one at a time (runs of raysfl compare log from threads)
_FLUENT = threading.Lock()


class MLflowLogger(Callback):
    """Log a run to MLflow (module docstring). ``tracking_uri`` None: MLflow's own default
    (``MLFLOW_TRACKING_URI``); ``experiment``: created if missing, with its artifacts at
    ``artifact_location`` (:func:`artifact_root`: default beside a sqlite store); ``run_name``:
    default the run directory's name; ``artifacts``: log the run's files, ``tb/``, the trained
    model and the newest checkpoint."""

    def __init__(self, tracking_uri: str | None = None, experiment: str = EXPERIMENT, run_name: str | None = None,
                 artifacts: bool = True, artifact_location: str | None = None):
        self.uri, self.experiment, self.run_name, self.artifacts = tracking_uri, experiment, run_name, artifacts
        self.artifact_location = artifact_location
        self.client = None
        self._model = None  # the trained global model's state_dict (on_model)
        self._config: dict = {}
        self.run_id: str | None = None
        self.artifact_uri: str | None = None

    def on_run_start(self, run_dir: Path, config: dict) -> None:
        from mlflow.entities import Param, RunTag

        self.client, self._model, self._config = _client(self.uri), None, config
        root = artifact_root(self.uri, self.artifact_location)
        _check_location(self.client, self.uri, self.experiment, root if self.artifact_location is not None else None)
        exp = self.client.get_experiment_by_name(self.experiment)
        exp_id = (exp.experiment_id if exp is not None
                  else self.client.create_experiment(self.experiment, artifact_location=root))
        run = self.client.create_run(exp_id, run_name=self.run_name or Path(run_dir).name,
                                     tags={"raysfl.run_dir": str(run_dir), "raysfl.algo": str(config.get("algo"))})
        self.run_id, self.artifact_uri = run.info.run_id, run.info.artifact_uri
        print(f"raysfl: MLflow run {self.run_id} (experiment '{self.experiment}', {self.client.tracking_uri}); "
              f"artifacts: {self.artifact_uri}", file=sys.stderr, flush=True)
        logged = [Param(k, v[:6000]) for k, v in sorted(params(config).items())]
        for chunk in _chunks(logged, 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=chunk)
        self.client.log_batch(self.run_id, tags=[RunTag("raysfl.resumed", str(bool(config.get("resume"))))])

    def on_round(self, row: dict) -> None:
        if self.run_id is None:
            return
        step = int(row["round"])
        self._log_metrics({k: v for k, v in row.items() if k != "round"}, step)

    def _log_metrics(self, values: dict, step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, step) for k, v in values.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))]
        for chunk in _chunks(metrics, 1000):
            self.client.log_batch(self.run_id, metrics=chunk)

    def on_run_end(self, run_dir: Path, rows: list[dict], error: BaseException | None) -> None:
        if self.run_id is None:
            return
        try:
            if rows:
                from raysfl.metrics import summary

                self._log_metrics(summary(rows), int(rows[-1]["round"]))
            if self.artifacts:
                for name in ARTIFACTS:
                    if (Path(run_dir) / name).is_file():
                        self.client.log_artifact(self.run_id, str(Path(run_dir) / name))
                if (Path(run_dir) / "tb").is_dir():
                    self.client.log_artifacts(self.run_id, str(Path(run_dir) / "tb"), artifact_path="tb")
                try:
                    self._log_model(Path(run_dir))
                except Exception as e:  # noqa: BLE001 - the run's own outcome matters more than its artifact
                    print(f"raysfl: warning: MLflow: the model was not logged ({type(e).__name__}: "
                          f"{first_line(e, 200)})", file=sys.stderr)
            if error is not None:
                self.client.set_tag(self.run_id, "raysfl.error", f"{type(error).__name__}: {error}"[:5000])
        finally:
            self.client.set_terminated(self.run_id, "FAILED" if error is not None else "FINISHED")

    def on_model(self, state_dict: dict) -> None:
        self._model = state_dict  # logged with the run's files at the end

    def _log_model(self, run_dir: Path) -> None:
        """The newest checkpoint under ``checkpoints/``; the global model (where the algorithm has
        one: :meth:`on_model`) as an MLflow model and as ``state_dict/model.pt``."""
        import tempfile

        import torch

        from raysfl import checkpoint

        saved = checkpoint.rounds_saved(run_dir)
        if saved:  # none with --checkpoint-every 0
            self.client.log_artifact(self.run_id, str(run_dir / "checkpoints" / f"round_{saved[-1]:04d}.pt"),
                                     artifact_path="checkpoints")
            from raysfl.own_state_files import files_of

            for f in files_of(run_dir, saved[-1]):  # the clients' kept states it names (PSL's models, ...)
                self.client.log_artifact(self.run_id, str(f), artifact_path="checkpoints/own")
        if getattr(self, "_model", None) is None:  # no global model (PSL, GAPSL, FLEX-SFL): the checkpoint's
            return
        with tempfile.TemporaryDirectory() as tmp:
            torch.save(self._model, Path(tmp) / "model.pt")
            self.client.log_artifact(self.run_id, str(Path(tmp) / "model.pt"), artifact_path="state_dict")
        from raysfl.trained import whole_model

        self._log_mlflow_model(whole_model(self._config, run_dir, self._model))

    def _log_mlflow_model(self, model) -> None:
        """``model`` with :func:`mlflow.pytorch.log_model` as this run's ``model``: exported with
        ``torch.export`` (MLflow's ``pt2`` format) from a batch of two zero inputs, the batch
        dimension left free. ``log_model`` takes MLflow's global tracking URI and active run, so
        it runs on a thread of its own (no active run there; the caller's is left alone) under
        :data:`_FLUENT`, with the URI set for the call and put back after."""
        import inspect
        import os
        from concurrent.futures import ThreadPoolExecutor

        import mlflow.pytorch
        import torch

        example = torch.zeros((2, *model.input_shape)).numpy()
        takes = inspect.signature(mlflow.pytorch.log_model).parameters
        # MLflow 3 names the model (``name``) and exports it (``pt2``); MLflow 2 pickles it to ``artifact_path``
        how = ({"name": "model"} if "name" in takes else {"artifact_path": "model"}) | (
            {"serialization_format": "pt2"} if "serialization_format" in takes else {})

        def log() -> None:
            from mlflow.tracking._tracking_service import utils

            env = os.environ.get("MLFLOW_TRACKING_URI")
            try:
                with utils._use_tracking_uri(self.client.tracking_uri), mlflow.start_run(run_id=self.run_id):
                    mlflow.pytorch.log_model(model, input_example=example, **how,
                                             pip_requirements=[f"torch=={torch.__version__.split('+')[0]}"])
            finally:  # _use_tracking_uri puts back MLflow's own setting, not the environment's
                if env is None:
                    os.environ.pop("MLFLOW_TRACKING_URI", None)
                else:
                    os.environ["MLFLOW_TRACKING_URI"] = env

        with _FLUENT, ThreadPoolExecutor(1, thread_name_prefix="raysfl-mlflow") as thread:
            thread.submit(log).result()
