#!/bin/sh
# The tap sidecar of the compose stack: each broker's request log and
# server.log, and polled metadata, into the monitor's input topic.
set -eu
TO="kafka://isr.fetch-events"
SET="--set kafka.bootstrap_servers=kafka-1:9092"
for id in 1 2 3; do
  isr tap request-log "/logs/broker-$id/kafka-request.log" -F --broker "$id" \
      --topic-ids kafka-1:9092 --cluster compose --to "$TO" -q $SET &
  isr tap server-log "/logs/broker-$id/server.log" -F --cluster compose --to "$TO" -q $SET &
done
isr tap metadata --poll kafka-1:9092 --interval-s 5 --cluster compose --to "$TO" -q $SET &
wait
