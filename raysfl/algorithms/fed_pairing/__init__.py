"""FedPairing (``fedpairing.txt``): the algorithm (``algorithm.py``) and its mathematics -- the
wireless model, pairing (Alg. 1, eq. 5), split lengths and overlapping layers (``pairing.py``).
The client-to-client step is FedPairing's own exchange shape (``peer_exchange.py``)."""

from raysfl.algorithms.fed_pairing.algorithm import FedPairing, FedPairingParams

__all__ = ["FedPairing", "FedPairingParams"]
