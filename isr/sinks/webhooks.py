"""Alert delivery to webhooks (docs/alerts.md, "Delivery").

Each alert status change goes to every configured receiver: a generic JSON
webhook (optionally HMAC-SHA256 signed, a bearer token from the environment,
custom headers), Alertmanager's v2 API, or a chat-style incoming webhook
(Slack's format). Delivery retries with exponential backoff and jitter
(tenacity) inside a time budget per call, so a dead receiver never holds the
stream for longer than `delivery.batch_budget_s`. Whatever is not delivered
in time is kept in an outbox file, counted, and sent first next time, in
order per receiver. A ledger of delivered (receiver, alert id) pairs makes a
restart, or a replayed micro-batch, skip what already went out.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Iterable, Optional

import httpx
from tenacity import (RetryError, Retrying, retry_if_exception_type, stop_after_delay,
                      wait_exponential_jitter)

from isr.config import DeliverySettings, Receiver
from isr.contract.decisions import Alert
from isr.contract.records import OutputRecord
from isr.sinks.base import Run, Sink

SIGNATURE_HEADER = "X-ISR-Signature"
TIMESTAMP_HEADER = "X-ISR-Timestamp"  # unix seconds, signed with the body
# Delivered ids remembered across restarts. A re-run batch repeats only the
# latest ids, so the ledger is cut back to this many when it doubles.
LEDGER_KEEP = 100_000


class DeliveryFailed(Exception):
    """A receiver answered with a status that a retry may fix (5xx, 429)."""


def signature(key: bytes, body: bytes, timestamp: str) -> str:
    """HMAC-SHA256 over `timestamp.body`: a captured request cannot be sent
    again later, once the receiver checks the timestamp's age
    (docs/alerts.md, "Delivery")."""
    return "sha256=" + hmac.new(key, timestamp.encode() + b"." + body,
                                hashlib.sha256).hexdigest()


def verify(key: bytes, body: bytes, timestamp: Optional[str], sig: Optional[str],
           now: Optional[float] = None, max_age_s: float = 300.0) -> bool:
    """What a receiver checks (a reference for docs/alerts.md): the signature
    over `timestamp.body`, and a timestamp no older (nor newer) than
    max_age_s, so a captured request cannot be replayed later."""
    if not timestamp or not sig or not timestamp.isdigit():
        return False
    now = time.time() if now is None else now
    if abs(now - int(timestamp)) > max_age_s:
        return False
    return hmac.compare_digest(sig, signature(key, body, timestamp))


def _secret(env: Optional[str]) -> Optional[str]:
    return os.environ.get(env) if env else None


def alertmanager_item(alert: Alert, generator_url: str, valid_until: Optional[str]) -> dict:
    """One alert for Alertmanager's v2 API. A firing one carries `endsAt` a few
    re-send intervals ahead (`valid_until`), as Prometheus does: it stays
    active while the monitor keeps re-sending it, and resolves on its own only
    if the monitor stops."""
    item = {"labels": alert.labels, "annotations": alert.annotations,
            "startsAt": alert.startsAt, "generatorURL": generator_url}
    ends = alert.endsAt if alert.status == "resolved" else valid_until
    if ends is not None:
        item["endsAt"] = ends
    return item


def payload(receiver: Receiver, alert: Alert, generator_url: str,
            valid_until: Optional[str] = None) -> object:
    """The body for one alert in the receiver's format."""
    if receiver.kind == "alertmanager":
        return [alertmanager_item(alert, generator_url, valid_until)]
    if receiver.kind == "slack":
        icon = ":red_circle:" if alert.status == "firing" else ":large_green_circle:"
        labels = alert.labels
        return {"text": f"{icon} *{alert.status.upper()}* {labels['alertname']} "
                        f"({labels['severity']}) {labels['topic']}-{labels['partition']} "
                        f"[{labels['policy']}]: {alert.annotations['description']} "
                        f"(since {alert.startsAt})"}
    return json.loads(alert.model_dump_json())


class Deliverer(Sink):
    def __init__(self, settings: DeliverySettings, client: Optional[httpx.Client] = None
                 ) -> None:
        self.settings = settings
        self.client = client or httpx.Client(timeout=settings.request_timeout_s)
        self.counts: Counter = Counter()  # (receiver, outcome) -> n
        state = Path(settings.state_dir)
        state.mkdir(parents=True, exist_ok=True)
        self.ledger_path = state / "delivered.txt"
        self.outbox_path = state / "outbox.jsonl"
        ledger = self._read_lines(self.ledger_path)
        if len(ledger) > 2 * LEDGER_KEEP:  # keep the file bounded; old ids never recur
            ledger = ledger[-LEDGER_KEEP:]
            self.ledger_path.write_text("".join(k + "\n" for k in ledger))
        self.delivered = set(ledger)
        lines = (line.partition(" ") for line in self._read_lines(self.outbox_path))
        self.outbox: list[tuple[str, Alert]] = [
            (name, Alert.model_validate_json(body)) for name, _, body in lines]
        # Alertmanager receivers' firing alerts, re-sent until they resolve
        # (keep_alive); kept across restarts.
        self.active_path = state / "active.jsonl"
        lines = (line.partition(" ") for line in self._read_lines(self.active_path))
        self.active: dict[tuple[str, str], Alert] = {}
        for name, _, body in lines:
            a = Alert.model_validate_json(body)
            self.active[(name, a.fingerprint)] = a
        self._lock = threading.Lock()  # deliver() and the re-sending thread
        self._stop = threading.Event()

    @staticmethod
    def _read_lines(path: Path) -> list[str]:
        return path.read_text().splitlines() if path.exists() else []

    # ------------------------------------------------------------ api
    def deliver(self, alerts: Iterable[Alert]) -> None:
        """Send the outbox, then these alerts, to every receiver, within the
        batch budget; keep what could not be sent."""
        with self._lock:
            self._deliver(list(alerts))

    def _deliver(self, alerts: list[Alert]) -> None:
        receivers = [r for r in self.settings.webhooks if r.enabled]
        self._track_active(alerts, receivers)
        queue = list(self.outbox) + [(r.name, a) for a in alerts for r in receivers]
        deadline = time.monotonic() + self.settings.batch_budget_s
        by_name = {r.name: r for r in receivers}
        kept: list[tuple[str, Alert]] = []
        blocked: set[str] = set()  # receivers that failed this call: keep their order
        for name, alert in queue:
            key = f"{name}/{alert.id}"
            receiver = by_name.get(name)
            if key in self.delivered or receiver is None:
                continue
            if name in blocked or time.monotonic() >= deadline:
                kept.append((name, alert))
                continue
            if self._send(receiver, alert, deadline):
                self._record_delivered(key)
                self.counts[(name, "delivered")] += 1
            else:
                blocked.add(name)
                kept.append((name, alert))
        for name, _alert in kept:
            self.counts[(name, "kept")] += 1
        if kept != self.outbox:  # most batches deliver everything: no file write then
            self._save_outbox(kept)

    @property
    def outbox_size(self) -> int:
        return len(self.outbox)

    # ------------------------------------------------------------ Alertmanager
    def _track_active(self, alerts: list[Alert], receivers: list[Receiver]) -> None:
        before = dict(self.active)
        for r in receivers:
            if r.kind != "alertmanager":
                continue
            for a in alerts:
                if a.status == "firing":
                    self.active[(r.name, a.fingerprint)] = a
                else:
                    self.active.pop((r.name, a.fingerprint), None)
        if self.active != before:
            _write_atomic(self.active_path, "".join(
                f"{name} {a.model_dump_json()}\n" for (name, _fp), a in self.active.items()))

    def resend_active(self) -> int:
        """Send every firing alert to its Alertmanager again, with `endsAt` a
        few intervals ahead, so Alertmanager keeps it active (it resolves an
        alert whose `endsAt` passed, or after its resolve_timeout when none is
        given). Returns how many alerts were sent."""
        with self._lock:
            by_name = {r.name: r for r in self.settings.webhooks
                       if r.enabled and r.kind == "alertmanager"}
            per_receiver: dict[str, list[Alert]] = {}
            for (name, _fp), a in self.active.items():
                if name in by_name:
                    per_receiver.setdefault(name, []).append(a)
            sent = 0
            for name, alerts in per_receiver.items():
                body = json.dumps([alertmanager_item(a, self.settings.generator_url,
                                                     self._valid_until()) for a in alerts],
                                  separators=(",", ":")).encode()
                deadline = time.monotonic() + self.settings.request_timeout_s
                if self._send_body(by_name[name], body, deadline):
                    self.counts[(name, "resent")] += len(alerts)
                    sent += len(alerts)
            return sent

    def _valid_until(self) -> str:
        from isr.alerts.evaluator import iso

        ms = int(time.time() * 1000) + 4 * int(self.settings.alertmanager_resend_s * 1000)
        return iso(ms)

    def keep_alive(self) -> Optional[threading.Thread]:
        """Re-send active alerts to Alertmanager receivers every
        delivery.alertmanager_resend_s of wall-clock time, with or without
        micro-batches (None: no Alertmanager receiver)."""
        if not any(r.enabled and r.kind == "alertmanager" for r in self.settings.webhooks):
            return None

        def loop() -> None:
            while not self._stop.wait(self.settings.alertmanager_resend_s):
                try:
                    self.resend_active()
                except Exception as exc:  # noqa: BLE001 - the next round tries again
                    print(f"isr: delivery: re-sending to Alertmanager: {exc}", file=sys.stderr)

        thread = threading.Thread(target=loop, daemon=True, name="isr-alertmanager")
        thread.start()
        return thread

    def close(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------ as a sink
    def open(self, run: Run) -> None:
        self.keep_alive()

    def write_batch(self, batch_id: int, records: list[OutputRecord]) -> None:
        self.deliver(alerts_in(records))  # bounded by delivery.batch_budget_s

    # ------------------------------------------------------------ internals
    def _send(self, receiver: Receiver, alert: Alert, deadline: float) -> bool:
        body = json.dumps(payload(receiver, alert, self.settings.generator_url,
                                  self._valid_until()), separators=(",", ":")).encode()
        return self._send_body(receiver, body, deadline)

    def _send_body(self, receiver: Receiver, body: bytes, deadline: float) -> bool:
        headers = {"Content-Type": "application/json", **receiver.headers}
        token = _secret(receiver.token_env)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        key = _secret(receiver.hmac_key_env)
        if key:
            stamp = str(int(time.time()))
            headers[TIMESTAMP_HEADER] = stamp
            headers[SIGNATURE_HEADER] = signature(key.encode(), body, stamp)
        budget = max(0.0, deadline - time.monotonic())
        retrying = Retrying(
            stop=stop_after_delay(budget),
            wait=wait_exponential_jitter(multiplier=self.settings.backoff_initial_s,
                                         max=self.settings.backoff_max_s),
            retry=retry_if_exception_type((httpx.TransportError, DeliveryFailed)),
            reraise=False)
        try:
            for attempt in retrying:
                with attempt:
                    self._post(receiver, body, headers)
            return True
        except RetryError:
            self.counts[(receiver.name, "failed")] += 1
            return False
        except httpx.HTTPStatusError:  # 4xx other than 429: retrying will not help
            self.counts[(receiver.name, "rejected")] += 1
            return False

    def _post(self, receiver: Receiver, body: bytes, headers: dict) -> None:
        response = self.client.post(receiver.url, content=body, headers=headers)
        if response.status_code == 429 or response.status_code >= 500:
            self.counts[(receiver.name, "retried")] += 1
            raise DeliveryFailed(f"{receiver.name}: HTTP {response.status_code}")
        response.raise_for_status()

    def _record_delivered(self, key: str) -> None:
        self.delivered.add(key)
        with open(self.ledger_path, "a") as f:
            f.write(key + "\n")

    def _save_outbox(self, kept: list[tuple[str, Alert]]) -> None:
        self.outbox = kept
        _write_atomic(self.outbox_path,
                      "".join(f"{name} {a.model_dump_json()}\n" for name, a in kept))


def _write_atomic(path: Path, text: str) -> None:
    """Never a half-written file: write aside, then rename."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def alerts_in(records: list[OutputRecord]) -> list[Alert]:
    return [Alert.model_validate_json(r.value) for r in records if r.kind == "alert"]
