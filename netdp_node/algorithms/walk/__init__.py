"""Token walks (walk-sum, walk-histogram, walk-sgd: Cyffers & Bellet, AISTATS 2022) and random-walk
SGD (rw-sgd: Cyffers, Bellet & Upadhyay, ICML 2024)."""
