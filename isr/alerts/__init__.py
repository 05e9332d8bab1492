"""Alerts (docs/alerts.md): rule conditions, per-partition watches, the event-time
lifecycle, and their delivery."""
