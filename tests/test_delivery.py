"""Alert delivery over real HTTP: HMAC signatures, a receiver that is down
and comes back, no duplicate after a restart, and a real Alertmanager
(Debian's prometheus-alertmanager) forwarding each transition once."""

from __future__ import annotations

import time

import pytest
from receivers import Alertmanager, Receiver, free_port

from isr.sinks.webhooks import SIGNATURE_HEADER, Deliverer, payload
from isr.alerts.evaluator import fingerprint, iso
from isr.config import DeliverySettings, Receiver as ReceiverSettings
from isr.contract.decisions import Alert


def alert(status: str, started: int, ts: int, partition: int = 0,
          name: str = "UnderMinIsr") -> Alert:
    labels = {"alertname": name, "severity": "critical", "cluster": "default",
              "topic": "orders", "partition": str(partition), "policy": "kafka"}
    fp = fingerprint(labels)
    return Alert(id=f"{fp}/{started}/{status}/{ts}", ts=ts, labels=labels,
                 annotations={"summary": "ISR below min.insync.replicas: orders-0",
                              "description": "ISR [1] has 1 member(s)"},
                 status=status, startsAt=iso(started),
                 endsAt=iso(ts) if status == "resolved" else None, fingerprint=fp)


def settings(tmp_path, *webhooks, budget: float = 2.0) -> DeliverySettings:
    return DeliverySettings(webhooks=list(webhooks), batch_budget_s=budget,
                            state_dir=str(tmp_path / "delivery"), backoff_initial_s=0.05,
                            backoff_max_s=0.2, request_timeout_s=1.0)


T = 1_800_000_000_000
A1, A2 = alert("firing", T, T), alert("resolved", T, T + 5000)
A3 = alert("firing", T + 9000, T + 9000, partition=1)


def test_hmac_signature_is_verified_and_a_wrong_key_is_rejected(tmp_path, monkeypatch):
    monkeypatch.setenv("ISR_TEST_HMAC", "s3cret")
    monkeypatch.setenv("ISR_TEST_TOKEN", "tok")
    good = Receiver(hmac_key=b"s3cret").start()
    bad = Receiver(hmac_key=b"another key").start()
    try:
        d = Deliverer(settings(tmp_path, *[
            ReceiverSettings(name=n, url=r.url, hmac_key_env="ISR_TEST_HMAC",
                             token_env="ISR_TEST_TOKEN", headers={"X-Team": "kafka"})
            for n, r in (("good", good), ("bad", bad))]))
        d.deliver([A1, A2])
        assert [b["id"] for b in good.bodies] == [A1.id, A2.id] and good.rejected == 0
        h = good.headers[0]
        assert h[SIGNATURE_HEADER].startswith("sha256=") and h["Authorization"] == "Bearer tok"
        assert h["X-Team"] == "kafka"
        # The wrong key: 401, not retried, kept in the outbox in order, counted.
        assert bad.bodies == [] and bad.rejected == 1
        assert d.counts[("bad", "rejected")] == 1
        assert [(n, a.id) for n, a in d.outbox] == [("bad", A1.id), ("bad", A2.id)]
    finally:
        good.stop()
        bad.stop()


def test_receiver_down_then_back_gets_everything_once_in_order(tmp_path):
    port = free_port()
    hook = ReceiverSettings(name="ops", url=f"http://127.0.0.1:{port}/hook")
    d = Deliverer(settings(tmp_path, hook, budget=1.0))
    started = time.monotonic()
    d.deliver([A1, A2])  # nobody listens: retried within the budget, then kept
    elapsed = time.monotonic() - started
    assert elapsed < 1.5, elapsed  # the budget bounds the call
    assert d.outbox_size == 2 and d.counts[("ops", "failed")] == 1
    receiver = Receiver(port=port).start()
    try:
        Deliverer(settings(tmp_path, hook)).deliver([A3])  # a restart, then the next batch
        assert [b["id"] for b in receiver.bodies] == [A1.id, A2.id, A3.id]
        again = Deliverer(settings(tmp_path, hook))
        again.deliver([A1, A2, A3])  # a replayed batch after another restart
        assert len(receiver.bodies) == 3 and again.outbox_size == 0
    finally:
        receiver.stop()


def test_alertmanager_and_slack_formats():
    am = ReceiverSettings(name="am", kind="alertmanager", url="http://am:9093/api/v2/alerts")
    body = payload(am, A2, "http://monitor:9464/")
    assert body == [{"labels": A2.labels, "annotations": A2.annotations,
                     "startsAt": "2027-01-15T08:00:00.000Z", "generatorURL": "http://monitor:9464/",
                     "endsAt": "2027-01-15T08:00:05.000Z"}]
    assert "endsAt" not in payload(am, A1, "")[0]
    slack = payload(ReceiverSettings(name="s", kind="slack", url="http://hooks/x"), A1, "")
    assert slack["text"].startswith(":red_circle: *FIRING* UnderMinIsr (critical) orders-0")


def _wait(predicate, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_real_alertmanager_forwards_each_transition_exactly_once(tmp_path):
    receiver = Receiver().start()
    try:
        with Alertmanager(receiver.url) as am:
            hook = ReceiverSettings(name="am", kind="alertmanager",
                                    url=f"{am.url}/api/v2/alerts")
            now = int(time.time() * 1000)
            firing, resolved = alert("firing", now, now), alert("resolved", now, now + 1000)
            Deliverer(settings(tmp_path, hook)).deliver([firing])

            def statuses():
                return [(a["status"], a["labels"]["alertname"]) for body in receiver.bodies
                        for a in body["alerts"]]

            assert _wait(lambda: ("firing", "UnderMinIsr") in statuses()), receiver.bodies
            time.sleep(1.2)  # endsAt must be in the past for Alertmanager to resolve it
            Deliverer(settings(tmp_path, hook)).deliver([firing, resolved])  # after a restart
            assert _wait(lambda: ("resolved", "UnderMinIsr") in statuses()), receiver.bodies
            time.sleep(3)  # several group intervals: nothing more may arrive
            assert statuses() == [("firing", "UnderMinIsr"), ("resolved", "UnderMinIsr")]
            got = receiver.bodies[0]["alerts"][0]
            assert got["labels"] == firing.labels and got["startsAt"].startswith(
                firing.startsAt[:19])
    finally:
        receiver.stop()


@pytest.mark.parametrize("kind", ["json", "slack"])
def test_server_errors_are_retried_until_the_budget_then_kept(tmp_path, kind):
    """A receiver that answers 503: retried with backoff, then kept (not lost)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading

    calls = []

    class Busy(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            calls.append(time.monotonic())
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        d = Deliverer(settings(tmp_path, ReceiverSettings(name="busy", kind=kind, url=url),
                               budget=1.0))
        d.deliver([A1])
        assert len(calls) >= 3  # retried
        gaps = [b - a for a, b in zip(calls, calls[1:])]
        assert max(gaps) > min(gaps)  # backing off, not hammering
        assert d.outbox_size == 1 and d.counts[("busy", "retried")] == len(calls)
    finally:
        server.shutdown()


def test_a_signed_request_replayed_later_is_refused():
    from isr.sinks.webhooks import signature, verify

    body, key, stamp = b'{"x":1}', b"k", "1800000000"
    sig = signature(key, body, stamp)
    assert verify(key, body, stamp, sig, now=1800000100)
    assert not verify(key, body, stamp, sig, now=1800000301)     # five minutes later
    assert not verify(key, b'{"x":2}', stamp, sig, now=1800000100)  # another body
    assert not verify(key, body, "1800000001", sig, now=1800000100)  # another time


def test_alertmanager_keeps_an_alert_active_while_it_fires(tmp_path):
    """Alertmanager resolves an alert whose endsAt passed (or after its
    resolve_timeout, 2 s here): the deliverer's re-sends keep a firing alert
    active there for longer than that, until the monitor resolves it."""
    import httpx

    receiver = Receiver().start()
    try:
        with Alertmanager(receiver.url, resolve_timeout="2s") as am:
            hook = ReceiverSettings(name="am", kind="alertmanager",
                                    url=f"{am.url}/api/v2/alerts")
            d = Deliverer(settings(tmp_path, hook).model_copy(
                update={"alertmanager_resend_s": 0.5}))
            now = int(time.time() * 1000)
            d.deliver([alert("firing", now, now)])
            d.keep_alive()

            def active():
                got = httpx.get(f"{am.url}/api/v2/alerts", params={"active": "true"},
                                timeout=5).json()
                return [a["labels"]["alertname"] for a in got
                        if a["status"]["state"] == "active"]

            time.sleep(6)  # three resolve timeouts
            assert active() == ["UnderMinIsr"]
            d.deliver([alert("resolved", now, int(time.time() * 1000))])
            assert _wait(lambda: active() == [])
            d.close()
            assert not (tmp_path / "delivery/active.jsonl").read_text()
    finally:
        receiver.stop()
