"""BESplit as an algorithm: its knobs, their choices, its paper setting and its checks -- no
torch, so listing and validating it imports none. Its roles (the planner is SplitFed's): the
server, client and aggregator of :mod:`~raysfl.algorithms.besplit.algorithm`."""

from __future__ import annotations

import math
from dataclasses import dataclass

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

    evidence: str = "exp"           # evidence activation e = phi(logits): exp | softplus | relu (not given;
                                    # docs/besplit.md measures them)
    anneal_rounds: int | None = None  # T of lambda_t = min(1, t/T) (eq. 5), in rounds; None: the run's rounds
                                    # (T is the number of rounds in App. D; Sensoy et al. (2018) use 10)
    csr_beta: float = 0.9           # beta of eq. (6)'s staleness-aware EMA (not given)
    csr_ttl: int = 10               # rounds without the client before its record is dropped (not given)
    csr_model: str = "round_start"  # whose outputs fill the records: round_start (W_S_k as the round began,
                                    # i.e. W_S_g) | training (W_S_k as it trains, step by step)
    csr_rows: str = "all"           # which of a client's batches fill its record: all (every step of the round) |
                                    # first (the round's first batch: smashed by the W_C_k it downloaded, so with
                                    # csr_model round_start the record is W_g's own view of the client's data)
    ea: bool = True                 # Evidential Aggregation (False: Table 4's "w/o EA", see plain_weights)
    ea_average: str = "sample"      # eqs. (8)-(9) per sample | over seen classes | all N classes (as printed)
    ea_q_average: str = "same"      # eq. (8)'s Q over: same (as ea_average) | all (1/N over all N classes, as
                                    # printed: unseen classes count 0) | seen | sample
    ea_epistemic: str = "mutual_info"  # U_epi of eq. (9): mutual_info | vacuity | entropy (eq. 4 as printed, <= 0)
    ea_compare: str = "per_class"   # eqs. (8)-(9) compare each class among its holders | pooled (as printed)
    ea_samples: bool = True         # multiply eq. (10)'s s by the client's sample count n_k
    ea_sides: str = "both"          # which aggregation EA weighs: both (Sec. 3.1: W_Sg = A({W_Sk}), W_Cg =
                                    # A({W_Ck})) | server (ours: the main server's W_S_k alone, App. D.3; the fed
                                    # server averages W_C_k by sample counts); 10 paired seeds did not show server level
    ea_evidence: bool = True        # the evidence-concentration factor Q of eq. (10) (False: "w/o E")
    ea_ale: bool = True             # the aleatoric ratio R_ale (False: "w/o U_ale")
    ea_epi: bool = True             # the epistemic ratio R_epi (False: "w/o U_epi")
    plain_weights: str = "samples"  # weights without EA: samples (FedAvg's n_k) | uniform (the paper's
                                    # "simple average aggregation", Sec. 5.3)
    bcc: bool = True                # Bias-Compensated Collaboration (False: "w/o BCC")
    bcc_move: bool = True           # eq. (30): lent rows leave the lender's loss (False: trained on by both)
    bcc_max_ratio: float = 1.0      # upper bound on rho (the paper's "up to rho%"); 1: eqs. 31-32 alone
    dtd: bool = True                # train the auxiliary models (BESplit-A)
    aux_head: str = "pooled"        # the auxiliary model's head: pooled (global average pool + linear) | spatial
                                    # (ours: pooled to <= 4x4 + linear, scaled to a shallow CNN prefix)
    kd_tau: float = 5.0             # distillation temperature tau (eqs. 15, 17)
    kd_lambda_c: float = 0.2        # lambda_C of eq. (18)
    kd_lambda_g: float = 0.3        # lambda_G of eq. (18)
    kd_c_distance: str = "mean"     # KD-C's relational matrices (eq. 16): mean-normalised | raw (as printed;
                                    # collapses the auxiliary model here, see dtd.py)
    keep_aux_optimizer: bool = True  # the auxiliary model's optimiser state (momentum) stays with it across
                                    # rounds (False: restarted every round; see dtd.py)
    evidential_clip: float = 5.0    # L2 clip of each evidential step's gradient (server-side and auxiliary
                                    # models): not in the paper, whose lr is 500x smaller; 0: none;
                                    # docs/besplit.md "Dead classes"


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
        if p.evidence not in EVIDENCE:
            raise ConfigError(f"unknown evidence '{p.evidence}'; allowed: {', '.join(EVIDENCE)}")
        if p.anneal_rounds is not None and (not isinstance(p.anneal_rounds, int) or p.anneal_rounds < 1):
            raise ConfigError(f"anneal_rounds must be an integer >= 1 (or unset: the run's rounds), "
                              f"got {p.anneal_rounds}")
        for name, allowed in (("ea_average", AVERAGES), ("ea_q_average", ("same",) + AVERAGES),
                              ("ea_epistemic", EPISTEMIC), ("csr_model", CSR_MODELS), ("csr_rows", CSR_ROWS),
                              ("ea_sides", EA_SIDES), ("ea_compare", COMPARES), ("plain_weights", PLAIN_WEIGHTS),
                              ("aux_head", AUX_HEADS)):
            if getattr(p, name) not in allowed:
                raise ConfigError(f"unknown {name} '{getattr(p, name)}'; allowed: {', '.join(allowed)}")
        if not (math.isfinite(p.csr_beta) and 0 <= p.csr_beta < 1):
            raise ConfigError(f"csr_beta must be in [0, 1), got {p.csr_beta}")
        if not isinstance(p.csr_ttl, int) or p.csr_ttl < 1:
            raise ConfigError(f"csr_ttl must be an integer >= 1, got {p.csr_ttl}")
        if not (math.isfinite(p.bcc_max_ratio) and 0 <= p.bcc_max_ratio <= 1):
            raise ConfigError(f"bcc_max_ratio must be in [0, 1], got {p.bcc_max_ratio}")
        if not (math.isfinite(p.kd_tau) and p.kd_tau > 0):
            raise ConfigError(f"kd_tau must be a finite number > 0, got {p.kd_tau}")
        if p.ea_compare == "per_class" and p.ea_average == "all":
            raise ConfigError("ea_compare 'per_class' combines classes by ea_average 'seen' or 'sample', not 'all'")
        if p.kd_c_distance not in DISTANCES:
            raise ConfigError(f"unknown kd_c_distance '{p.kd_c_distance}'; allowed: {', '.join(DISTANCES)}")
        if not (math.isfinite(p.evidential_clip) and p.evidential_clip >= 0):
            raise ConfigError(f"evidential_clip must be a finite number >= 0 (0: no clipping), got {p.evidential_clip}")
        for name in ("kd_lambda_c", "kd_lambda_g"):
            v = getattr(p, name)
            if not (math.isfinite(v) and v >= 0):
                raise ConfigError(f"{name} must be a finite number >= 0, got {v}")
