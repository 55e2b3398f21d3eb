"""netdp: a peer-to-peer runtime for differentially private decentralized computation.

Layers (DESIGN.md): cli -> daemon -> runtime -> transport (grpc | memory) -> protocols (sans-IO)
-> privacy (pure accountants) and ledger (the node's durable view).
"""

__version__ = "0.1.0"
