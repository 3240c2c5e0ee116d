"""The caBundle patch the webhook writes into its own registration."""

from __future__ import annotations

import base64

from hostaffinity.admission_webhook.registration import ca_bundle_patch


def test_ca_bundle_patch_guards_each_webhook_by_name_and_skips_those_already_set() -> None:
    ca = b"-----BEGIN CERTIFICATE-----\n...\n"
    bundle = base64.b64encode(ca).decode()
    configuration = {
        "webhooks": [
            {"name": "a.hostaffinity.io", "clientConfig": {"caBundle": bundle}},
            {"name": "b.hostaffinity.io", "clientConfig": {"service": {"name": "x"}}},
        ]
    }
    assert ca_bundle_patch(configuration, ca) == [
        {"op": "test", "path": "/webhooks/1/name", "value": "b.hostaffinity.io"},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": bundle},
    ]
