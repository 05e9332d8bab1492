#!/bin/sh
# The tap sidecar of the compose stack: the same taps as the tests and
# `isr demo` (isr/tap/live.py): per broker `tap request-log -F` (topic ids
# from the cluster), `tap state-change -F` and `tap server-log -F` on its
# logs, and `tap metadata --poll`, into the monitor's input topic. SIGTERM
# (docker stop) stops them all.
set -eu
exec isr tap cluster --log-path '/logs/broker-{broker}/{file}' --brokers 1,2,3 \
    --bootstrap kafka-1:9092 --interval-s 5 --cluster compose \
    --to kafka://isr.fetch-events --set kafka.bootstrap_servers=kafka-1:9092
