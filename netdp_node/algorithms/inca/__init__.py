"""IncA, incremental correlated noise for decentralized mean estimation (2025)."""
