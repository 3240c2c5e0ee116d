"""compose's webhook-config one-shot against the Kubernetes API double (k3s's kubectl is not
here): the shipped MutatingWebhookConfiguration, created, then its clientConfig pointed at the
scheduler-extender container by URL, as compose.yaml's `kubectl apply` + `kubectl patch` do.

    python /tests/containers/compose/webhook_config.py KUBECONFIG MANIFEST URL
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import yaml

PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def main() -> None:
    kubeconfig, manifest, url = sys.argv[1:4]
    config = yaml.safe_load(Path(kubeconfig).read_text(encoding="utf-8"))
    server = config["clusters"][0]["cluster"]["server"]
    token = config["users"][0]["user"]["token"]
    configuration = yaml.safe_load(Path(manifest).read_text(encoding="utf-8"))
    client = configuration["webhooks"][0]["clientConfig"]
    client.pop("service", None)
    client["url"] = url
    request = urllib.request.Request(
        server + PATH,
        data=json.dumps(configuration).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        print(f"created {configuration['metadata']['name']}: HTTP {response.status}")


if __name__ == "__main__":
    main()
