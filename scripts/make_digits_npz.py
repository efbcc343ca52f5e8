#!/usr/bin/env python
"""Regenerate ``raysfl/data/digits.npz``, the small data set shipped inside the package.

Provenance
----------
The data is scikit-learn's copy of the "Optical Recognition of Handwritten Digits" data
set from the UCI Machine Learning Repository (E. Alpaydin, C. Kaynak, 1998; test part,
1797 samples of 8x8 images, 10 classes, pixel values 0..16), obtained with
``sklearn.datasets.load_digits()``. It is distributed with scikit-learn under the
BSD-3-Clause licence (the UCI data is CC BY 4.0).

The file is written once by this script and committed; ``raysfl`` reads it with plain
numpy and never needs scikit-learn or the internet at run time.

Contents of the ``.npz``:
    images  uint8 (1797, 1, 8, 8)  values 0..16 (NCHW, one channel)
    targets int64 (1797,)          class labels 0..9

The train/test split is NOT stored here; ``raysfl.data.datasets`` derives a fixed
stratified 80/20 split from these arrays with its own fixed seed.

Usage:
    python scripts/make_digits_npz.py [--out raysfl/data/digits.npz]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def main() -> None:
    default_out = Path(__file__).resolve().parent.parent / "raysfl" / "data" / "digits.npz"
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=default_out, help=f"output file (default {default_out})")
    args = ap.parse_args()

    from sklearn.datasets import load_digits  # build-time only dependency

    d = load_digits()
    images = np.asarray(d.images)
    if images.shape != (1797, 8, 8) or images.min() < 0 or images.max() > 16:
        raise SystemExit(f"unexpected digits data: shape {images.shape}, range {images.min()}..{images.max()}")
    if not np.array_equal(images, np.round(images)):
        raise SystemExit("unexpected non-integer pixel values in digits data")
    images = images.astype(np.uint8)[:, None, :, :]
    targets = np.asarray(d.target, dtype=np.int64)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, images=images, targets=targets)
    print(f"wrote {args.out}: images {images.shape} {images.dtype}, targets {targets.shape} {targets.dtype}, "
          f"classes {np.bincount(targets).tolist()}")


if __name__ == "__main__":
    main()
