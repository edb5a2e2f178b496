"""The tools of tests/deploy, which tests/deploy/install.sh puts there (CI runs it from
.ci/run; a developer's first use here runs it too):

- Helm's own template engine, to render deploy/helm/crank offline: Helm's Go SDK as a shared
  library (the helm-python-sdk package, pinned in tests/deploy/renderer.lock), in
  tests/deploy/.renderer. No cluster is contacted and no helm binary is needed.
- Debian's nginx, unpacked into tests/deploy/.nginx, to run deploy/nginx.conf.
"""

from __future__ import annotations

import functools
import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPOSITORY_DIR, TESTS_DIR

CHART_DIR = REPOSITORY_DIR / "deploy" / "helm" / "crank"
_DEPLOY_TESTS = TESTS_DIR / "deploy"
_RENDERER = _DEPLOY_TESTS / ".renderer"
NGINX = _DEPLOY_TESTS / ".nginx" / "usr" / "sbin" / "nginx"


@functools.cache
def install_deploy_tools() -> None:
    done = subprocess.run(
        ["bash", str(_DEPLOY_TESTS / "install.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"tests/deploy/install.sh failed:\n{done.stdout}{done.stderr}"


def require_nginx() -> Path:
    """Debian's nginx binary; skips the caller where it could not be had."""
    install_deploy_tools()
    if not NGINX.exists():
        pytest.skip("nginx could not be unpacked from Debian's package (tests/deploy/install.sh)")
    return NGINX


@functools.cache
def _helm() -> Any:
    """The helm_python module."""
    install_deploy_tools()
    if str(_RENDERER) not in sys.path:
        sys.path.append(str(_RENDERER))
    return importlib.import_module("helm_python")


def render_chart(values: dict[str, Any], *, release: str = "crank") -> dict[str, str]:
    """``helm template`` of the chart with these values over values.yaml: path → text."""
    helm = _helm()
    with helm.Chart.load(str(CHART_DIR)) as chart:
        rendered: dict[str, str] = chart.render(
            values, name=release, namespace="crank", is_install=True
        )
    return rendered


def rendered_objects(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object of a render (NOTES.txt is text for people, not an object)."""
    objects: list[dict[str, Any]] = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def lint_chart(values: dict[str, Any], *, kube_version: str) -> dict[str, Any]:
    """``helm lint --strict`` of the chart with these values: its findings as data."""
    findings: dict[str, Any] = _helm().lint(
        str(CHART_DIR), values, strict=True, kube_version=kube_version
    )
    return findings
