"""Where output records go: Kafka topics, alert webhooks, Prometheus, progress (one protocol, base.py)."""
