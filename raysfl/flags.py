"""What every run setting means, for ``raysfl run --help``: its group, one line of help, and
where the values are a fixed set, the choices.

The CLI builds one flag per setting from the config dataclasses (``raysfl.config``) and each
algorithm's params dataclass; this table says what the shared settings mean (an algorithm's
knobs say it where they are declared: :mod:`raysfl.algorithms.knobs`). A test checks that
every flag has its help, so a new setting cannot arrive undocumented.
"""

from __future__ import annotations

import argparse

# Groups of ``raysfl run --help``, in order; each algorithm's knobs follow in groups of their own.
GROUPS = {
    "data": "data and federation",
    "model": "model",
    "training": "training",
    "evaluation": "evaluation, output and resume",
    "faults": "faults and deadlines",
    "devices": "simulated devices (per-client profiles, sampled from these ranges)",
    "resources": "Ray resources and placement",
}

# setting -> (group, help). Defaults and choices are added by the CLI.
SETTINGS: dict[str, tuple[str, str]] = {
    # data and federation
    "dataset": ("data", "data set (digits and mnist5k are embedded; the others need --data-root or --download)"),
    "data_root": ("data", "directory holding torchvision data sets; on a cluster, the same path on every node "
                          "(each actor reads its data there)"),
    "download": ("data", "download the torchvision data set into --data-root (or ./data)"),
    "clients": ("data", "number of clients"),
    "clients_per_round": ("data", "clients selected per round (FLEX-SFL: its participation rate rho = this / clients)"),
    "partition": ("data", "how the training set is split among the clients: a partitioner, or a .npy file of one "
                          "client id per training sample (ours; docs/custom-model-data.md)"),
    "alpha": ("data", "Dirichlet concentration of --partition dirichlet (> 0; smaller: fewer classes per client)"),
    "classes_per_client": ("data", "classes per client of --partition pathological"),
    "shards_per_client": ("data", "shards per client of --partition shards"),
    "quantity_skew": ("data", "power-law exponent of client sample counts (0 = off)"),
    "target_bins": ("data", "real-valued targets (loss mse, bce): dirichlet, pathological and shards split by this "
                            "many quantile bins of the target, as by classes (ours)"),
    "local_test_fraction": ("data", "share of each client's samples held out as its local test split "
                                    "(reported as test_accuracy_local; 0 = none)"),
    "validation": ("data", "share of the training split held out as a validation split (ours; stratified, the same "
                           "samples whatever the seed): the run trains on the rest and evaluates on it instead of "
                           "the test split, which it never loads; what raysfl tune reads (0 = none)"),
    "seed": ("data", "fixes the data partition, device profiles, selection and model initialisation"),
    # model
    "model": ("model", "network to train (`raysfl list` shows each model's valid cuts)"),
    "cut": ("model", "split point: blocks [0, cut) run on the client"),
    # training
    "algo": ("training", "algorithm (`raysfl list` lists them)"),
    "rounds": ("training", "communication rounds"),
    "local_epochs": ("training", "local epochs per round"),
    "local_steps": ("training", "local steps per round (overrides --local-epochs)"),
    "epoch": ("training", "pass: an epoch is one pass over a client's data, its last batch short (PyTorch's "
                          "DataLoader, Flower); stream: ceil(n/batch) full batches of a stream that wraps into the "
                          "next shuffle (raysfl's earlier rule)"),
    "aggregation_weights": ("training", "a client's weight in every sample-weighted average: data_size, its "
                                        "training set's size n_k (FedAvg, McMahan et al.; Flower); processed, the "
                                        "samples it trained on this round (raysfl's earlier rule)"),
    "loss": ("training", "training loss: cross_entropy (class labels: every built-in data set); mse (regression) "
                         "and bce (multi-label) take real-valued targets of your own data, "
                         "raysfl.run(cfg, data=..., loss=...)"),
    "batch_size": ("training", "mini-batch size"),
    "lr": ("training", "learning rate of every optimizer (client and server side)"),
    "lr_decay": ("training", "round t uses lr * lr_decay^(t-1) (1 = constant); the same as --lr-schedule exp:gamma=D"),
    "lr_schedule": ("training", "the round's lr (and server lr) multiplier, ours (docs/schedules.md): constant, "
                                "exp:gamma=G, step:every=E[:gamma=G], cosine[:floor=F][:rounds=T], warmup:rounds=W "
                                "(each may add :warmup=W), or module:function, your function of the round "
                                "returning the multiplier; instead of --lr-decay"),
    "momentum": ("training", "SGD momentum"),
    "weight_decay": ("training", "weight decay of every optimizer"),
    "optimizer": ("training", "optimizer of every client and server"),
    "server_lr": ("training", "learning rate of the server side"),
    "grad_angles": ("training", "record grad_angle_deg: mean pairwise angle of the clients' server-side gradients"),
    "transfer_dtype": ("training", "dtype of smashed data and gradients on the wire"),
    "deterministic": ("training", "deterministic kernels everywhere (torch.use_deterministic_algorithms, cuDNN "
                                  "without autotuning): GPU runs repeat exactly; CPU runs do without it"),
    # evaluation, output and resume
    "eval_every": ("evaluation", "evaluate every K rounds (and at the last)"),
    "eval_rounds": ("evaluation", "evaluate only in these rounds (and at the last), e.g. 1-5,11-15, instead of "
                                  "--eval-every; ours: a tuning trial evaluates only the rounds its search reads"),
    "eval_passes": ("evaluation", "where every client keeps a model of its own (psl, epsl, gapsl; SuperSFL's and "
                                  "BESplit's per-client metrics): the test-set passes their evaluation makes a "
                                  "round, in all. With more such models than this, each is scored on a seeded "
                                  "share of the test set, stratified by class (ours; metrics column "
                                  "eval_test_share; 0 = every model on the whole set)"),
    "metrics": ("evaluation", "a metric of your own (ours): module:function or name=module:function, a function "
                              "(outputs, targets) -> number or dict of numbers, run on every evaluated round's test "
                              "pass and the clients' local test splits; columns test_<name> and test_<name>_local. "
                              "Flag --metric, repeatable; a config file's metrics: a comma-separated list"),
    "metrics_aggregation": ("evaluation", "how the passes of several models or clients combine into a round's "
                                          "value of your metrics: samples (a mean weighted by sample counts), or "
                                          "module:function taking [(samples, value), ...]"),
    "checkpoint_every": ("evaluation", "checkpoint every K rounds (and at the last; 0 = never)"),
    "keep_checkpoints": ("evaluation", "keep the newest N checkpoints (0 = every one)"),
    "keep_best": ("evaluation", "also keep the checkpoint of the best test accuracy (the lowest test loss for a "
                                "loss without an accuracy, e.g. mse)"),
    "mlflow": ("evaluation", "log params, per-round metrics and the run's files to this MLflow tracking URI "
                             "(e.g. sqlite:///mlflow.db or file:./mlruns; pip install 'raysfl[mlflow]')"),
    "mlflow_artifacts": ("evaluation", "with --mlflow: where MLflow keeps the run's artifacts, a directory or a URI "
                                       "such as s3://bucket/path (when not given: mlartifacts/ beside a sqlite "
                                       "store's file); MLflow fixes it when it creates the experiment"),
    "out": ("evaluation", "parent directory of run directories"),
    "name": ("evaluation", "run directory name under --out"),
    "resume": ("evaluation", "continue the run in RUN_DIR from its latest checkpoint"),
    "init_from": ("evaluation", "start a new run (round 1, fresh optimisers) from the final global model of the "
                                "finished run in RUN_DIR, whose model must have this run's shapes; ours"),
    "progress": ("evaluation", "print a progress line per round"),
    # faults and deadlines
    "faults": ("faults", "fault schedule, comma-separated ACTION:ROLE[:key=value...] items, e.g. "
                         "kill:client:round=3,delay:client:p=0.3:seconds=2; client churn: "
                         "unavailable:client:p=0.2[:rounds=A-B] or unavailable:client:index=K[:rounds=A-B] "
                         "(docs/reliability.md)"),
    "max_restarts": ("faults", "Ray restarts of each actor before the run fails"),
    "max_round_retries": ("faults", "retries of a round whose server or fed server died"),
    "round_deadline_s": ("faults", "real seconds a round may take; later results are dropped"),
    "step_deadline_s": ("faults", "real seconds a server step waits for the other clients' smashed data once "
                                  "the step's first batch is in; late clients drop out of the round"),
    "sim_deadline_s": ("faults", "simulated seconds: slower clients are dropped and contribute nothing"),
    "min_included": ("faults", "warn about (and count) rounds that include fewer than this share of their "
                               "selected clients"),
    # devices
    "memory_gb": ("devices", "client memory, GB (LOW HIGH)"),
    "latency_ms": ("devices", "client-server latency, ms (LOW HIGH)"),
    "cpu_ghz": ("devices", "client CPU frequency, GHz (LOW HIGH)"),
    "flops_per_cycle": ("devices", "FLOP per cycle: compute speed = cpu_ghz x 1e9 x this"),
    "uplink_mbps": ("devices", "client uplink, Mbit/s (LOW HIGH)"),
    "downlink_mbps": ("devices", "client downlink, Mbit/s (LOW HIGH)"),
    "server_tflops": ("devices", "server compute speed, TFLOP/s"),
    # resources
    "client_actors": ("resources", "client actors hosting the virtual clients (client k on actor k % N)"),
    "clients_per_actor": ("resources", "clients per client actor (instead of --client-actors)"),
    "client_cpus": ("resources", "CPUs per client actor"),
    "client_gpus": ("resources", "GPUs per client actor (fractional shares allowed)"),
    "server_cpus": ("resources", "CPUs per server actor"),
    "server_gpus": ("resources", "GPUs per server actor (fractional shares allowed)"),
    "fed_cpus": ("resources", "CPUs of the fed server"),
    "fed_gpus": ("resources", "GPUs of the fed server"),
    "client_memory_gb": ("resources", "Ray memory reservation per client actor, GB"),
    "server_memory_gb": ("resources", "Ray memory reservation per server actor, GB"),
    "fed_memory_gb": ("resources", "Ray memory reservation of the fed server, GB"),
    "client_placement": ("resources", "placement-group strategy of the client actors (none: Ray's scheduling)"),
    "server_placement": ("resources", "placement-group strategy of the servers and the fed server"),
    "placement_timeout_s": ("resources", "seconds to wait for the cluster (or its autoscaler) to hold every actor; "
                                         "mid-run, how long a lost client actor is waited for before its clients sit "
                                         "rounds out (ours)"),
    "inline_object_kb": ("resources", "results up to this size travel inline through their owner, not the object "
                                      "store (applies to the local Ray raysfl starts; 100 is Ray's own value)"),
    "direct_payloads": ("resources", "smashed data and gradients go from actor to actor through the object "
                                     "store, the driver passing only references (on), or through the driver (off: "
                                     "fastest on one machine); auto: on where the cluster has more than one node "
                                     "(ours)"),
    "device_payloads": ("resources", "CUDA smashed data and gradients stay in the GPU's memory and only their IPC "
                                     "handles travel (on), or go through host memory (off); auto: on where the "
                                     "clients and the servers share the one GPU of a one-node cluster (ours)"),
    "co_host": ("resources", "the servers and the fed server share one process, each in a thread of its own "
                             "(on), or have one each (off); auto: on where it cannot change a run -- one node, no "
                             "GPU for them, no kill fault naming them, a zoo model (ours)"),
    "eval_cpus": ("resources", "CPUs (torch threads) the fed server evaluates with (ours)"),
    "eval_overlap": ("resources", "a round's evaluation runs on the fed server while the next round trains, and "
                                  "its row is written when that training is done (on), or before the next round "
                                  "starts (off); the same rows but for wall_time_s; auto: on on one node whose fed "
                                  "server has no GPU, evaluating on the cores the training leaves idle, at least one "
                                  "(ours)"),
    "client_bank": ("resources", "a client actor steps its round's clients that share their client-side blocks, "
                                 "learning rate and SplitFed's plain client role (SGD or AdamW) as one vmap-ped program, "
                                 "their parameters stacked (on), or one client at a time (off); the same rows "
                                 "within float rounding; on also keeps in a client actor the updates it sent "
                                 "where the fed server keeps them as they came (PSL's own models), so they do "
                                 "not travel back down (ours)"),
    "server_stream": ("resources", "a server takes a step's smashed data one client actor at a time, each answered "
                                   "at once, the server-side parameters updated after the last (on), or the whole "
                                   "group in one call (off); on applies where the server's step allows it (SplitFed "
                                   "V2's shared step, PSL's mean, no BatchNorm on the server side, no gradient "
                                   "angles) and there are no deadlines; the same rows within float rounding (ours)"),
    "update_sums": ("resources", "a client actor sends its clients' updates (those of one server) as one weighted "
                                 "sum (on), or one state each (off); on applies where the aggregation is FedAvg as "
                                 "it stands (SplitFed V1/V2, SL, FedAvg, FedProx, FedPairing) and there are no "
                                 "real-time deadlines; the same rows within float rounding (ours)"),
    "snapshot_refs": ("resources", "a round's snapshot names the clients' kept states (PSL's, GAPSL's, EPSL's own "
                                   "models, FLEX-SFL's client submodels) that came as the round's updates by the objects they came in (on), or "
                                   "copies them into the object store (off); auto: on on one node where the updates "
                                   "come back through the driver (not --direct-payloads on); the same rows (ours)"),
    "run_ahead": ("resources", "the next round's calls are submitted right behind this round's aggregation and "
                               "snapshot, before their answers come back, where nothing can go wrong between the "
                               "two rounds: no faults injected, no deadlines, the round ended clean (on), or after "
                               "them (off); the fed server runs its calls in order, so the next round sees the "
                               "aggregated model: the same rows but for wall_time_s (ours)"),
    "own_state_memory_mb": ("resources", "MiB of the clients' kept states (PSL's own client-side models, ...) the "
                                         "fed server holds in memory; the least recently used wait in files of its "
                                         "node beyond it (ours)"),
    "num_cpus": ("resources", "CPUs of the local Ray raysfl starts"),
    "num_gpus": ("resources", "GPUs of the local Ray raysfl starts"),
}

# What a None default means, where it is not "unset".
NONE_DEFAULTS = {
    "clients_per_round": "all", "local_steps": "from --local-epochs", "server_lr": "--lr",
    "data_root": "none", "name": "ALGO-DATASET-MODEL-sSEED-TIME", "resume": "none", "init_from": "none",
    "lr_schedule": "none: --lr-decay's", "round_deadline_s": "none",
    "step_deadline_s": "--round-deadline-s / 4, else none", "sim_deadline_s": "none", "clients_per_actor": "none",
    "client_cpus": "0.5, less where the cluster is smaller", "server_cpus": "1, less where the cluster is smaller",
    "fed_cpus": "0.5, less where the cluster is smaller", "client_memory_gb": "none", "server_memory_gb": "none",
    "fed_memory_gb": "none",
    "eval_cpus": "with --eval-overlap on, the cores of one node the training leaves idle (at least one), the fed "
                 "server's own on a cluster; off, the CPUs of the actors that wait: all of them on one node, the "
                 "servers' and the fed server's on a cluster",
    "num_cpus": "what the actors need, at least the machine's cores",
    "num_gpus": "sized to the run",
}

def paper_settings(cls, quote: str = "") -> str:
    """An algorithm's paper setting as flags (``config_defaults``, then each data set's
    ``dataset_defaults``): what ``raysfl list`` and the README's table show (``quote``: "`"
    for Markdown)."""
    def flags(d: dict) -> str:
        return " ".join(f"{quote}--{k.replace('_', '-')} {v}{quote}" for k, v in d.items())

    parts = [flags(cls.config_defaults)] if cls.config_defaults else []
    parts += [f"on {ds}: {flags(d)}" for ds, d in cls.dataset_defaults.items()]
    return "; ".join(parts) or "raysfl's defaults"


def paper_settings_table() -> str:
    """The README's table of every algorithm's paper setting (a test keeps the two equal)."""
    from raysfl.algorithms import ALGORITHMS

    rows = ["| `--algo` | paper setting (its defaults; any flag you give wins) |", "|---|---|"]
    rows += [f"| `{name}` | {paper_settings(cls, '`')} |" for name, cls in ALGORITHMS.items()]
    return "\n".join(rows)


def seed_list(text: str) -> list[int]:
    """``--seeds``: a count N (seeds 0..N-1) or the seeds, comma-separated (``0,3,7``)."""
    parts = [p.strip() for p in str(text).split(",")]
    if not all(p.lstrip("-").isdigit() for p in parts if p) or not any(parts):
        raise argparse.ArgumentTypeError(f"takes a count N (seeds 0..N-1) or seeds such as 0,3,7; "
                                         f"got {text!r}")
    if "," not in str(text):
        n = int(parts[0])
        if n < 1:
            raise argparse.ArgumentTypeError(f"a count must be >= 1 (or list the seeds, e.g. 0,3,7); got {n}")
        return list(range(n))
    seeds = [int(p) for p in parts if p]
    dup = sorted({s for s in seeds if seeds.count(s) > 1})
    if dup:
        raise argparse.ArgumentTypeError(f"seed {dup[0]} is listed twice: {text}")
    return seeds
