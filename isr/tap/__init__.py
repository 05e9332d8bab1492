"""`isr tap`: the monitor's input events from a real cluster's own logs.

Three sources (docs/tap.md): a broker's request log (follower fetches, the
leader's LEO inferred), the KRaft metadata log or polled Metadata
(leadership, committed ISR, broker lifecycle), and server.log (the ISR the
cluster committed). Each tap is a pure function of the lines it reads, so a
finished log gives the same events every time; the adapters around it follow
files and write to Kafka or JSON lines.
"""
