#!/usr/bin/env python3
"""Sends every token of a file through the Firebase Admin Python SDK (PyPI `firebase-admin`,
`messaging.send_each_async`: HTTP/2 via httpx, at most 500 messages a call) to an FCM endpoint,
for comparison with `herald send --fcm`. The SDK only knows Google's hosts, so the FCM URL and
the trusted CA are overridden; the OAuth2 access token is fetched once from the token endpoint
(over HTTP/2, as the simulator only speaks HTTP/2) with the service account's own RS256
assertion, which is what the SDK would do, and handed to the SDK.

Prints one JSON line like herald send: {"sent","accepted","failed","seconds","per_second"}.
"""
import argparse
import asyncio
import datetime
import json
import os
import sys
import time

import certifi
import httpx


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", default="https://127.0.0.1:8443")
    parser.add_argument("--ca-file", required=True)
    parser.add_argument("--service-account", required=True)
    parser.add_argument("--tokens-file", required=True)
    parser.add_argument("--parallel-batches", type=int, default=4, help="send_each_async calls in flight (500 messages each)")
    args = parser.parse_args()

    # Trust the simulator's CA: httpx reads SSL_CERT_FILE (trust_env) or else certifi.
    os.environ["SSL_CERT_FILE"] = args.ca_file
    certifi.where = lambda: args.ca_file
    import firebase_admin
    from firebase_admin import credentials, messaging
    from google.auth import crypt, jwt
    from google.oauth2 import credentials as oauth_credentials

    with open(args.service_account) as handle:
        info = json.load(handle)
    signer = crypt.RSASigner.from_service_account_info(info)
    now = int(time.time())
    assertion = jwt.encode(signer, {
        "iss": info["client_email"], "scope": "https://www.googleapis.com/auth/firebase.messaging",
        "aud": info["token_uri"], "iat": now, "exp": now + 3600}).decode()
    async with httpx.AsyncClient(http2=True, verify=args.ca_file) as client:
        answer = await client.post(info["token_uri"], data={
            "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion})
        answer.raise_for_status()
        token = answer.json()

    class StaticCredential(credentials.Base):
        def get_credential(self):
            return oauth_credentials.Credentials(
                token["access_token"],
                expiry=datetime.datetime.utcnow() + datetime.timedelta(seconds=token["expires_in"]))

    messaging._MessagingService.FCM_URL = args.endpoint + "/v1/projects/{0}/messages:send"
    app = firebase_admin.initialize_app(StaticCredential(), {"projectId": info["project_id"]})

    with open(args.tokens_file) as handle:
        tokens = [line.strip() for line in handle if line.strip()]
    batches = [tokens[i:i + 500] for i in range(0, len(tokens), 500)]
    accepted = 0
    failed: dict[str, int] = {}
    started = time.monotonic()
    for first in range(0, len(batches), args.parallel_batches):
        group = batches[first:first + args.parallel_batches]
        answers = await asyncio.gather(*[
            messaging.send_each_async(
                [messaging.Message(token=t, notification=messaging.Notification(title="Hello", body="World")) for t in batch],
                app=app)
            for batch in group])
        for batch in answers:
            accepted += batch.success_count
            for response in batch.responses:
                if not response.success:
                    name = type(response.exception).__name__
                    if not failed:  # say the first failure's cause once
                        print(f"first failure: {response.exception!r}", file=sys.stderr)
                    failed[name] = failed.get(name, 0) + 1
    seconds = time.monotonic() - started
    print(json.dumps({"sent": len(tokens), "accepted": accepted, "failed": failed,
                      "seconds": round(seconds, 3), "per_second": round(len(tokens) / seconds, 1)}))


asyncio.run(main())
