"""What the engine tells its listeners (alerts, ZooKeeper-era propagation, the
what-if timelines, partition-state output).

The engine drives each partition's model under each policy; after each step
it tells every listener what happened, in this order for one event: each ISR
change the checks before the event committed (`on_change`), time passed up to
the event (`on_advance`), each ISR change the event itself caused
(`on_change`), then the event (`on_event`, with the model's outcome). A
broker event reaches every partition of its cluster (`on_broker`). `on_time` says that every partition
has reached an instant (the watermark, or the end of a bounded input).
Listeners may append their own output records to `out`. A listener that
keeps state between batches implements `to_state` / `from_state`; the
engine's snapshot stores it under `name`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Optional

from mypy_extensions import mypyc_attr


# Compiled by mypyc (scripts/build-native), it stays a base for the listeners
# that are not compiled (the Spark job's throttle, the what-if timelines).
@mypyc_attr(allow_interpreted_subclasses=True)
class Listener:
    # Set by listeners that keep state across snapshots, per class. A class
    # variable: compiled code (isr/engine/snapshot.py) then reads it as
    # Python does, and so finds an interpreted subclass's own (an instance
    # attribute would be the compiled base's slot: "").
    name: ClassVar[str] = ""

    def on_advance(self, model, until: int, inclusive: bool, out: list) -> None:
        """The model ran its checks up to `until` (and at it, if inclusive).
        A check (advance_all) calls it only for the models it visits: those
        whose next instant, this listener's `next_due` included, it passes
        (deadlines.py). So it must act on time alone only at `next_due`."""

    # on_advance runs before every event. A listener may say when it can act:
    # with `advance_gated`, it keeps its state of each model it heard of on
    # `model.watch` (the one listener state a model holds), with `wake` no
    # later than the first instant at which its on_advance acts on that model
    # before an event, and so no later than its `next_due` of that model
    # (the engine reads `wake` as a bound of next_due: before_next_instant).
    # The engine then calls it before an event at `ts` only if ts > wake (or
    # the model has no watch yet).
    advance_gated = False

    def on_change(self, model, change, out: list) -> None:
        """The model committed an ISR change (`change.ts`; the model is past it)."""

    def on_event(self, model, event, outcome: Optional[tuple[str, str]], out: list) -> None:
        """The model took the event: outcome None (applied), or (ignored|rejected, reason)."""

    def on_fetch(self, model, replica: int, ts: int, fetch_ts: int,
                 outcome: Optional[tuple[str, str]], out: list) -> object:
        """`on_event` for a fetch given as its values (a session's fetch of
        a partition it did not list, applied without building the event:
        isr/engine/sessions.py). A listener that hears events and does not
        override it makes the engine build the event and call `on_event`.
        What it returns is the listener's own (the engine ignores it)."""

    def on_folded_fetch(self, model, replica: int, ts: int, fetch_ts: int, out: list) -> None:
        """`on_fetch` (outcome None) of a session fetch the catch-up applied
        as the last of a follower's pending run, having asked `skips_fetch`
        of the run's first fetch (sessions.py, `_fold_all`): the fetch moved
        only the follower's times, at the leader's LEO, and nothing but such
        fetches of the partition's other followers came in between. A
        listener may take what its `skips_fetch` found as still holding but
        for what depends on `ts` and `fetch_ts`. By default on_fetch."""
        self.on_fetch(model, replica, ts, fetch_ts, None, out)

    def on_broker(self, model, event, out: list) -> None:
        """The model took a broker event of its cluster (its ts moved to the
        event's; any ISR change it caused came through on_change first)."""

    def on_time(self, until: int, inclusive: bool, out: list) -> None:
        """Every partition has reached `until`."""

    # Fetch sessions (isr/engine/sessions.py) skip the fetches of a session
    # that change nothing but a follower's times. A listener says here when
    # that would hide something from it.
    def next_due(self, model) -> Optional[int]:
        """The next instant at which this listener acts on `model` with no new
        input (None: none). Override it with skips_quiet_fetches."""
        return None

    def skips_quiet_fetches(self, model) -> bool:
        """Whether this listener may miss `model`'s fetches that move only a
        follower's times. By default only if it does not hear events at all."""
        kind = type(self)
        return kind.on_event is Listener.on_event and kind.on_advance is Listener.on_advance

    def skips_fetch(self, model, replica: int, ts: int) -> bool:
        """Whether this listener may miss a fetch of `replica` at `ts` that
        moves only the follower's times, the follower being at the leader's
        LEO: it is then applied only as part of a later fetch of the same
        follower (sessions.py, `SessionDriver._folds`). By default as
        skips_quiet_fetches."""
        return self.skips_quiet_fetches(model)

    def on_session_fetch(self, session, ts: int) -> None:
        """A fetch session logged a fetch at `ts` for every partition it
        caches (`session.cached`, keys (topic, partition) of
        `session.cluster`; isr/engine/sessions.py). The partitions it does
        not list are caught up lazily, when something needs them, so a
        listener that skips quiet fetches but must know which partitions
        were fetched learns it here, once per session fetch."""

    def on_unlink(self, model) -> None:
        """`model` lost a fetch session's link (its follower forgot the
        partition, or the session closed): a follower it fed may no longer
        be fetching (isr/stream/throttle.py, `quiet`)."""

    def quiet_serve_ms(self) -> Optional[int]:
        """A fetch taking longer than this to serve is never skipped (None: any may be)."""
        return None

    def to_state(self) -> Any:
        return None

    def from_state(self, state: Any) -> None:
        pass

    # The Spark job's state log (isr/stream/statelog.py) saves, each batch,
    # what changed since the last save. A listener whose state grows with the
    # partitions says what changed; by default its whole state is the change.
    def state_delta(self) -> Any:
        """What changed since the last call (applied in order by apply_state_delta)."""
        return self.to_state()

    def apply_state_delta(self, delta: Any) -> None:
        self.from_state(delta)

    def clear_state_delta(self) -> None:
        """Forget what changed (a whole state is saved instead): `state_delta`
        without encoding what it would drop."""
        self.state_delta()


def hooks(listeners: list[Listener], name: str) -> list:
    """The bound methods of the listeners that override `name` (the engine
    calls only these, so an unused hook costs nothing per event)."""
    base = getattr(Listener, name)
    return [getattr(l, name) for l in listeners if getattr(type(l), name) is not base]
