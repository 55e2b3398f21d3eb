"""Node identities and the netdp PKI.

Every node, bootstrap server and operator has one X.509 certificate issued by the deployment's CA
and uses it for both ends of mutual TLS. Its identity is the subject CN plus the SAN URI
``netdp://<role>/<node id>``, and the DNS names a caller verifies (``<id>.<role>.netdp.invalid``;
``bootstrap.netdp.invalid`` on every bootstrap certificate): callers check who answers, not where.

* :mod:`netdp_node.security.pki`: a small CA on disk (``init_ca``, ``issue``, ``revoke``) and
  ``load_identity`` to load and validate a node's identity folder.
* :mod:`netdp_node.security.identity`: ``identity_from_pem`` (the authenticated peer of a gRPC
  call) and ``RevocationList`` (a CRL verified against the CA).
"""

from __future__ import annotations

from netdp_node.security.identity import (
    NODE_ID_PATTERN,
    ROLES,
    PeerIdentity,
    RevocationList,
    identity_from_pem,
    identity_uri,
    is_valid_node_id,
)
from netdp_node.security.pki import (
    Identity,
    init_ca,
    issue,
    load_crl,
    load_identity,
    read_index,
    revoke,
)

__all__ = [
    "NODE_ID_PATTERN",
    "ROLES",
    "Identity",
    "PeerIdentity",
    "RevocationList",
    "identity_from_pem",
    "identity_uri",
    "init_ca",
    "is_valid_node_id",
    "issue",
    "load_crl",
    "load_identity",
    "read_index",
    "revoke",
]
