"""BESplit's Dual-Teacher Distillation (Sec. 4.3, eqs. 15-18): each client's auxiliary model
W_A = [W_Ae, W_Ah] and its training step.

W_Ae has the client-side model's architecture (blocks [0, cut), its own weights, freshly
initialised) and W_Ah is a pooling + linear classifier on its output -- Table 8's sizes
(the auxiliary model is the client-side model plus a head). It trains alongside the split
step, on the same batch, with

    L_total = L_evid(W_A) + lambda_C L_KD-C(z_C, z_Ae) + lambda_G L_KD-G(W_A, W_g)        (18)

where z_C is the client-side model's smashed output for the batch (teacher 1, eq. 16-17) and
the global model's prediction (teacher 2, eq. 15) is the server's output for that smashed
batch, which comes back with the gradient (``StepResult.replies``): the split model
[W_C, W_S] the client is training, which is W_g at the start of the round. No model is
downloaded for it; the logits cost B x N floats per step, counted as traffic.

The auxiliary model lives on its client for the whole run, and so does its optimiser state
(``keep_aux_optimizer``, ``OwnModuleClient.parks_optimizer``): with ~4 steps a round, an SGD
momentum restarted every round never builds up, and BESplit-A stalled (docs/besplit.md, "The
auxiliary model's optimiser"). Alone, at raysfl's step size, the evidential loss can kill a
class of the auxiliary model for good (its logit falls so low that exp evidence has no gradient
left), as training an auxiliary model alone on its client's data showed; KD-G's softmax keeps
every logit's gradient alive. ``evidential_clip`` bounds each step's gradient (not in the paper;
same section of the docs).

KD-C's relational matrices are divided by their mean distance by default (``kd_c_distance``
"mean", as relational KD does): eq. (16)'s raw squared distances grow with the features'
norm -- hundreds for the digits CNN -- and the first KD-C step then drives the fresh
extractor's ReLUs dead (the auxiliary model stays at chance; ``--kd-c-distance raw`` shows it).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from raysfl.algorithms.besplit.bcc import kd_client, kd_global
from raysfl.algorithms.besplit.evidential import evidence, evidential_loss
from raysfl.models.heads import client_classifier


class AuxiliaryModel(nn.Module):
    """W_A: a feature extractor W_Ae and a classification head W_Ah; ``forward`` gives logits."""

    def __init__(self, extractor: nn.Module, classifier: nn.Module):
        super().__init__()
        self.extractor, self.classifier = extractor, classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.extractor(x))


def auxiliary_model(model, cut: int, num_classes: int, head: str = "pooled") -> AuxiliaryModel:
    """A fresh auxiliary model for a client holding blocks [0, ``cut``) of ``model``; its head
    (``--aux-head``): ``pooled``, global average pooling and one linear layer (the default), or
    ``spatial`` (ours), feature maps pooled to at most 4x4 and flattened into the linear layer,
    a head scaled to a shallow CNN prefix whose class information is mostly in the layout
    (:func:`raysfl.models.heads.client_classifier`)."""
    extractor = copy.deepcopy(model.part(0, cut))
    for m in extractor.modules():
        if m is not extractor and hasattr(m, "reset_parameters"):
            m.reset_parameters()
    return AuxiliaryModel(extractor, client_classifier(model.activation_shape(cut), num_classes,
                                                       spatial=head == "spatial"))


def dtd_loss(aux: AuxiliaryModel, x: torch.Tensor, y: torch.Tensor, z_client: torch.Tensor,
             teacher_logits: torch.Tensor | None, t: int, total: int, tau: float = 5.0,
             lambda_c: float = 0.2, lambda_g: float = 0.3, evidence_kind: str = "softplus",
             distance: str = "mean"):
    """Eq. (18) on one batch: (total loss, {evid, kd_c, kd_g} as floats). Without the
    server's logits (none came back) the KD-G term is left out."""
    z_aux = aux.extractor(x)
    logits = aux.classifier(z_aux)
    evid = evidential_loss(evidence(logits, evidence_kind) + 1, y, t, total)
    kd_c = kd_client(z_client.detach(), z_aux, tau, distance)
    total_loss = evid + lambda_c * kd_c
    parts = {"evid": float(evid.detach()), "kd_c": float(kd_c.detach())}
    if teacher_logits is not None:
        kd_g = kd_global(logits, teacher_logits.detach(), tau)
        total_loss = total_loss + lambda_g * kd_g
        parts["kd_g"] = float(kd_g.detach())
    return total_loss, parts
