"""FedPairing (``fedpairing.txt``): the algorithm's spec (``spec.py``), its planner (``planner.py``)
and other roles (``algorithm.py``), and its mathematics -- the wireless model, pairing (Alg. 1,
eq. 5), split lengths and overlapping layers (``pairing.py``) and the loss weights
(``weighting.py``). The client-to-client step is FedPairing's own exchange shape
(``peer_exchange.py``)."""

from raysfl.algorithms.fed_pairing.spec import FedPairing, FedPairingParams

__all__ = ["FedPairing", "FedPairingParams"]
