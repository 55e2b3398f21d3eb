"""Datasets for the learning jobs: the California housing data the papers use, and synthetic data.

The housing file is never shipped with netdp. It is found, in this order, in the `--data-dir`
folder, in `$NETDP_DATA_DIR`, and in a `shared/data` folder beside the working directory or beside
the checkout (a development layout); `download_housing` fetches it for users who are online.
Tests that need it skip with a reason when it is absent.

Preprocessing (as the authors' code does for Cyffers & Bellet, AISTATS 2022, Fig. 2, and Cyffers,
Bellet & Upadhyay, ICML 2024, Fig. 2): the target (median house value) is
binarized at its mean (OpenML 823: below the mean → −1), the 8 features are standardized on all
rows, every row is scaled to unit L2 norm, then an intercept column of 1 is appended (dimension 9);
stratified 80/20 train/test split with a fixed seed.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from netdp_node.errors import ConfigError

HOUSING_FILE = "cal_housing.data"
HOUSING_URL = "https://www.dcc.fc.up.pt/~ltorgo/Regression/cal_housing.tgz"
HOUSING_SHA256 = "d3d8a1a722ae78f91134862727d27a70b1415e7d512a89140406248687f4b902"


@dataclass(frozen=True)
class Split:
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    source: str

    def per_user(self, n: int, m: int) -> list[np.ndarray]:
        """Users i = 0..n−1 get training rows [m·i, m·i + m) (as the authors' code), as flat rows of
        features then label, the layout `netdp node --data` files use for walk-sgd."""
        if n * m > len(self.y_train):
            raise ConfigError(
                f"{n} users × {m} points need {n * m} training rows; "
                f"{self.source} has {len(self.y_train)}"
            )
        return [
            np.hstack(
                [self.X_train[m * i : m * i + m], self.y_train[m * i : m * i + m, None]]
            ).reshape(-1)
            for i in range(n)
        ]

    def user_arrays(self, n: int, m: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The same users as `per_user`, as (features, labels) pairs."""
        return [
            (self.X_train[m * i : m * i + m], self.y_train[m * i : m * i + m]) for i in range(n)
        ]


def data_dirs(flag: str | None = None) -> list[Path]:
    out = []
    if flag:
        out.append(Path(flag))
    if os.environ.get("NETDP_DATA_DIR"):
        out.append(Path(os.environ["NETDP_DATA_DIR"]))
    out.append(Path.cwd() / ".." / "shared" / "data")
    out.append(Path(__file__).resolve().parents[2] / "shared" / "data")
    return out


def find_housing(flag: str | None = None) -> Path | None:
    for d in data_dirs(flag):
        if (d / HOUSING_FILE).is_file():
            return (d / HOUSING_FILE).resolve()
    return None


def download_housing(dest_dir: str | Path) -> Path:
    """Fetch the StatLib California housing archive and extract `cal_housing.data` (needs the
    internet; netdp never calls this by itself)."""
    import tarfile  # lazy: start-up cost
    import urllib.request  # lazy: start-up cost

    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(HOUSING_URL, timeout=60) as r:
        blob = r.read()
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(HOUSING_FILE))
        f = tar.extractfile(member)
        assert f is not None
        content = f.read()
    digest = hashlib.sha256(content).hexdigest()
    if digest != HOUSING_SHA256:
        raise ConfigError(
            f"downloaded {HOUSING_FILE} has sha256 {digest}, expected {HOUSING_SHA256}"
        )
    (dest / HOUSING_FILE).write_bytes(content)
    return dest / HOUSING_FILE


def _stratified_split(y: np.ndarray, test_frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        k = int(round(test_frac * len(idx)))
        test.append(idx[:k])
        train.append(idx[k:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


def preprocess(raw: np.ndarray, source: str, seed: int = 42) -> Split:
    X, target = raw[:, :8], raw[:, 8]
    y = np.where(target < target.mean(), -1.0, 1.0)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    X = np.hstack([X, np.ones((len(X), 1))])
    tr, te = _stratified_split(y, 0.2, seed)
    return Split(X[tr], y[tr], X[te], y[te], source)


def load_housing(flag: str | None = None, seed: int = 42) -> Split:
    path = find_housing(flag)
    if path is None:
        raise ConfigError(
            f"{HOUSING_FILE} not found in {', '.join(str(d) for d in data_dirs(flag))}; pass "
            "--data-dir, set NETDP_DATA_DIR, or download it (netdp_node.datasets.download_housing)"
        )
    raw = np.loadtxt(path, delimiter=",")
    if raw.ndim != 2 or raw.shape[1] != 9:
        raise ConfigError(f"{path} should have 9 comma-separated columns, has shape {raw.shape}")
    return preprocess(raw, str(path), seed)


def learning_split(n_users: int, points: int, seed: int = 0, data_dir: str | None = None) -> Split:
    """The data of an SGD job or experiment: the housing split when the file is found and has
    `points` training rows for each of `n_users` users, else synthetic data of the same layout (and
    the Split says which, in `source`)."""
    if find_housing(data_dir) is not None and n_users * points <= 16_512:
        return load_housing(data_dir)
    return synthetic(int(n_users * points / 0.8) + 50, seed)


def synthetic(n_rows: int, seed: int = 0, dim: int = 8, noise: float = 0.1) -> Split:
    """Logistic data with the same layout as the housing split: unit-norm features + intercept."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=dim)
    X = rng.normal(size=(n_rows, dim))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    logits = 4.0 * (X @ w) / np.linalg.norm(w) + rng.normal(0, noise, size=n_rows)
    y = np.where(logits >= 0, 1.0, -1.0)
    X = np.hstack([X, np.ones((n_rows, 1))])
    k = int(0.8 * n_rows)
    return Split(X[:k], y[:k], X[k:], y[k:], f"synthetic(seed={seed})")
