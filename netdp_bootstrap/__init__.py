"""netdp_bootstrap: the bootstrap service (node registry, job submission, topology generation)."""
