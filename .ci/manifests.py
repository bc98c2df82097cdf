"""Checks on the Helm chart's rendered manifests, for .ci/container.

    python .ci/manifests.py check rendered.yaml Deployment Service HorizontalPodAutoscaler
    python .ci/manifests.py play rendered.yaml play.yaml      # ConfigMap + Deployment, for podman
    python .ci/manifests.py config rendered.yaml routegate.yaml
    python .ci/manifests.py readiness rendered.yaml           # prints "PATH PORT"
    python .ci/manifests.py init-script rendered.yaml merge.py  # the teams init container's

``check`` fails unless every kind named is rendered and the Deployment has what the
chart promises: probes on /readyz and /healthz, a non-root pod, a read-only root
file system with /data writable, resources, and a grace period above the preStop
drain plus routegate's own 10 s of shutdown. Needs PyYAML (the tools venv has it).
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

SHUTDOWN_S = 10   # uvicorn's timeout_graceful_shutdown in gateway/cli.py


def load(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    if len(found) != 1:
        raise SystemExit(f"manifests: expected one {kind}, found {len(found)}")
    return found[0]


def gateway_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The ConfigMap holding routegate.yaml (the dashboard's is another)."""
    return one([d for d in docs if "routegate.yaml" in d.get("data", {})], "ConfigMap")


def gateway_container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "routegate")


def deployment_problems(deployment: dict[str, Any]) -> list[str]:
    pod = deployment["spec"]["template"]["spec"]
    container = gateway_container(deployment)
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    drain = int(pre_stop[-1]) if pre_stop[:1] == ["sleep"] else 0
    checks = {
        "readinessProbe on /readyz": container.get("readinessProbe", {}).get("httpGet", {})
        .get("path") == "/readyz",
        "livenessProbe on /healthz": container.get("livenessProbe", {}).get("httpGet", {})
        .get("path") == "/healthz",
        "runAsNonRoot": pod.get("securityContext", {}).get("runAsNonRoot") is True,
        "readOnlyRootFilesystem": container.get("securityContext", {})
        .get("readOnlyRootFilesystem") is True,
        "a writable /data": "/data" in mounts and not mounts["/data"].get("readOnly"),
        "resources": bool(container.get("resources", {}).get("requests")),
        "a preStop drain": drain > 0,
        "grace above drain + shutdown": pod.get("terminationGracePeriodSeconds", 30)
        > drain + SHUTDOWN_S,
    }
    return [name for name, ok in checks.items() if not ok]


def check(path: str, kinds: list[str]) -> None:
    docs = load(path)
    missing = sorted(set(kinds) - {d["kind"] for d in docs})
    problems = deployment_problems(one(docs, "Deployment"))
    if missing or problems:
        raise SystemExit(f"manifests: {path}: missing kinds {missing}; Deployment lacks {problems}")
    print(f"manifests: {path}: {', '.join(sorted(d['kind'] for d in docs))}; Deployment ok")


def readiness(path: str) -> str:
    container = gateway_container(one(load(path), "Deployment"))
    probe = container["readinessProbe"]["httpGet"]
    ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
    port = probe["port"] if isinstance(probe["port"], int) else ports[probe["port"]]
    return f"{probe['path']} {port}"


def main(argv: list[str]) -> None:
    command, path, *rest = argv
    docs = load(path)
    if command == "check":
        check(path, rest)
    elif command == "play":    # OUT HOST_PORT: podman publishes each containerPort on the
        deployment = one(docs, "Deployment")   # host, 8080 by default: a free one instead
        for port in gateway_container(deployment).get("ports", []):
            port.update(hostPort=int(rest[1]), hostIP="127.0.0.1")
        with open(rest[0], "w") as f:
            yaml.safe_dump_all([gateway_config(docs), deployment], f)
    elif command == "config":
        with open(rest[0], "w") as f:
            f.write(gateway_config(docs)["data"]["routegate.yaml"])
    elif command == "readiness":
        print(readiness(path))
    elif command == "init-script":   # its command is python3 -c SCRIPT BASE TEAMS OUT
        init = one(docs, "Deployment")["spec"]["template"]["spec"]["initContainers"][0]
        with open(rest[0], "w") as f:
            f.write(init["command"][2])
    else:
        raise SystemExit(f"manifests: unknown command {command}")


if __name__ == "__main__":
    main(sys.argv[1:])
