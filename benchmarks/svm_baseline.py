"""The classical baseline of the default job: scikit-learn's RBF SVM on the raw 8x8 digit pixels, on the
same fixed stratified split the DigitsDataModule uses (the same 360 validation images). Two figures:
scikit-learn's default ``SVC()`` (C=1), and C chosen by 5-fold cross-validation on the training split
only (choosing it on the validation images would flatter the baseline).

    .venv/bin/python -m benchmarks.svm_baseline
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
from sklearn.svm import SVC

from crate.data.digits import digits_split


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help; no settings
    digits = load_digits()
    labels = digits.target.astype(np.int64)
    train, val = digits_split(labels)  # the DigitsDataModule's split (val_fraction 0.2, seed 0)
    pixels = digits.data / 16.0
    start = time.perf_counter()
    default = SVC().fit(pixels[train], labels[train]).score(pixels[val], labels[val])
    print(f"RBF SVM, scikit-learn defaults (C=1, gamma='scale'): val accuracy {default:.4f}")
    search = GridSearchCV(SVC(), {"C": [0.3, 1, 3, 10, 30, 100]}, cv=5).fit(pixels[train], labels[train])
    accuracy = search.best_estimator_.score(pixels[val], labels[val])
    print(
        f"RBF SVM, C={search.best_params_['C']} chosen by 5-fold CV on the training split: val accuracy "
        f"{accuracy:.4f} ({len(val)} images; both fits and the search in {time.perf_counter() - start:.1f} s)"
    )


if __name__ == "__main__":
    main()
