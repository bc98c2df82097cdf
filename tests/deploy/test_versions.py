"""One version for the package, the image and the chart.

pyproject's ``version`` is the package's; the Dockerfile's ``ARG VERSION`` becomes
the image's ``org.opencontainers.image.version`` label; the chart's ``appVersion``
names the image tag it deploys by default; CHANGELOG.md's top entry says what it
holds. A release bumps all four (.ci/container also checks the built image).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def versions() -> dict[str, str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    dockerfile = re.search(r"^ARG VERSION=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    chart = yaml.safe_load((ROOT / "deploy/helm/routegate/Chart.yaml").read_text())["appVersion"]
    changelog = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert dockerfile and changelog, "Dockerfile's ARG VERSION or CHANGELOG's first entry is missing"
    return {"pyproject.toml": pyproject, "Dockerfile": dockerfile.group(1),
            "Chart.yaml appVersion": str(chart), "CHANGELOG.md": changelog.group(1)}


def test_one_version_everywhere() -> None:
    found = versions()
    assert len(set(found.values())) == 1, found


def test_chart_dashboard_is_the_docs_one() -> None:
    """The chart's dashboard is a link to docs/grafana/routegate.json, not a copy to drift."""
    linked = ROOT / "deploy/helm/routegate/dashboards/routegate.json"
    assert linked.is_symlink()
    assert linked.resolve() == (ROOT / "docs/grafana/routegate.json").resolve()
