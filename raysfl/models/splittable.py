"""Splittable models: a model is an ordered list of blocks, and a cut k splits it in two.

Split learning runs the first k blocks on a client and the remaining ones on a server. Every
algorithm in raysfl (SplitFed, PSL, FLEX-SFL, ...) needs the same few things from a model:

* the two halves for a cut k, as modules that share weights with the full model, so an update
  made through a half is an update of the full model;
* state-dict keys that do not depend on the cut, so halves trained at different cuts can be
  averaged key by key (``blocks.{i}.<rest>`` everywhere);
* per-block costs (parameter bytes, forward FLOPs, activation size) for cut selection and for
  the simulated communication/computation clock.

``SplitModel`` provides all of that for any list of blocks; ``raysfl.models.zoo`` builds the
concrete networks.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, _FlopCounterMode

from raysfl.errors import ConfigError


def block_index(key: str) -> int:
    """Return the block number i of a state-dict key ``blocks.{i}.<rest>``.

    Used to route the entries of a full state dict to the client or server side of a cut.
    """
    parts = key.split(".", 2)
    if len(parts) < 3 or parts[0] != "blocks" or not parts[1].isdigit():
        raise ConfigError(f"state-dict key {key!r} is not of the form 'blocks.<i>.<name>'")
    return int(parts[1])


class ModelPart(nn.Module):
    """Blocks ``lo .. hi-1`` of a ``SplitModel``, run in order.

    The block modules are the full model's own objects (not copies), so training a part trains
    the full model. They are held in an ``nn.ModuleDict`` named ``blocks`` keyed by the block's
    index in the full model, which makes ``state_dict()`` keys identical to the full model's
    (``blocks.3.weight``). ``copy.deepcopy(part)`` gives an independent part with the same keys.
    """

    def __init__(self, blocks: nn.ModuleList, lo: int, hi: int):
        super().__init__()
        self.lo = lo
        self.hi = hi
        self.blocks = nn.ModuleDict({str(i): blocks[i] for i in range(lo, hi)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks.values():
            x = block(x)
        return x

    def extra_repr(self) -> str:
        return f"lo={self.lo}, hi={self.hi}"


def _as_int(value) -> int | None:
    """``value`` as a Python int if it is an integer (int, numpy integer), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _format_cuts(cuts: list[int]) -> str:
    """``1..3`` for a contiguous range, ``1, 3, 5`` otherwise (for error messages)."""
    if cuts and cuts == list(range(cuts[0], cuts[-1] + 1)) and len(cuts) > 1:
        return f"{cuts[0]}..{cuts[-1]}"
    return ", ".join(str(c) for c in cuts) if cuts else "none"


class SplitModel(nn.Module):
    """A classifier made of ``L`` blocks; cut k gives blocks[0:k] to the client, blocks[k:L] to the server.

    Args:
        name: model name used in messages (``"cnn"``, ``"vgg16"`` ...).
        blocks: the blocks, in execution order; each takes the previous block's output.
        input_shape: per-sample input shape ``(C, H, W)``.
        num_classes: number of output logits.
        cuts: optional restriction of the allowed cuts (default: every k in 1..L-1).
    """

    def __init__(
        self,
        name: str,
        blocks: list[nn.Module],
        input_shape: tuple[int, int, int],
        num_classes: int,
        *,
        cuts: Sequence[int] | None = None,
    ):
        super().__init__()
        if len(blocks) < 2:
            raise ConfigError(f"model {name!r} needs at least 2 blocks to be split, got {len(blocks)}")
        self.name = name
        self.input_shape = tuple(int(s) for s in input_shape)
        self.num_classes = int(num_classes)
        self.blocks = nn.ModuleList(blocks)
        all_cuts = list(range(1, len(blocks)))
        if cuts is None:
            self._cuts = all_cuts
        else:
            self._cuts = sorted(set(int(k) for k in cuts))
            bad = [k for k in self._cuts if k not in all_cuts]
            if bad or not self._cuts:
                raise ConfigError(
                    f"cuts {list(cuts)} are not valid for model {name!r} with {len(blocks)} blocks; "
                    f"allowed: {_format_cuts(all_cuts)}"
                )
        # Filled lazily by _profile(): shapes[k] is the per-sample output shape of blocks[0:k]
        # (shapes[0] is the input), flops[i] the forward FLOPs per sample of block i.
        self._shapes: list[tuple[int, ...]] | None = None
        self._flops: list[int] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x

    @property
    def num_blocks(self) -> int:
        """L, the number of blocks."""
        return len(self.blocks)

    def valid_cuts(self) -> list[int]:
        """The cuts k this model may be split at (client runs blocks[0:k])."""
        return list(self._cuts)

    def leading_conv_blocks(self) -> int:
        """How many blocks from the input on are convolutional modules (hold a Conv2d): the
        cuts up to this one keep only convolutions on the client (FLEX-SFL, Sec. 5.2: "the
        first 1-3 convolutional modules are designated as client-side submodels")."""
        n = 0
        for block in self.blocks:
            if not any(isinstance(m, nn.Conv2d) for m in block.modules()):
                break
            n += 1
        return n

    # ---- parts -------------------------------------------------------------------------

    def part(self, lo: int, hi: int) -> ModelPart:
        """A module running blocks[lo:hi], sharing the block modules with this model."""
        L = self.num_blocks
        lo_i, hi_i = _as_int(lo), _as_int(hi)
        if lo_i is None or hi_i is None or not 0 <= lo_i < hi_i <= L:
            raise ConfigError(f"block range [{lo}, {hi}) is not valid for model {self.name!r}; need 0 <= lo < hi <= {L}")
        return ModelPart(self.blocks, lo_i, hi_i)

    def _check_cut(self, k: int) -> int:
        k_i = _as_int(k)
        if k_i is None or k_i not in self._cuts:
            raise ConfigError(f"cut {k} is not valid for model {self.name!r}; valid cuts: {_format_cuts(self._cuts)}")
        return k_i

    def client_part(self, k: int) -> ModelPart:
        """Blocks[0:k], the client side of cut k."""
        return self.part(0, self._check_cut(k))

    def server_part(self, k: int) -> ModelPart:
        """Blocks[k:L], the server side of cut k."""
        return self.part(self._check_cut(k), self.num_blocks)

    # ---- costs -------------------------------------------------------------------------

    def block_param_bytes(self) -> list[int]:
        """Bytes of parameters + buffers of each block (numel * element_size; 4 per float32 value).

        This is what moving a block's state between client and server costs.
        """
        out = []
        for block in self.blocks:
            tensors = list(block.parameters()) + list(block.buffers())
            out.append(sum(t.numel() * t.element_size() for t in tensors))
        return out

    def block_flops(self) -> list[int]:
        """Forward FLOPs per sample of each block (matmuls, convolutions; 2 FLOPs per MAC).

        Measured once with ``torch.utils.flop_counter.FlopCounterMode`` on a batch of 1 and
        cached. Elementwise ops (ReLU, BatchNorm, pooling) are not counted by the counter.
        """
        self._profile()
        return list(self._flops)

    def activation_shape(self, k: int) -> tuple[int, ...]:
        """Per-sample shape of the output of blocks[0:k] (what the client sends at cut k).

        ``k`` may be any value in 0..L (0 is the input, L the logits).
        """
        k_i = _as_int(k)
        if k_i is None or not 0 <= k_i <= self.num_blocks:
            raise ConfigError(f"cut {k} is out of range for model {self.name!r}; need 0..{self.num_blocks}")
        self._profile()
        return self._shapes[k_i]

    @torch.no_grad()
    def _profile(self) -> None:
        """Run one zero sample through the blocks, recording output shapes and FLOPs per block.

        Runs in eval mode (BatchNorm in train mode cannot take a batch of 1) and restores each
        submodule's previous mode afterwards. Batch statistics are not touched.
        """
        if self._shapes is not None and self._flops is not None:
            return
        modes = [(m, m.training) for m in self.modules()]
        self.eval()
        try:
            ref = next(self.parameters(), None)
            device = ref.device if ref is not None else torch.device("cpu")
            dtype = ref.dtype if ref is not None and ref.is_floating_point() else torch.float32
            x = torch.zeros((1, *self.input_shape), device=device, dtype=dtype)
            shapes = [tuple(x.shape[1:])]
            flops = []
            for block in self.blocks:
                with _dispatch_as_written(), FlopCounterMode(display=False) as counter:
                    x = block(x)
                flops.append(int(counter.get_total_flops()))
                shapes.append(tuple(x.shape[1:]))
        finally:
            for m, was_training in modes:
                m.training = was_training
        self._shapes = shapes
        self._flops = flops

    def extra_repr(self) -> str:
        return f"name={self.name!r}, input_shape={self.input_shape}, num_classes={self.num_classes}"


@contextlib.contextmanager
def _dispatch_as_written():
    """FlopCounterMode's dispatch function called as written inside, not through the
    ``torch._dynamo.disable`` wrapper torch puts around every dispatch mode's: that wrapper
    imports ``torch._dynamo`` (and with it sympy and ``torch._inductor``) on its first call,
    1.4 s of CPU in the driver's set-up while Ray starts beside it on a 2-core machine
    (docs/performance.md, section 6). Outside ``torch.compile`` the wrapper only calls the
    function, so the counts are the same. The wrapper looks for ``__dynamo_disable`` on the
    function before it imports anything (``torch._compile._disable_dynamo``); it is set to the
    function itself here and removed after, so anything else in the process is untouched. A
    torch without that hook is left as it is."""
    raw = getattr(_FlopCounterMode.__torch_dispatch__, "__wrapped__", None)
    if raw is None or hasattr(raw, "__dynamo_disable"):
        yield
        return
    setattr(raw, "__dynamo_disable", raw)
    try:
        yield
    finally:
        delattr(raw, "__dynamo_disable")
