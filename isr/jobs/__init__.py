"""Entry points that spark-submit runs (through a script: jobs/isr_monitor.py,
or the copy `isr files --out DIR` writes)."""
