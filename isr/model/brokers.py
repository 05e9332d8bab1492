"""Cluster-wide broker lifecycle, as the controller's metadata shows it.

One registry per monitored cluster. It answers the two questions the leader
asks: is this fetch's broker epoch stale (KAFKA-15221), and may this broker
be in the ISR at all (KIP-841 / KIP-903 eligibility).
"""

from __future__ import annotations

from typing import Optional

# States in which the controller removes a broker from every ISR and a
# leader may not add it back.
INELIGIBLE_STATES = frozenset({"fenced", "controlled_shutdown", "unregistered"})


class Brokers:
    __slots__ = ("states", "newest_epoch")

    def __init__(self, states: Optional[dict[int, tuple[str, int]]] = None) -> None:
        # broker id -> (state of its last broker event, broker_epoch)
        self.states: dict[int, tuple[str, int]] = dict(states or {})
        # No known broker epoch is above it (-1: none known), so no fetch
        # carrying it or a later one is stale (is_stale_fetch): the callers on
        # the per-fetch path test `broker_epoch < newest_epoch` before asking,
        # an attribute where the call was ~2 % of a replay's bytecodes (a
        # realistic cluster's fetches carry their broker's current epoch).
        # Only raised: a bound, not the maximum, once an epoch goes down.
        self.newest_epoch = max((e for _s, e in self.states.values()), default=-1)

    def apply(self, broker: int, state: str, broker_epoch: int) -> bool:
        """Record a broker event; True when the broker is now ISR-ineligible."""
        self.states[broker] = (state, broker_epoch)
        if broker_epoch > self.newest_epoch:
            self.newest_epoch = broker_epoch
        return state in INELIGIBLE_STATES

    def known_epoch(self, broker: int) -> int:
        entry = self.states.get(broker)
        return -1 if entry is None else entry[1]

    def is_stale_fetch(self, broker: int, fetch_broker_epoch: int) -> bool:
        """A fetch carrying an older broker epoch than the cluster knows."""
        if fetch_broker_epoch < 0 or fetch_broker_epoch >= self.newest_epoch:
            return False
        entry = self.states.get(broker)  # known_epoch, inline: this runs for most fetches
        return entry is not None and entry[1] >= 0 and fetch_broker_epoch < entry[1]

    def is_eligible(self, broker: int, fetch_broker_epoch: int) -> bool:
        """Kafka's `isReplicaIsrEligible`. Without any broker events every broker
        is eligible, and unknown epochs on either side never disqualify."""
        entry = self.states.get(broker)
        if entry is None:
            return True
        state, known = entry
        if state in INELIGIBLE_STATES:
            return False
        return fetch_broker_epoch < 0 or known < 0 or fetch_broker_epoch == known

    def to_list(self) -> list:
        return [[b, s, e] for b, (s, e) in sorted(self.states.items())]

    @classmethod
    def from_list(cls, values: list) -> "Brokers":
        return cls({b: (s, e) for b, s, e in values})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Brokers) and self.states == other.states
