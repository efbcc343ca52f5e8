"""Experiment trackers as callbacks (:mod:`raysfl.callbacks`): MLflow.

TensorBoard needs no callback: every run writes ``tb/`` itself (:mod:`raysfl.metrics`).

:class:`MLflowLogger` logs a run to an MLflow tracking store: the run's settings as params
(flattened: ``devices.memory_gb``, ``algo_params.mu``, ...), every numeric column of each
round's metrics row as a metric at step = round, and at the end ``config.json``,
``clients.json`` and the Parquet files as artifacts, with the trained model
(``model/model.pt``: the global model's ``state_dict``, in your own module's keys for a model you
brought, as ``raysfl export`` writes it; none for an algorithm without a global model, e.g. PSL)
and the newest checkpoint (``checkpoints/round_NNNN.pt``, which holds every client's model too);
the MLflow run ends FINISHED, or FAILED with the error. It talks to the store through ``MlflowClient`` (no global MLflow state), so
runs in threads (``raysfl compare``) log side by side. From the command line:
``raysfl run --mlflow URI`` (experiment "raysfl").

MLflow is an optional extra: ``pip install 'raysfl[mlflow]'`` (mlflow-skinny with SQLAlchemy
and Alembic, which a database store needs). Any tracking URI works (``http://host:5000``,
``sqlite:///mlflow.db``, a directory ``file:./mlruns``); MLflow 3 keeps the directory store in maintenance mode and
refuses it unless ``MLFLOW_ALLOW_FILE_STORE=true`` is set.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from raysfl.callbacks import Callback
from raysfl.errors import ConfigError, connect_error, excerpt, first_line

_FIX = "pip install 'raysfl[mlflow]'"
ARTIFACTS = ("config.json", "clients.json", "metrics.parquet", "clients.parquet", "placement.json")


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


def check_mlflow(uri: str) -> None:
    """Before the run: mlflow installed and the tracking store reachable (one-line ConfigError).
    An empty URI is refused: MLflow would take it for its default store, a database in the
    current directory."""
    if not uri.strip():
        raise ConfigError(f"mlflow must be a tracking URI (e.g. file:./mlruns, http://host:5000), got {excerpt(uri)}")
    _check_server(uri)
    _client(uri)


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


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
    """Nested settings as ``{"devices.memory_gb": "(2.0, 16.0)", ...}`` (strings, as MLflow keeps params)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = str(v)
    return out


def _chunks(items: list, n: int):
    for i in range(0, len(items), n):
        yield items[i:i + n]


class MLflowLogger(Callback):
    """Log a run to MLflow (module docstring). ``tracking_uri`` None: MLflow's own default
    (``MLFLOW_TRACKING_URI``); ``experiment``: created if missing; ``run_name``: default the
    run directory's name."""

    def __init__(self, tracking_uri: str | None = None, experiment: str = "raysfl", run_name: str | None = None,
                 artifacts: bool = True):
        # artifacts: the run's files, the trained model and the newest checkpoint (module docstring)
        self.uri, self.experiment, self.run_name, self.artifacts = tracking_uri, experiment, run_name, artifacts
        self.client = None
        self._model = None  # the trained global model (on_model)
        self.run_id: str | None = None

    def on_run_start(self, run_dir: Path, config: dict) -> None:
        from mlflow.entities import Param, RunTag

        self.client, self._model = _client(self.uri), None
        exp = self.client.get_experiment_by_name(self.experiment)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(self.experiment)
        run = self.client.create_run(exp_id, run_name=self.run_name or Path(run_dir).name,
                                     tags={"raysfl.run_dir": str(run_dir), "raysfl.algo": str(config.get("algo"))})
        self.run_id = run.info.run_id
        params = [Param(k, v[:6000]) for k, v in sorted(flatten(config).items())]
        for chunk in _chunks(params, 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=chunk)
        self.client.log_batch(self.run_id, tags=[RunTag("raysfl.resumed", str(bool(config.get("resume"))))])

    def on_round(self, row: dict) -> None:
        from mlflow.entities import Metric

        if self.run_id is None:
            return
        now = int(time.time() * 1000)
        step = int(row["round"])
        metrics = [Metric(k, float(v), now, step) for k, v in row.items()
                   if k != "round" and isinstance(v, (int, float)) and not isinstance(v, bool)
                   and math.isfinite(float(v))]
        for chunk in _chunks(metrics, 1000):
            self.client.log_batch(self.run_id, metrics=chunk)

    def on_run_end(self, run_dir: Path, rows: list[dict], error: BaseException | None) -> None:
        if self.run_id is None:
            return
        try:
            if self.artifacts:
                for name in ARTIFACTS:
                    if (Path(run_dir) / name).is_file():
                        self.client.log_artifact(self.run_id, str(Path(run_dir) / name))
                try:
                    self._log_model(Path(run_dir))
                except Exception as e:  # noqa: BLE001 - the run's own outcome matters more than its artifact
                    import sys

                    print(f"raysfl: warning: MLflow: the model was not logged ({type(e).__name__}: "
                          f"{str(e)[:200]})", file=sys.stderr)
            if error is not None:
                self.client.set_tag(self.run_id, "raysfl.error", f"{type(error).__name__}: {error}"[:5000])
        finally:
            self.client.set_terminated(self.run_id, "FAILED" if error is not None else "FINISHED")

    def on_model(self, state_dict: dict) -> None:
        self._model = state_dict  # logged with the run's files at the end

    def _log_model(self, run_dir: Path) -> None:
        """The newest checkpoint under ``checkpoints/`` and the global model's state_dict as
        ``model/model.pt`` (where the algorithm has one: :meth:`on_model`)."""
        import tempfile

        import torch

        from raysfl import checkpoint

        saved = checkpoint.rounds_saved(run_dir)
        if saved:  # none with --checkpoint-every 0
            self.client.log_artifact(self.run_id, str(run_dir / "checkpoints" / f"round_{saved[-1]:04d}.pt"),
                                     artifact_path="checkpoints")
        if getattr(self, "_model", None) is None:  # no global model (PSL, GAPSL, FLEX-SFL): the checkpoint's
            return
        with tempfile.TemporaryDirectory() as tmp:
            torch.save(self._model, Path(tmp) / "model.pt")
            self.client.log_artifact(self.run_id, str(Path(tmp) / "model.pt"), artifact_path="model")
