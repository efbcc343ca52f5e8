"""BESplit as an algorithm: its knobs, their choices, its paper setting and its checks -- no
torch, so listing and validating it imports none. Its roles (the planner is SplitFed's): the
server, client and aggregator of :mod:`~raysfl.algorithms.besplit.algorithm`."""

from __future__ import annotations

from dataclasses import dataclass

from raysfl.algorithms.knobs import knob
from raysfl.algorithms.spec import Algorithm, role
from raysfl.errors import ConfigError

EVIDENCE = ("exp", "softplus", "relu")  # the evidence activation e = phi(logits) (evidential.py)
EPISTEMIC = ("mutual_info", "vacuity", "entropy")  # U_epi; entropy: eq. (4) as printed (<= 0) (evidential.py)
AVERAGES = ("seen", "sample", "all")  # how eqs. (8)-(9) average over classes (evidential_aggregation.py)
COMPARES = ("pooled", "per_class")    # ... and compare the clients (evidential_aggregation.py)
DISTANCES = ("mean", "raw")           # KD-C's relational matrices, eq. (16) (bcc.py)
PLAIN_WEIGHTS = ("samples", "uniform")
CSR_MODELS = ("round_start", "training")
CSR_ROWS = ("all", "first")
EA_SIDES = ("both", "server")
AUX_HEADS = ("pooled", "spatial")


@dataclass
class BESplitParams:
    """BESplit's knobs; defaults are the paper's where it gives one (Sec. 5.1: tau = 5,
    lambda_C = 0.2, lambda_G = 0.3), otherwise marked."""

    evidence: str = knob("exp", "BESplit: evidence activation e = act(logits): exp | softplus | relu (not given; "
                                "docs/besplit.md measures them)", choices=EVIDENCE)
    anneal_rounds: int | None = knob(None, "BESplit eq. 5: T of the KL annealing lambda_t = min(1, t/T), in rounds "
                                           "(T is the number of rounds in App. D; Sensoy et al. (2018) use 10)",
                                     integer=True, at_least=1, unset="the run's rounds")
    csr_beta: float = knob(0.9, "BESplit eq. 6: beta of the staleness-aware EMA of client state records (not given)",
                           at_least=0, below=1)
    csr_ttl: int = knob(10, "BESplit: rounds without a client before its state record is dropped (not given)",
                        integer=True, at_least=1)
    csr_model: str = knob("round_start", "BESplit: whose outputs fill the client state records: round_start (the "
                                         "server side as the round began, W_S_g) | training (as it trains, step by "
                                         "step)", choices=CSR_MODELS)
    csr_rows: str = knob("all", "BESplit: which of a client's batches fill its state record: all (every step) | "
                                "first (the round's first batch, smashed by the client-side model it downloaded)",
                         choices=CSR_ROWS)
    ea: bool = knob(True, "BESplit: Evidential Aggregation (--no-ea: both sides averaged with --plain-weights, sample "
                          "counts unless it says otherwise; Table 4's w/o EA, the paper's simple average, is --no-ea "
                          "--plain-weights uniform)")
    ea_average: str = knob("sample", "BESplit eqs. 8-9 averaged: sample (per sample) | seen (over the client's seen "
                                     "classes) | all (all N classes, as printed)", choices=AVERAGES)
    ea_q_average: str = knob("same", "BESplit eq. 8's Q over: same (as --ea-average) | all (1/N over all N "
                                     "classes, as printed: unseen classes count 0) | seen | sample",
                             choices=("same",) + AVERAGES)
    ea_epistemic: str = knob("mutual_info", "BESplit eq. 9's U_epi: mutual_info | vacuity | entropy (eq. 4 as "
                                            "printed, <= 0)", choices=EPISTEMIC)
    ea_compare: str = knob("per_class", "BESplit eqs. 8-9 compare: per_class (each class among its holders) | "
                                        "pooled (as printed)", choices=COMPARES)
    ea_samples: bool = knob(True, "BESplit eq. 10: multiply s by the client's sample count n_k")
    ea_sides: str = knob("both", "BESplit: which aggregation EA weighs: both (server- and client-side models, Sec. "
                                 "3.1) | server (ours: the server-side models only, App. D.3; client-side models by "
                                 "sample counts)", choices=EA_SIDES)
    ea_evidence: bool = knob(True, "BESplit eq. 10: the evidence-concentration factor Q (--no-ea-evidence: w/o E)")
    ea_ale: bool = knob(True, "BESplit eq. 10: the aleatoric ratio R_ale (--no-ea-ale: w/o U_ale)")
    ea_epi: bool = knob(True, "BESplit eq. 10: the epistemic ratio R_epi (--no-ea-epi: w/o U_epi)")
    plain_weights: str = knob("samples", "BESplit weights without EA: samples (FedAvg's n_k) | uniform (the paper's "
                                         "\"simple average aggregation\", Sec. 5.3)", choices=PLAIN_WEIGHTS)
    bcc: bool = knob(True, "BESplit: Bias-Compensated Collaboration (--no-bcc: w/o BCC)")
    bcc_move: bool = knob(True, "BESplit eq. 30: lent rows leave the lender's loss (--no-bcc-move: both train on "
                                "them)")
    bcc_max_ratio: float = knob(1.0, "BESplit: upper bound on BCC's mixing ratio rho (the paper's \"up to rho%\"; "
                                     "1: eqs. 31-32 alone)", at_least=0, at_most=1)
    dtd: bool = knob(True, "BESplit: train the auxiliary models (BESplit-A) by Dual-Teacher Distillation")
    aux_head: str = knob("pooled", "BESplit: the auxiliary model's head: pooled (global average pool + linear) or "
                                   "spatial (ours: pooled to at most 4x4 and flattened into the linear layer, scaled "
                                   "to a shallow CNN prefix)", choices=AUX_HEADS)
    kd_tau: float = knob(5.0, "BESplit eqs. 15, 17: distillation temperature", above=0)
    kd_lambda_c: float = knob(0.2, "BESplit eq. 18: lambda_C", at_least=0)
    kd_lambda_g: float = knob(0.3, "BESplit eq. 18: lambda_G", at_least=0)
    kd_c_distance: str = knob("mean", "BESplit eq. 16: KD-C's relational matrices: mean (normalised) | raw (as "
                                      "printed; collapses the auxiliary model here, see dtd.py)", choices=DISTANCES)
    keep_aux_optimizer: bool = knob(True, "BESplit DTD: the auxiliary model keeps its optimiser state (momentum) "
                                          "across rounds (--no-keep-aux-optimizer: restarted every round)")
    evidential_clip: float = knob(5.0, "BESplit: L2 clip of each evidential step's gradient (server-side and "
                                       "auxiliary models; not in the paper, whose lr is 500x smaller; 0: none; "
                                       "docs/besplit.md \"Dead classes\")", at_least=0)


class BESplit(Algorithm):
    name = "besplit"
    tables = "raysfl.algorithms.besplit.tables"
    losses = ("cross_entropy",)  # trains with its own evidential loss over classes; tests with cross-entropy
    summary = "BESplit: evidential aggregation, bias-compensated collaboration and dual-teacher distillation"
    params_cls = BESplitParams
    client = role("raysfl.algorithms.besplit.algorithm:DTDClient")
    server = role("raysfl.algorithms.besplit.algorithm:EvidentialServer")
    aggregator = role("raysfl.algorithms.besplit.algorithm:EvidentialAggregator")
    # Table 2 / Sec. 5.1: Dirichlet partition, kappa = 1 by default, SGD. Sec. 3.1: every client
    # holds a test split of its own data, on which BESplit-A and BESplit-G are measured (the
    # paper gives no fraction: 20 %, the data sets' own 80/20 train/test split).
    config_defaults = {"partition": "dirichlet", "alpha": 1.0, "optimizer": "sgd", "local_test_fraction": 0.2}

    @classmethod
    def validate(cls, cfg) -> None:
        p = cfg.algo_params
        if p.ea_compare == "per_class" and p.ea_average == "all":
            raise ConfigError("ea_compare 'per_class' combines classes by ea_average 'seen' or 'sample', not 'all'")
