"""BESplit's tables (Sec. 5, Tables 3, 4 and 7), declared for ``raysfl reproduce besplit``.

Every row runs in one setting, held in ``SHARED`` so that no baseline runs on its own
defaults: a Dirichlet partition, every client holding a seeded 20 % test split of its own data
(Sec. 3.1; the paper's metric is accuracy on those splits, ``test_accuracy_local``: for
BESplit the global model's, BESplit-G), SGD, batch 32, the client side cut after two blocks.
The small scale runs 50 rounds instead of the paper's 300, and tunes every row's lr and
momentum the same way (``TUNING``: the paper's lr 1e-4 and no momentum are in the grid, beside
0.005-0.16 and momentum 0.9, which 50 rounds need; the scale's lr 0.05 and momentum 0.9 are
only where the grid starts). BESplit-G does not depend on the auxiliary models (``--no-dtd``
gives the same ``acc_g_local`` to the digit, docs/besplit.md), so BESplit-G's rows run
without them (``dtd: False``); BESplit-A is another column of a run with them
(``acc_aux_local``), compared with the same baselines in its own tables (``main_a``,
``kappa01_a``). SplitFed is SplitFed V1 (one server-side model per client, as in BESplit).
BESplit-A reads auxiliary models with a spatial head (``aux_head: spatial``, ours: pooled to
4x4 before the linear layer; the paper's head is not specified beyond "a smaller model", and a
global-average-pooled head on a 2-conv prefix caps the auxiliary model well below the
baselines at this scale); the pooled head is a row of its own. ``SplitFed with the evidential
loss`` (BESplit without EA and BCC) is shown in the main tables: it separates the evidential
loss from the aggregation and the collaboration the paper credits.

The default Evidential Aggregation (per-class relative Q, per-sample Q and uncertainties,
mutual information, times n_k, records from the round-start model) is our redesign of eqs.
8-10, not the printed equations: the ``ea`` table puts the printed EA and a minimally
repaired printed EA beside it.
"""

from __future__ import annotations

from raysfl.paper_tables import Claim, Metric, Row, Table, Tuning

SHARED = {"partition": "dirichlet", "local_test_fraction": 0.2, "optimizer": "sgd", "batch_size": 32, "cut": 2,
          "local_epochs": 1.0}
SCALES = {
    "small": {"dataset": "digits", "model": "cnn", "clients": 10, "clients_per_round": None, "rounds": 50,
              "lr": 0.05, "momentum": 0.9},
    # Table 2, F-MNIST: 100 clients, 40 a round, ResNet-18, 300 rounds, batch 32; Sec. 5.1: SGD
    # lr 1e-4 (no momentum named: none)
    "paper": {"dataset": "fashion_mnist", "model": "resnet18", "clients": 100, "clients_per_round": 40,
              "rounds": 300, "lr": 1e-4, "momentum": 0.0, "download": True},
}
METRIC = Metric(read="mean_last", k=5, column="test_accuracy_local")
TUNING = Tuning(values={"momentum": (0.9, 0.0)}, paper={"lr": 1e-4})  # Sec. 5.1: SGD lr 1e-4, no momentum named
BESPLIT_G = {"algo": "besplit", "besplit": {"dtd": False}}
# DTD trains the auxiliary models (Sec. 4.3); their head scaled to the model (ours)
BESPLIT_A = {"algo": "besplit", "besplit": {"dtd": True, "aux_head": "spatial"}}
EVIDENTIAL_SPLITFED = Row("SplitFed with the evidential loss (BESplit without EA and BCC)",
                          {"besplit": {"ea": False, "bcc": False}},
                          note="BESplit's evidential loss on SplitFed V1's per-client server copies and sample "
                               "weights: what the loss alone does")
BASELINE_ROWS = (Row("SplitFed", {"algo": "splitfed_v1"}), Row("FedAvg", {"algo": "fedavg"}, compares=("server_reduction",)),
                 Row("FedProx", {"algo": "fedprox"}, compares=("server_reduction",)))
PAPER_HOURS_MAIN = "4 rows x 5 seeds of ResNet-18 on F-MNIST, 100 clients, 300 rounds: about 60 GPU-hours"


def _main(name: str, kappa: float, source: str, figures: dict[str, str], hours: str, variant: str = "G") -> Table:
    """BESplit-``variant`` (G: the global model; A: each client's auxiliary model, read from
    ``acc_aux_local`` of a run that trains them) against the baselines at ``kappa``."""
    rows = tuple(Row(r.label, r.settings, r.compares, paper=figures[r.label]) for r in BASELINE_ROWS)
    me = f"BESplit-{variant}"
    if variant == "G":
        reference = Row(me, BESPLIT_G, paper=figures[me])
        rows += (EVIDENTIAL_SPLITFED,)
    else:
        reference = Row(me, BESPLIT_A, paper=figures[me], column="acc_aux_local")
        rows += (Row("BESplit-A, pooled head", {"besplit": {"aux_head": "pooled"}}, column="acc_aux_local",
                     note="the auxiliary model's head global-average-pooled, one value per channel"),)
    notes = ("The paper's figures are F-MNIST's column (the paper scale's data set). FedDyn, Fed-MoE, FedRDN, "
             "FAVD, MergeSFL, ParallelSFL and HASFL are not implemented.")
    if variant == "A":
        notes += (" BESplit-A is each client's auxiliary model (a smaller model trained by DTD, Sec. 4.3) on its "
                  "own test split, the baselines' the global model's; Sec. 5.2: BESplit-A 'achieving 1.3% higher "
                  "accuracy than the best baseline under the default non-IID setting and performing closely to "
                  "BESplit-G'. Its head is spatial (ours); the paper's head is not specified.")
    return Table(
        paper="besplit", name=name, title=f"{me} against SplitFed, FedAvg and FedProx, kappa {kappa:g}",
        source=source, reference=reference, rows=rows, metric=METRIC,
        claim=Claim(f"{me} is more accurate on the clients' own test splits than SplitFed, FedAvg and FedProx "
                    f"(F-MNIST, kappa {kappa:g}: {figures[me]} against {figures['SplitFed']}, "
                    f"{figures['FedAvg']}, {figures['FedProx']})", rows=tuple(r.label for r in BASELINE_ROWS)),
        shared={**SHARED, "alpha": kappa}, scales=SCALES, paper_hours=hours, notes=notes, tuning=TUNING)


FIGURES_K1 = {"BESplit-G": "74.89", "BESplit-A": "74.11", "SplitFed": "71.80", "FedAvg": "71.10", "FedProx": "71.21"}
FIGURES_K01 = {"BESplit-G": "62.72", "BESplit-A": "60.78", "SplitFed": "54.52", "FedAvg": "55.10", "FedProx": "55.25"}
MAIN = _main("main", 1.0, "Table 3 (F-MNIST, NIID, kappa = 1), Sec. 5.2", FIGURES_K1, PAPER_HOURS_MAIN)
MAIN_A = _main("main_a", 1.0, "Table 3 (F-MNIST, NIID, kappa = 1), Sec. 5.2", FIGURES_K1, PAPER_HOURS_MAIN, "A")
KAPPA_01 = _main("kappa01", 0.1, "Table 7 (F-MNIST, kappa = 0.1), App. F.1", FIGURES_K01, PAPER_HOURS_MAIN)
KAPPA_01_A = _main("kappa01_a", 0.1, "Table 7 (F-MNIST, kappa = 0.1), App. F.1", FIGURES_K01, PAPER_HOURS_MAIN, "A")

ABLATIONS = Table(
    paper="besplit", name="ablations", title="One-knob ablations of BESplit-G",
    source="Table 4 (F-MNIST column), Sec. 5.3",
    reference=Row("BESplit", BESPLIT_G, paper="74.89"),
    rows=(Row("w/o EA (sample-weighted)", {"besplit": {"ea": False}}, paper="73.04",
              note="the server-side models by sample counts, as the client side already is"),
          Row("w/o E", {"besplit": {"ea_evidence": False}}, paper="73.47"),
          Row("w/o U_ale", {"besplit": {"ea_ale": False}}, paper="74.38"),
          Row("w/o U_epi", {"besplit": {"ea_epi": False}}, paper="74.11"),
          Row("w/o BCC", {"besplit": {"bcc": False}}, paper="72.14")),
    metric=METRIC, tuning=TUNING,
    claim=Claim("each component helps: BESplit beats each of its ablations (w/o EA, E, U_ale, U_epi, BCC)"),
    shared={**SHARED, "alpha": 1.0}, scales=SCALES,
    paper_hours="6 rows x 5 seeds, ResNet-18 on F-MNIST, 300 rounds: about 90 GPU-hours",
    notes="Each row changes one knob of the full method. 'w/o EA' here keeps the client side's weights (sample "
          "counts, as with EA on the server side) and gives the server side sample weights; the paper's 'simple "
          "average aggregation' (Sec. 5.3) would also change the client side's weights: it is a row of the ea "
          "table, declared as two knobs.")

PRINTED = {"ea_average": "all", "ea_epistemic": "entropy", "ea_compare": "pooled", "csr_model": "training",
           "ea_samples": False}
# the printed EA with the two faults that reverse its intent repaired, nothing else: unseen
# classes no longer count 0 (over the seen classes), and U_epi is non-negative (mutual information
# instead of eq. 4's differential entropy, which is <= 0 and so favours the more uncertain client)
REPAIRED = {**PRINTED, "ea_average": "seen", "ea_epistemic": "mutual_info"}
EA = Table(
    paper="besplit", name="ea", title="Evidential Aggregation: our redesign against eqs. 8-10 as printed",
    source="eqs. 7-10, Sec. 4.1; Table 4's 'w/o EA' (Sec. 5.3); the default EA is ours",
    reference=Row("EA, our redesign (the default)", BESPLIT_G),
    rows=(Row("EA as printed (eqs. 8-10)", {"besplit": PRINTED}),
          Row("EA as printed, minimally repaired (ours)", {"besplit": REPAIRED},
              note="over the seen classes, mutual information for U_epi; otherwise as printed"),
          Row("no EA: sample weights", {"besplit": {"ea": False}}),
          Row("no EA: simple average (Sec. 5.3)", {"besplit": {"ea": False, "plain_weights": "uniform"}},
              note="uniform weights on both sides")),
    metric=METRIC, tuning=TUNING,
    claim=Claim("ours, not the paper's: the redesigned EA is not worse than the printed EA, its minimal repair "
                "or either plain average, by more than 1 point", kind="not_worse", margin=0.01),
    shared={**SHARED, "alpha": 0.1}, scales=SCALES,
    paper_hours="5 rows x 5 seeds, ResNet-18 on F-MNIST, 300 rounds: about 75 GPU-hours",
    notes="Measured at kappa 0.1, where the weights differ most. Printed: Q and the uncertainties over all N "
          "classes (0 for unseen ones), U_epi as eq. 4's differential entropy (<= 0), the clients pooled, the "
          "records filled from the training model, no n_k. The redesign's records are filled from the "
          "round-start model (W_S_g as the round began), a choice of ours that Fig. 1 does not make.")

EA_SIDES = Table(
    paper="besplit", name="ea_sides", title="Which aggregation EA weighs: both sides or the server side",
    source="Sec. 3.1 (both servers aggregate with A(.)), App. D.3 (the server-side models); --ea-sides",
    reference=Row("EA on both sides (Sec. 3.1, the default)", BESPLIT_G),
    rows=(Row("EA on the server side (ours)", {"besplit": {"ea_sides": "server"}}),),
    metric=METRIC, tuning=TUNING,
    claim=Claim("the paper's reading (EA on both sides, the default) is not worse than ours (the server side "
                "alone) by more than 1 point; on 10 or more paired seeds", kind="not_worse", margin=0.01,
                min_seeds=10),
    shared={**SHARED, "alpha": 0.1}, scales=SCALES,
    paper_hours="2 rows x 10 seeds, ResNet-18 on F-MNIST, 300 rounds: about 60 GPU-hours",
    notes="Run it with --seeds 10 or more: at kappa 0.1 one seed's last rounds swing by 20 points. The default "
          "was the server side (ours) until this table, on 10 paired seeds, did not show it level with the "
          "paper's both sides (both ahead by 2.1 +- 1.9 points); the paper's reading became the default.")

TABLES = (MAIN, MAIN_A, KAPPA_01, KAPPA_01_A, ABLATIONS, EA, EA_SIDES)
