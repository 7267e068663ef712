#!/usr/bin/env python3
"""Verifies one webhook with the Standard Webhooks reference library, unchanged.

Usage: verify-webhook.py SECRET HEADERS_JSON < BODY
SECRET is whsec_<base64>; HEADERS_JSON a JSON object of the request's headers. Prints the
verified payload's `id` and `type` and exits 0, or prints the library's error and exits 1.
"""
import json
import sys

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

secret, headers = sys.argv[1], json.loads(sys.argv[2])
body = sys.stdin.buffer.read()
try:
    payload = Webhook(secret).verify(body, headers)
except WebhookVerificationError as e:
    print(f"refused: {e}")
    sys.exit(1)
print(payload["id"], payload["type"])
