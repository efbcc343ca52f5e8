"""FedPairing (``fedpairing.txt``): the algorithm (``algorithm.py``) and its mathematics -- the
wireless model, pairing (Alg. 1, eq. 5), split lengths and overlapping layers (``pairing.py``).
The client-to-client step itself runs in :mod:`raysfl.runtime.peer_split`."""

from raysfl.algorithms.fed_pairing.algorithm import FedPairing, FedPairingParams

__all__ = ["FedPairing", "FedPairingParams"]
