"""Privacy accounting: pure formulas by concept, and the accountants that read a node's ledger.

Formulas (pure functions, no I/O, no global state); import from the module:

* `composition`: Gaussian calibration, basic/advanced composition, RDP curves and conversion, and
  the cross-job composition rule (`compose_losses`).
* `discrete_gaussian`: exact discrete Gaussian noise on a grid and the sensitivity it is charged.
* `amplification`: count bounds, amplification by subsampling and by shuffling.
* `ring`: the directed ring, summation and histograms (Cyffers & Bellet, AISTATS 2022, Thm 1–2).
* `token_walk`: a token walking on the complete graph, sums, histograms and SGD (same paper,
  Theorems 3, 4, 6). `walk_audit`: the walk-conditional audit of a realised walk (global
  knowledge; never a node's own accountant).
* `rw_sgd`: random-walk DP-SGD on any graph (Cyffers, Bellet & Upadhyay, ICML 2024).
* `gossip`, `gossip_paper_bound`, `gossip_joint_view`: Muffliato gossip averaging (Cyffers, Even,
  Bellet & Massoulié, NeurIPS 2022): matrices and schedules, the paper's eq. (6) bound, and the
  exact joint-view loss; `exact_linalg`: the modular / rational linear algebra the latter uses.
* `threat`: the threat model each reported ε assumes. `checks`: shared argument checks.

The corrections netdp applies to the papers are listed in docs/errata.md.
"""
