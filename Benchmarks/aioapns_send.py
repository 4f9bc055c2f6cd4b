#!/usr/bin/env python3
"""Sends every token of a file through aioapns (PyPI) to an APNs endpoint, for comparison with
`herald send`. aioapns only knows Apple's hosts, so the host and port are overridden.

Prints one JSON line like herald send: {"sent","accepted","failed","seconds","per_second"}.
"""
import argparse
import asyncio
import json
import ssl
import time

from aioapns import APNs, NotificationRequest
from aioapns.connection import APNsDevelopmentClientProtocol


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--ca-file", required=True)
    parser.add_argument("--key-file", required=True)
    parser.add_argument("--key-id", required=True)
    parser.add_argument("--team-id", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--tokens-file", required=True)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4000)
    args = parser.parse_args()

    APNsDevelopmentClientProtocol.APNS_SERVER = args.host
    APNsDevelopmentClientProtocol.APNS_PORT = args.port
    context = ssl.create_default_context(cafile=args.ca_file)
    context.set_alpn_protocols(["h2"])
    with open(args.key_file) as handle:
        key = handle.read()
    with open(args.tokens_file) as handle:
        tokens = [line.strip() for line in handle if line.strip()]

    client = APNs(
        key=key, key_id=args.key_id, team_id=args.team_id, topic=args.topic, use_sandbox=True,
        ssl_context=context, max_connections=args.connections,
    )
    payload = {"aps": {"alert": {"title": "Hello", "body": "World"}}}
    limit = asyncio.Semaphore(args.concurrency)
    failed: dict = {}
    accepted = 0

    async def send(token: str) -> None:
        nonlocal accepted
        async with limit:
            result = await client.send_notification(NotificationRequest(device_token=token, message=payload))
            if result.is_successful:
                accepted += 1
            else:
                failed[result.description] = failed.get(result.description, 0) + 1

    started = time.monotonic()
    await asyncio.gather(*(send(token) for token in tokens))
    seconds = time.monotonic() - started
    print(json.dumps({
        "sent": len(tokens), "accepted": accepted, "failed": failed,
        "seconds": round(seconds, 3), "per_second": round(len(tokens) / seconds, 1),
    }))


if __name__ == "__main__":
    asyncio.run(main())
