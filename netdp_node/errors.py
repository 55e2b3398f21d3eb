"""The project's own exceptions, with messages a user can act on."""

from __future__ import annotations


class NetdpError(Exception):
    """Base class of every error netdp raises on purpose."""


class ConfigError(NetdpError):
    """A flag, file or configuration value is missing or invalid (exit code 2)."""


class SecurityError(NetdpError):
    """A certificate, key or revocation list is missing, invalid or does not match (exit code 3)."""


class ServerIdentityError(SecurityError):
    """The server at an address is not the identity the caller meant to reach (its certificate,
    though valid, names somebody else)."""


class LedgerError(NetdpError):
    """The on-disk ledger cannot be opened or written."""


class BudgetExceeded(NetdpError):
    """A job would take the node past its privacy budget."""


class UnknownJob(NetdpError):
    """A message names a job this node has never heard of (transports answer NOT_FOUND)."""


class NodeUnavailable(NetdpError):
    """This node is (deliberately) not taking traffic: offline, left, crashing. Transports answer
    UNAVAILABLE, as a machine that is down would; senders retry."""
