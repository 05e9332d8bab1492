"""The four ISR rule sets, by name: the one list every other module uses
(docs/rules.md, "Policies")."""

from __future__ import annotations

from typing import Literal

KAFKA, KIP16, LEGACY, KIP501 = "kafka", "kip16", "legacy", "kip501"
# The order in which reports and canonical output list them.
POLICIES: tuple[str, ...] = (KAFKA, KIP16, LEGACY, KIP501)
Policy = Literal[POLICIES]  # type: ignore[valid-type]  # Literal["kafka", "kip16", ...]
POLICY_ORDER = {p: i for i, p in enumerate(POLICIES)}
# kafka and kip501 share what KAFKA-4485 .. KIP-903 added: eligibility, caught-up
# non-ISR HW holders, the strict min-ISR HW freeze, controller removal.
MODERN = frozenset({KAFKA, KIP501})
