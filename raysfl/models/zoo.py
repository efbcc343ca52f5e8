"""The model zoo: networks from the split-learning papers, expressed as lists of blocks.

Every builder has the signature ``(input_shape, num_classes) -> SplitModel`` and works for the
input sizes of the supported data sets: 1x8x8 (scikit-learn digits), 1x28x28 (MNIST,
FashionMNIST) and 3x32x32 (CIFAR-10/100). Block boundaries are the places a model can be cut,
so they are chosen where the papers cut: after each conv layer for VGG, after each residual
block for ResNet, after each encoder layer for the ViT.

Weights are always initialised from scratch (never pretrained); ``build_model`` makes that
initialisation a pure function of the seed.
"""

from __future__ import annotations

import copy
import math
import operator
import threading
from collections.abc import Callable

import torch
from torch import nn

from raysfl.errors import ConfigError
from raysfl.models import custom
from raysfl.models.blob import ModelBlob
from raysfl.models.catalog import MODELS
from raysfl.models.splittable import SplitModel

Builder = Callable[[tuple[int, int, int], int], SplitModel]


# ---- cnn ------------------------------------------------------------------------------------


def cnn(input_shape: tuple[int, int, int], num_classes: int) -> SplitModel:
    """A CNN of the shape FLEX-SFL's Table 2 names for FashionMNIST ("2 conv + 2 fc"); the
    paper gives no sizes, so these are raysfl's: two 5x5 conv layers (32, 64 channels) and two
    fc layers.

    Blocks (L = 4): [conv1+ReLU+pool], [conv2+ReLU+pool], [flatten+fc1(128)+ReLU], [fc2].
    'same' padding keeps every size divisible by the pools: 8->4->2, 28->14->7, 32->16->8.
    """
    c, h, w = input_shape
    if h < 4 or w < 4:
        raise ConfigError(f"model 'cnn' needs inputs of at least 4x4, got {h}x{w}")
    flat = 64 * (h // 4) * (w // 4)
    blocks = [
        nn.Sequential(nn.Conv2d(c, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2)),
        nn.Sequential(nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2)),
        nn.Sequential(nn.Flatten(), nn.Linear(flat, 128), nn.ReLU()),
        nn.Linear(128, num_classes),
    ]
    return SplitModel("cnn", blocks, input_shape, num_classes)


# ---- VGG ------------------------------------------------------------------------------------

# Conv widths; "M" is a 2x2 max-pool after the preceding conv (CIFAR VGG, as in kuangliu/pytorch-cifar).
_VGG_CFG = {
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


def _vgg(name: str, input_shape: tuple[int, int, int], num_classes: int) -> SplitModel:
    """CIFAR-style VGG: one block per conv3x3+BN+ReLU (with the following max-pool folded in).

    A max-pool is skipped when the feature map is already 1 pixel high or wide, so small inputs
    (8x8, 28x28) still run; the classifier global-average-pools to 512 features (an identity on
    the 1x1 maps of 32x32 inputs) and applies one linear layer.
    """
    c, h, w = input_shape
    cfg = _VGG_CFG[name]
    blocks: list[nn.Module] = []
    in_ch = c
    for i, v in enumerate(cfg):
        if v == "M":
            continue
        layers: list[nn.Module] = [nn.Conv2d(in_ch, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
        pool_next = i + 1 < len(cfg) and cfg[i + 1] == "M"
        if pool_next and h >= 2 and w >= 2:
            layers.append(nn.MaxPool2d(2))
            h, w = h // 2, w // 2
        blocks.append(nn.Sequential(*layers))
        in_ch = v
    blocks.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_ch, num_classes)))
    return SplitModel(name, blocks, input_shape, num_classes)


def vgg16(input_shape: tuple[int, int, int], num_classes: int) -> SplitModel:
    """VGG-16 for CIFAR: 13 conv blocks + classifier (L = 14)."""
    return _vgg("vgg16", input_shape, num_classes)


def vgg19(input_shape: tuple[int, int, int], num_classes: int) -> SplitModel:
    """VGG-19 for CIFAR: 16 conv blocks + classifier (L = 17)."""
    return _vgg("vgg19", input_shape, num_classes)


# ---- ResNet ---------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv+BN, identity (or 1x1 conv+BN) shortcut, ReLU after the sum."""

    def __init__(self, in_ch: int, out_ch: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


def resnet18(input_shape: tuple[int, int, int], num_classes: int) -> SplitModel:
    """CIFAR-style ResNet-18: 3x3 stem (no max-pool), 8 basic blocks, global-avg-pool + fc.

    Blocks (L = 10): [stem conv+BN+ReLU], 8 x [BasicBlock] (64, 64, 128/2, 128, 256/2, 256,
    512/2, 512 channels, /2 = stride 2), [avgpool+flatten+fc]. Stride-2 convs with padding 1 take
    8x8 down to 1x1 and 28x28 to 4x4, so all supported sizes run.
    """
    c = input_shape[0]
    blocks: list[nn.Module] = [nn.Sequential(nn.Conv2d(c, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True))]
    in_ch = 64
    for out_ch, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        blocks.append(BasicBlock(in_ch, out_ch, stride))
        blocks.append(BasicBlock(out_ch, out_ch, 1))
        in_ch = out_ch
    blocks.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_ch, num_classes)))
    return SplitModel("resnet18", blocks, input_shape, num_classes)


# ---- ViT ------------------------------------------------------------------------------------


class PatchEmbed(nn.Module):
    """Image -> tokens: non-overlapping patches projected to ``dim``, a class token, learned positions."""

    def __init__(self, in_ch: int, image_hw: tuple[int, int], patch: int, dim: int):
        super().__init__()
        num_patches = (image_hw[0] // patch) * (image_hw[1] // patch)
        self.proj = nn.Conv2d(in_ch, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj(x).flatten(2).transpose(1, 2)  # (B, N, dim)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class Attention(nn.Module):
    """Multi-head self-attention written out with matmuls.

    Explicit matmuls (not ``F.scaled_dot_product_attention``) so that FlopCounterMode counts
    the attention FLOPs on CPU too, and results are bit-identical across backends.
    """

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (B, heads, N, head_dim)
        attn = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        out = attn.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class EncoderLayer(nn.Module):
    """Pre-norm transformer encoder layer: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim: int, heads: int, mlp_dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ClsHead(nn.Module):
    """Final LayerNorm, then a linear classifier on the class token."""

    def __init__(self, dim: int, num_classes: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.norm(x[:, 0]))


def vit_patch_size(h: int, w: int) -> int:
    """Largest patch size in (4, 2, 1) that divides the image and leaves at least 16 patches.

    8x8 -> 2 (16 patches), 28x28 -> 4 (49), 32x32 -> 4 (64).
    """
    for p in (4, 2):
        if h % p == 0 and w % p == 0 and (h // p) * (w // p) >= 16:
            return p
    return 1


def vit(input_shape: tuple[int, int, int], num_classes: int, *, depth: int = 6, dim: int = 64, heads: int = 4, mlp_dim: int = 128) -> SplitModel:
    """A small ViT: patch embedding, ``depth`` encoder layers, LayerNorm + linear head.

    Blocks (L = depth + 2): [patch embed + cls token + positions], depth x [encoder layer],
    [LayerNorm + head on the class token]. Activations between blocks are (tokens, dim).
    """
    c, h, w = input_shape
    patch = vit_patch_size(h, w)
    blocks: list[nn.Module] = [PatchEmbed(c, (h, w), patch, dim)]
    blocks += [EncoderLayer(dim, heads, mlp_dim) for _ in range(depth)]
    blocks.append(ClsHead(dim, num_classes))
    return SplitModel("vit", blocks, input_shape, num_classes)


# ---- registry -------------------------------------------------------------------------------

_BUILDERS: dict[str, Builder] = {  # the names and their blocks without building: models/catalog.py
    "cnn": cnn,
    "vgg16": vgg16,
    "vgg19": vgg19,
    "resnet18": resnet18,
    "vit": vit,
}


_SEEDED_BUILD = threading.Lock()  # one seeded build at a time per process (see build_model)


def build_model(name: str, input_shape: tuple[int, int, int], num_classes: int, seed: int) -> SplitModel:
    """Build model ``name`` with weights initialised deterministically from ``seed``.

    Seeding happens inside ``torch.random.fork_rng`` on the CPU generator only, so the caller's
    RNG state is left exactly as it was and CUDA is never initialised here. The generator is
    the process's, so builds are serialised: ``raysfl compare --parallel`` builds the models of
    several runs in threads of one driver, and two interleaved builds would each draw part of
    the other's stream (different initial weights for the same seed).

    A model of your own (``custom-<name>``, registered by ``raysfl.run(cfg, model=...)`` for
    the run, :mod:`raysfl.models.custom`) comes back as a copy with its own weights; the
    other arguments are then not used.
    """
    if custom.is_custom(name):
        model = custom.lookup(name)
        if model is None:
            raise custom.missing(name)
        return copy.deepcopy(model)
    if name not in MODELS:
        raise ConfigError(f"unknown model {name!r}; allowed: {', '.join(MODELS)}")
    try:
        shape = tuple(operator.index(s) for s in input_shape)
    except TypeError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise ConfigError(f"input_shape must be (C, H, W) positive ints, got {input_shape!r}")
    try:
        classes = operator.index(num_classes)
    except TypeError:
        classes = 0
    if classes < 1:
        raise ConfigError(f"num_classes must be a positive int, got {num_classes!r}")
    with _SEEDED_BUILD, torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(operator.index(seed))
        return _BUILDERS[name](shape, classes)


def initial_model(model: SplitModel | None, cfg, input_shape, num_classes: int) -> SplitModel:
    """An actor's own copy of the run's initial model: ``model``, the object the driver built
    for the run (a zoo model from the seed, or yours) and sent to the actor as a
    :class:`~raysfl.models.blob.ModelBlob`, or, without one, the zoo model ``cfg.model`` built
    from ``cfg.seed`` (the same weights)."""
    if isinstance(model, ModelBlob):
        return model.model()
    if model is not None:
        return copy.deepcopy(model)
    return build_model(cfg.model, input_shape, num_classes, seed=cfg.seed)
