"""`python -m bench <scenario> [--seconds S] [--messages N]`, or `python -m bench all`."""

from __future__ import annotations

import argparse
import sys
import time

from bench import consume, grpc_clients, ingest, latency, real_client, scale, soak, spark_sink, spark_source, vs_redis
from bench.environment import describe
from rocketspark.serving import run_event_loop

SCENARIOS = {
    "ingest": (ingest.main, "broker ingest: single sends, batches of 16, Arrow batches; both flush modes"),
    "consume": (consume.main, "lite-pull consumer reading stored messages: standard records vs Arrow"),
    "latency": (latency.main, "ack and send-to-receipt latency from 1,000 to 10,000 msg/s, overlapping and one by one"),
    "spark-source": (spark_source.main, "Spark AvailableNow read into the noop sink vs an in-memory ceiling"),
    "spark-sink": (spark_sink.main, "df.write of 128-byte bodies vs a discarding Python writer and Arrow ingest"),
    "vs-redis": (vs_redis.main, "thin clients, one request in flight: the bundled broker against Redis Streams"),
    "real-client": (real_client.main, "the real client rocketmq==0.4.4: send_sync by 1 and 8 producers, PullConsumer"),
    "grpc": (grpc_clients.main, "the official 5.x Python client over gRPC (sends, SimpleConsumer) vs the 4.x path"),
    "scale": (scale.main, "broker memory, key lookups, restarts and consume rates at a tenth of N and at N messages"),
    "soak": (soak.main, "every kind of traffic, retention, topic churn and a restart for --seconds (1800 on record)"),
}
DEFAULT_MESSAGES = {
    "ingest": 10_000_000,
    "consume": 2_000_000,
    "latency": 1_000_000,
    "spark-source": 4_000_000,
    "spark-sink": 2_000_000,
    "vs-redis": 200_000,
    "real-client": 200_000,
    "grpc": 200_000,
    "scale": 10_000_000,
    "soak": 0,  # runs for --seconds
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("scenario", choices=[*SCENARIOS, "all"])
    parser.add_argument("--seconds", type=float, default=10.0, help="longest run of one measurement (default 10)")
    parser.add_argument("--messages", type=int, help="most messages of one measurement (default: per scenario)")
    args = parser.parse_args(argv)
    chosen = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    print(f"machine: {describe()}")
    for name in chosen:
        function, what = SCENARIOS[name]
        print(f"\n== {name}: {what}", flush=True)
        started = time.perf_counter()
        run_event_loop(function(args.seconds, args.messages or DEFAULT_MESSAGES[name]))
        print(f"  ({name} took {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
