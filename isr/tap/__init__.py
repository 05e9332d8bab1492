"""`isr tap`: the monitor's input events from a real cluster's own logs.

Four sources (docs/tap.md): a broker's request log (follower fetches, the
leader's LEO inferred), the KRaft metadata log or polled Metadata
(leadership, committed ISR, broker lifecycle), server.log (the ISR the
cluster committed) and state-change.log (leaders and the ISRs they applied),
each read in every Kafka version's wording. Each tap is a pure function of the lines it reads, so a
finished log gives the same events every time; the adapters around it follow
files and write to Kafka or JSON lines.
"""
