"""How tensors cross actor boundaries, and how the bytes are counted.

Every algorithm sends smashed data, gradients and model parameters through these helpers,
so the byte counts in the metrics are the sizes of the buffers that really travel.

Tensors are shipped as contiguous NumPy arrays: Ray serialises those out-of-band and the
receiver reads them zero-copy from the object store (a torch tensor would be copied; see
DESIGN.md). ``transfer_dtype`` optionally halves activations and gradients on the wire
(float16, or bfloat16 carried as its raw 16-bit pattern since NumPy has no bfloat16).

Where the sender and the receiver share one GPU (``--device-payloads``, ours), a CUDA tensor
does not leave the GPU: what travels is torch's CUDA IPC handle of it, and the receiver copies
it device to device (:func:`pack` with ``on_device``). The byte counts are the tensor's all
the same: they measure the simulated link, not the host's copies.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import torch

_WIRE = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class Wire:
    """A tensor as it travels: a NumPy buffer plus what is needed to rebuild it, or (``cuda``)
    torch's CUDA IPC handle of a tensor that stays in the sender's GPU memory."""

    data: np.ndarray | None
    dtype: str  # the wire dtype name; bfloat16 travels as int16 bits
    cuda: tuple | None = None  # (rebuild function, its arguments): torch.multiprocessing's reduction
    size: int = 0  # bytes of the tensor a ``cuda`` wire stands for
    pid: int = 0  # the process that made a ``cuda`` wire (its handle opens only in another one)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes) if self.data is not None else self.size


def pack(t: torch.Tensor, transfer_dtype: str = "float32", on_device: bool = False) -> Wire:
    """Detach, move to CPU, cast to the wire dtype and expose as a contiguous NumPy array.

    ``on_device`` (the sender and its receivers share one GPU: ``--device-payloads``): a CUDA
    tensor stays on the GPU, and its IPC handle travels instead (no device-to-host copy, no host
    sync). torch keeps the memory alive until every receiver has released it, and the receiver's
    stream waits for the sender's work on it, so the sender may drop the tensor at once."""
    t = t.detach()
    if t.is_floating_point():
        t = t.to(_WIRE[transfer_dtype])
    if on_device and t.is_cuda:
        from torch.multiprocessing.reductions import reduce_tensor

        t = t.contiguous()
        return Wire(None, str(t.dtype).removeprefix("torch."), reduce_tensor(t), t.numel() * t.element_size(),
                    os.getpid())
    t = t.to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        return Wire(t.view(torch.int16).numpy(), "bfloat16")
    return Wire(t.numpy(), str(t.dtype).removeprefix("torch."))


def writable(arr: np.ndarray) -> np.ndarray:
    """``arr``, or a copy where it is read-only (zero-copy buffers from the object store are,
    and torch warns on a tensor made from one)."""
    return arr if arr.flags.writeable else arr.copy()


def unpack(w: Wire, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rebuild a tensor on ``device``; floating data comes back as ``dtype`` (float32). A
    ``cuda`` wire is copied on the GPU into a tensor of the receiver's own (as the host path
    gives one), and the sender's memory is released at once."""
    if w.cuda is not None:
        if w.pid == os.getpid():
            raise RuntimeError("a CUDA IPC payload came back to the process that made it, where its handle does not "
                               "open; a sender whose receiver may be itself packs with on_device=False")
        rebuild, args = w.cuda
        shared = rebuild(*args)
        t = shared.to(device=device, dtype=dtype if shared.is_floating_point() else shared.dtype, copy=True)
        del shared
        return t
    t = torch.from_numpy(writable(w.data))
    if w.dtype == "bfloat16":
        t = t.view(torch.bfloat16)
    if t.is_floating_point():
        t = t.to(dtype)
    return t.to(device)


def state_to_wire(state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """A state dict as NumPy arrays (parameters always travel in full precision)."""
    return {k: v.detach().to("cpu").contiguous().numpy() for k, v in state.items()}


def wire_to_state(arrays: dict[str, np.ndarray], device="cpu") -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v, copy=True)).to(device) for k, v in arrays.items()}


def optimizer_state_to_wire(opt: torch.optim.Optimizer, prefix: str = "") -> dict[str, np.ndarray]:
    """An optimiser's per-parameter state (SGD's momentum buffers, Adam's moments and step) as
    ``<prefix><param index>.<name>`` NumPy arrays, copied to the CPU: what crosses a Ray boundary
    or goes into a checkpoint (never the optimiser's own tensors, which may live on a GPU and
    go on changing while the optimiser lives). The hyperparameters (``param_groups``) are not
    included: the receiving optimiser is built from the same config."""
    return {f"{prefix}{i}.{name}": torch.as_tensor(v).detach().to("cpu").numpy().copy()
            for i, entry in opt.state_dict()["state"].items() for name, v in entry.items()}


def load_optimizer_state(opt: torch.optim.Optimizer, arrays: dict, prefix: str = "") -> None:
    """Restore what :func:`optimizer_state_to_wire` gave (keys under ``prefix``; none: the state
    of an optimiser before its first step, so its buffers are cleared). The optimiser moves each
    buffer to its parameter's device; its learning rate and other hyperparameters stay as they
    are. Older checkpoints held the optimiser's ``state_dict`` itself: that is loaded as it is."""
    if isinstance(arrays, dict) and "param_groups" in arrays and "state" in arrays:
        opt.load_state_dict(arrays)
        return
    state: dict[int, dict] = {}
    for k, v in arrays.items():
        if k.startswith(prefix):
            i, name = k[len(prefix):].split(".", 1)
            state.setdefault(int(i), {})[name] = torch.from_numpy(np.array(v, copy=True))
    opt.load_state_dict({"state": state, "param_groups": opt.state_dict()["param_groups"]})


def state_nbytes(arrays: dict[str, np.ndarray]) -> int:
    return int(sum(a.nbytes for a in arrays.values()))


@dataclass
class Smashed:
    """One client's smashed batch as sent to its server-side role; ``labels`` None where
    they stay with the client (FedPairing: the partner returns the outputs instead)."""

    client: int
    cut: int
    activations: Wire
    labels: np.ndarray | None

    @property
    def nbytes(self) -> int:
        return self.activations.nbytes + (int(self.labels.nbytes) if self.labels is not None else 0)


@dataclass
class GradReply:
    """The server's answer to one smashed batch: the gradient at the cut, and whatever else
    the algorithm's server side sends back with it (``extra``, from ``StepResult.replies``: a
    float travels as one float32, a tensor packed; e.g. SuperSFL's server-side loss, BESplit's
    teacher logits), counted in the bytes received."""

    grad: Wire
    extra: dict[str, "Wire | float"] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return self.grad.nbytes + sum(4 if isinstance(v, float) else v.nbytes for v in self.extra.values())


@dataclass
class Traffic:
    """Bytes one virtual client sent and received in a round, by kind."""

    smashed_up: int = 0
    grad_down: int = 0
    params_up: int = 0
    params_down: int = 0
    other_up: int = 0
    other_down: int = 0
    messages: int = 0  # one-way transfers, each paying the link latency

    @property
    def up(self) -> int:
        return self.smashed_up + self.params_up + self.other_up

    @property
    def down(self) -> int:
        return self.grad_down + self.params_down + self.other_down

    def add(self, other: "Traffic") -> None:
        for f in ("smashed_up", "grad_down", "params_up", "params_down", "other_up", "other_down", "messages"):
            setattr(self, f, getattr(self, f) + getattr(other, f))


@dataclass
class ClientRoundStats:
    """What one virtual client did in one round (sent back to the driver; no tensors)."""

    client: int
    cut: int
    samples: int = 0
    steps: int = 0
    client_flops: float = 0.0
    server_flops: float = 0.0
    loss_sum: float = 0.0
    loss_count: int = 0
    traffic: Traffic = field(default_factory=Traffic)
    servers: list[int] = field(default_factory=list)  # server actors that ran its server side
    failed: bool = False  # lost its server (dead or past the deadline) mid-round: update not used
    past_deadline: bool = False  # its actor reached the round's real-time deadline before it finished
    missed_step: bool = False    # its smashed data missed a server step's window (the server dropped it)
    fallback_steps: int = 0  # local steps trained without the server's answer (SuperSFL's Alg. 3)
    agg_weight: float = float("nan")  # its server-side aggregation weight, for algorithms that
                                      # set one (BESplit's EA, eq. 10); NaN otherwise
    metrics: dict[str, list[float]] = field(default_factory=dict)  # client-side figures (``record``)
    kept: str = ""  # the name its client actor keeps its update under (resident states), or ""

    def record(self, name: str, value: float) -> None:
        """Note a client-side figure of this round (an algorithm's client hook does, e.g. TPGF's
        fusion weight); its mean over the round's clients and records becomes the metric
        column ``name`` (the client role lists it in ``columns``)."""
        self.metrics.setdefault(name, []).append(float(value))

    def merge(self, other: "ClientRoundStats") -> None:
        self.servers = sorted(set(self.servers) | set(other.servers))
        self.failed = self.failed or other.failed
        self.past_deadline = self.past_deadline or other.past_deadline
        self.missed_step = self.missed_step or other.missed_step
        self.kept = self.kept or other.kept
        self.samples = max(self.samples, other.samples)
        self.steps = max(self.steps, other.steps)
        self.fallback_steps += other.fallback_steps
        if other.agg_weight == other.agg_weight:  # not NaN
            self.agg_weight = other.agg_weight
        self.client_flops += other.client_flops
        self.server_flops += other.server_flops
        self.loss_sum += other.loss_sum
        self.loss_count += other.loss_count
        self.traffic.add(other.traffic)
        for name, values in other.metrics.items():
            self.metrics.setdefault(name, []).extend(values)
