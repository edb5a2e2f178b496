"""deploy/helm/crank rendered in every variant by Helm's own engine (tests/support/helm.py),
each object validated against the Kubernetes schemas (kubernetes-validate, offline), and
what the schemas cannot say checked here: hardening, secrets, probes, the Ingress and the
path prefix, the migration hook, PgBouncer and LISTEN, autoscaling, scraping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate  # type: ignore[import-untyped]
import kubernetes_validate.utils  # type: ignore[import-untyped]
import pytest

from tests.support.deploy import lint_chart, render_chart, rendered_objects
from tests.support.gateway import run_control_plane, run_gateway

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "pgbouncer-session": {"pgbouncer": {"enabled": True}},
    "pgbouncer-transaction": {"pgbouncer": {"enabled": True, "poolMode": "transaction"}},
    "no-ingress-fixed-replicas": {
        "ingress": {"enabled": False},
        "controlPlane": {"podDisruptionBudget": {"enabled": False}},
        "gateway": {
            "replicas": 3,
            "autoscaling": {"enabled": False},
            "podDisruptionBudget": {"enabled": False},
        },
        "metrics": {"podAnnotations": False},
    },
    "service-monitor-tls": {
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        "ingress": {"className": "nginx", "tlsSecretName": "crank-tls"},
        "publicUrl": "https://crank.example.com",
        "allowedOrigins": "https://crank.example.com",
        "trustedProxies": "10.0.0.0/8",
        "extraEnv": [{"name": "CRANK_APPROVAL_TTL_S", "value": "3600"}],
        "imagePullSecrets": [{"name": "registry"}],
    },
}
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) that kubernetes-validate
# ships schemas for, and the newest it ships.
KUBE_VERSIONS = ("1.31.0", kubernetes_validate.utils.latest_version())
# Kinds from CRDs, which no Kubernetes schema covers: checked by test_scraping below.
CUSTOM_KINDS = {"ServiceMonitor"}
CRANK_COMPONENTS = {"control-plane", "gateway", "migrate"}
# Measured RSS (docs/deploy.md, "Resources"): granian's supervisor plus one worker; the
# gateway's worker with 10,000 published operations (docs/performance.md, "Catalog at scale").
MIB = 1024 * 1024
CONTROL_PLANE_IDLE_RSS = 137 * MIB
GATEWAY_LARGE_CATALOG_RSS = (33 + 270) * MIB


def objects_of(variant: str) -> list[dict[str, Any]]:
    return rendered_objects(render_chart(VARIANTS[variant]))


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def component(obj: dict[str, Any]) -> str:
    labels: dict[str, str] = obj["metadata"]["labels"]
    return labels["app.kubernetes.io/component"]


def crank_containers(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The Crank container of each workload, by component."""
    found = {}
    for obj in objects:
        if obj["kind"] in {"Deployment", "Job"} and component(obj) in CRANK_COMPONENTS:
            (container,) = pod_spec(obj)["containers"]
            found[component(obj)] = container
    return found


def plain_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def secret_refs(container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for e in container["env"]
        if "valueFrom" in e
    }


def quantity(text: str | int) -> float:
    """A Kubernetes quantity: 384Mi → bytes, 250m → 0.25."""
    text = str(text)
    units = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "m": 0.001}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("variant", VARIANTS)
def test_helm_lint_finds_no_warning(variant: str) -> None:
    for kube_version in KUBE_VERSIONS:
        findings = lint_chart(VARIANTS[variant], kube_version=kube_version)
        assert findings["errors"] == []
        # Helm's severities: 1 info (e.g. "icon is recommended"), 2 warning, 3 error.
        assert [m for m in findings["messages"] if m["severity"] > 1] == []


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_object_is_valid_for_kubernetes(variant: str) -> None:
    objects = objects_of(variant)
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "Service", "Job"} <= kinds
    for obj in objects:
        if obj["kind"] in CUSTOM_KINDS:
            continue
        for kube_version in KUBE_VERSIONS:
            # strict: an unknown field (a typo) is an error, not silently dropped.
            kubernetes_validate.validate(obj, kube_version, strict=True)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_container_is_non_root_read_only_and_sized(variant: str) -> None:
    for obj in objects_of(variant):
        if obj["kind"] not in {"Deployment", "Job"}:
            continue
        spec = pod_spec(obj)
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] > 0
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            resources = container["resources"]
            assert set(resources["requests"]) == {"cpu", "memory"}
            assert quantity(resources["limits"]["memory"]) >= quantity(
                resources["requests"]["memory"]
            )


def test_memory_fits_the_measured_figures() -> None:
    containers = crank_containers(objects_of("default"))
    gateway, control_plane = containers["gateway"], containers["control-plane"]
    assert plain_env(gateway)["CRANK_GATEWAY_WORKERS"] == "1"  # the figures are one worker's
    assert quantity(gateway["resources"]["requests"]["memory"]) >= GATEWAY_LARGE_CATALOG_RSS
    assert quantity(control_plane["resources"]["requests"]["memory"]) >= CONTROL_PLANE_IDLE_RSS
    # A catalog rebuild and a 32 MiB apply need room above the steady state.
    assert quantity(gateway["resources"]["limits"]["memory"]) >= 2 * GATEWAY_LARGE_CATALOG_RSS
    assert quantity(control_plane["resources"]["limits"]["memory"]) >= 4 * CONTROL_PLANE_IDLE_RSS


def test_the_gateway_gets_the_documented_stop_time() -> None:
    # docs/deploy.md, "Grace period": the longest call of the defaults (10 s x 3 tries)
    # + the approval hand-back grace (10 s) + about 15 s, after the preStop pause.
    (gateway,) = (
        d
        for d in by_kind(objects_of("default"), "Deployment").values()
        if component(d) == "gateway"
    )
    spec = pod_spec(gateway)
    (container,) = spec["containers"]
    pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pause >= 5
    assert spec["terminationGracePeriodSeconds"] >= 30 + 10 + 15 + pause


@pytest.mark.parametrize("variant", VARIANTS)
def test_secrets_come_only_from_kubernetes_secrets(variant: str) -> None:
    objects = objects_of(variant)
    assert by_kind(objects, "Secret") == {}  # the chart never holds a secret value
    values = VARIANTS[variant]
    pooled = values.get("pgbouncer", {}).get("enabled", False)
    for name, container in crank_containers(objects).items():
        assert "envFrom" not in container
        refs = secret_refs(container)
        assert set(refs) == {"CRANK_SECRET_KEY", "CRANK_DATABASE_URL"}
        assert refs["CRANK_SECRET_KEY"] == ("crank", "CRANK_SECRET_KEY")
        # The migration holds a session advisory lock: never through PgBouncer.
        expected_url_key = (
            "CRANK_POOLED_DATABASE_URL" if pooled and name != "migrate" else "CRANK_DATABASE_URL"
        )
        assert refs["CRANK_DATABASE_URL"] == ("crank", expected_url_key)
        for env_name in plain_env(container):
            assert "SECRET" not in env_name
            assert "PASSWORD" not in env_name
            assert env_name != "CRANK_DATABASE_URL"
    for config in by_kind(objects, "ConfigMap").values():
        assert "password" not in str(config["data"]).lower()


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_migration_is_a_hook_before_install_and_upgrade(variant: str) -> None:
    objects = objects_of(variant)
    (job,) = by_kind(objects, "Job").values()
    annotations = job["metadata"]["annotations"]
    assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    (container,) = pod_spec(job)["containers"]
    assert container["args"] == ["migrate"]
    assert pod_spec(job)["restartPolicy"] == "Never"
    # Nothing else is a hook: the servers are created only after the migration succeeded.
    hooks = [o for o in objects if "helm.sh/hook" in o["metadata"].get("annotations", {})]
    assert hooks == [job]


def test_the_ingress_publishes_what_the_processes_serve_under_the_path_prefix() -> None:
    objects = objects_of("default")
    (ingress,) = by_kind(objects, "Ingress").values()
    (rule,) = ingress["spec"]["rules"]
    routes = {p["path"]: p["backend"]["service"]["name"] for p in rule["http"]["paths"]}
    assert routes == {
        "/api": "crank-control-plane",
        "/ui": "crank-control-plane",
        "/mcp": "crank-gateway",
    }
    assert {p["pathType"] for p in rule["http"]["paths"]} == {"Prefix"}
    containers = crank_containers(objects)
    for name in ("gateway", "control-plane"):
        assert plain_env(containers[name])["CRANK_PUBLIC_PATH_PREFIX"] == "/mcp"
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"  # SSE
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 30
    services = by_kind(objects, "Service")
    for service_name in routes.values():
        assert [p["name"] for p in services[service_name]["spec"]["ports"]] == ["http"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_console_cookie_is_secure_by_default(variant: str) -> None:
    env = plain_env(crank_containers(objects_of(variant))["control-plane"])
    assert env["CRANK_CONSOLE_COOKIE_SECURE"] == "always"


def test_tls_and_service_monitor_variant() -> None:
    objects = objects_of("service-monitor-tls")
    (ingress,) = by_kind(objects, "Ingress").values()
    assert ingress["spec"]["tls"] == [{"hosts": ["crank.example.com"], "secretName": "crank-tls"}]
    assert ingress["spec"]["ingressClassName"] == "nginx"
    env = plain_env(crank_containers(objects)["gateway"])
    assert env["CRANK_PUBLIC_URL"] == "https://crank.example.com"
    assert env["CRANK_TRUSTED_PROXIES"] == "10.0.0.0/8"
    assert env["CRANK_APPROVAL_TTL_S"] == "3600"


@pytest.mark.parametrize(
    ("variant", "listens"),
    [
        ("default", "true"),
        ("pgbouncer-session", "true"),  # a session connection keeps LISTEN
        ("pgbouncer-transaction", "false"),  # polling alone then
    ],
)
def test_the_gateway_listens_only_on_session_connections(variant: str, listens: str) -> None:
    objects = objects_of(variant)
    assert plain_env(crank_containers(objects)["gateway"])["CRANK_MCP_LISTEN"] == listens
    if variant.startswith("pgbouncer"):
        (config,) = by_kind(objects, "ConfigMap").values()
        mode = variant.removeprefix("pgbouncer-")
        assert f"pool_mode = {mode}" in config["data"]["pgbouncer.ini"]
        (bouncer,) = (
            d for d in by_kind(objects, "Deployment").values() if component(d) == "pgbouncer"
        )
        mounts = {v["name"]: v for v in pod_spec(bouncer)["volumes"]}
        assert mounts["auth"]["secret"]["secretName"] == "crank-pgbouncer"
        assert "crank-pgbouncer" in by_kind(objects, "Service")


@pytest.mark.parametrize("variant", VARIANTS)
def test_services_pdbs_and_the_hpa_point_at_their_pods(variant: str) -> None:
    objects = objects_of(variant)
    deployments = by_kind(objects, "Deployment")
    pods = {name: d["spec"]["template"]["metadata"]["labels"] for name, d in deployments.items()}
    for deployment in deployments.values():
        assert selects(
            deployment["spec"]["selector"]["matchLabels"],
            deployment["spec"]["template"]["metadata"]["labels"],
        )
    for service in by_kind(objects, "Service").values():
        (target,) = [
            n for n, labels in pods.items() if selects(service["spec"]["selector"], labels)
        ]
        (container,) = pod_spec(deployments[target])["containers"]
        port_names = {p["name"] for p in container["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names
    for pdb in by_kind(objects, "PodDisruptionBudget").values():
        matched = [
            n
            for n, labels in pods.items()
            if selects(pdb["spec"]["selector"]["matchLabels"], labels)
        ]
        assert len(matched) == 1
        assert deployments[matched[0]]["spec"].get("replicas", 2) > pdb["spec"]["maxUnavailable"]
    hpas = by_kind(objects, "HorizontalPodAutoscaler")
    gateway = deployments["crank-gateway"]
    if VARIANTS[variant].get("gateway", {}).get("autoscaling", {}).get("enabled", True):
        (hpa,) = hpas.values()
        assert hpa["spec"]["scaleTargetRef"] == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "crank-gateway",
        }
        ((metric,),) = [hpa["spec"]["metrics"]]
        assert metric["resource"]["name"] == "cpu"
        assert "replicas" not in gateway["spec"]  # the HPA owns the count
        (container,) = pod_spec(gateway)["containers"]
        assert quantity(container["resources"]["requests"]["cpu"]) > 0  # utilization needs it
    else:
        assert hpas == {}
        assert gateway["spec"]["replicas"] == 3


@pytest.mark.parametrize("variant", ["default", "service-monitor-tls"])
def test_scraping(variant: str) -> None:
    objects = objects_of(variant)
    gateway = by_kind(objects, "Deployment")["crank-gateway"]
    (container,) = pod_spec(gateway)["containers"]
    metrics_port = int(plain_env(container)["CRANK_METRICS_PORT"])
    assert {"name": "metrics", "containerPort": metrics_port} in container["ports"]
    annotations = gateway["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(metrics_port)
    assert annotations["prometheus.io/path"] == "/metrics"
    services = by_kind(objects, "Service")
    assert "metrics" not in {p["name"] for p in services["crank-gateway"]["spec"]["ports"]}
    monitors = by_kind(objects, "ServiceMonitor")
    if variant == "default":
        assert monitors == {}
        return
    (monitor,) = monitors.values()
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    (metrics_service,) = [
        s
        for s in services.values()
        if selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
    ]
    assert {
        "name": endpoint["port"],
        "port": metrics_port,
        "targetPort": "metrics",
    } in metrics_service["spec"]["ports"]


async def test_probes_and_ingress_paths_answer_on_the_real_processes(
    database_url: str, tmp_path: Path
) -> None:
    """Each process started with its rendered settings; every probe path answers 200 and
    every Ingress path reaches a route of its backend (not the 404 of an unknown path)."""
    objects = objects_of("default")
    containers = crank_containers(objects)
    (ingress,) = by_kind(objects, "Ingress").values()
    (rule,) = ingress["spec"]["rules"]
    routes = {p["path"]: p["backend"]["service"]["name"] for p in rule["http"]["paths"]}

    def settings_of(container: dict[str, Any]) -> dict[str, str]:
        # Ports and the bind address are the test's own (loopback, free ports).
        own = {"CRANK_HOST", "CRANK_GATEWAY_PORT", "CRANK_CONTROL_PLANE_PORT", "CRANK_METRICS_PORT"}
        return {k: v for k, v in plain_env(container).items() if k not in own}

    def probe_paths(container: dict[str, Any]) -> set[str]:
        probes = ("startupProbe", "readinessProbe", "livenessProbe")
        return {container[p]["httpGet"]["path"] for p in probes}

    async with (
        run_gateway(
            database_url, tmp_path, extra_env=settings_of(containers["gateway"])
        ) as gateway,
        run_control_plane(
            database_url, tmp_path, extra_env=settings_of(containers["control-plane"])
        ) as control_plane,
        httpx.AsyncClient(timeout=10) as http,
    ):
        assert (
            probe_paths(containers["gateway"])
            == probe_paths(containers["control-plane"])
            == {"/healthz", "/readyz"}
        )
        for url in (gateway.url, control_plane.url):
            for path in ("/healthz", "/readyz"):
                answer = await http.get(url + path)
                assert answer.status_code == 200, (url, path, answer.text)
        backends = {"crank-gateway": gateway.url, "crank-control-plane": control_plane.url}
        # Below each Ingress path, a route its backend serves: the MCP endpoint (which asks
        # for a key), the OpenAPI document and the console's sign-in page (no token needed).
        # A path the process did not serve would answer 404.
        below = {
            "/mcp": ("POST", "/v1/default/agent", 401),
            "/api": ("GET", "/v1/schema/openapi.json", 200),
            "/ui": ("GET", "/sign-in", 200),
        }
        assert set(routes) == set(below)
        for path, service in routes.items():
            method, rest, status = below[path]
            answer = await http.request(
                method, backends[service] + path + rest, json={} if method == "POST" else None
            )
            assert answer.status_code == status, (path, answer.text)
