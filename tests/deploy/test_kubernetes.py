"""deploy/kubernetes/, checked without a cluster: each kustomization rendered with
``kubectl kustomize``, every object of a built-in kind validated strictly (unknown fields are
errors) with kubernetes-validate against the oldest and the newest Kubernetes we claim, and the
properties that matter asserted: probes that run the client's real checks, /dev/shm size, GPU
only in the GPU overlay, a read-only repository, the key from a Secret, rollouts that never
take a ready pod away first, a PDB and an HPA that point at the pods, and container arguments
that docker/entrypoint.sh and tritonrepo-client accept.

kubernetes-validate knows only built-in kinds: for a custom resource (KServe's ServingRuntime
and InferenceService, the Prometheus Operator's PodMonitor) it raises SchemaNotFoundError, and
its CLI only warns and exits 0. So here a custom kind must be on ``CUSTOM_KINDS`` (anything else
fails), the built-in parts they embed (containers, volumes, the rollout strategy, the pod's
security context) are wrapped in a Pod or Deployment and validated strictly like the rest, and
the custom fields are checked by the tests below (docs/operations/kubernetes.md says what was
checked once against the CRDs' own schemas).
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.deploy.test_compose import _run_entrypoint as run_entrypoint_script
from tritonrepo.paths import MODEL_REPOSITORY, REPO_ROOT
from tritonrepo.server import preflight
from tritonrepo.server.options import default_models
from tritonrepo_client.cli import app as cli

K8S_DIR = REPO_ROOT / "deploy" / "kubernetes"
OVERLAYS = ("gpu", "cpu")
KUSTOMIZATIONS = ("overlays/gpu", "overlays/cpu", "kserve", "prometheus-adapter", "argo-rollouts")
# Oldest and newest Kubernetes the manifests are for: 1.29 (native sidecars, used by the KServe
# path, are on by default from 1.29) and the newest schemas kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
CUSTOM_KINDS = {
    ("serving.kserve.io/v1alpha1", "ServingRuntime"),
    ("serving.kserve.io/v1beta1", "InferenceService"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("argoproj.io/v1alpha1", "Rollout"),
    ("argoproj.io/v1alpha1", "AnalysisTemplate"),
}
SECRET = "tritonrepo-repository-key"
KEY_ENV = "TRITONREPO_REPOSITORY_KEY_FILE"
IMAGE_REPOSITORY = "/opt/tritonrepo/model_repository"  # docker/Dockerfile WORKDIR + COPY
COMPOSE_SHM = 2**30  # docker/compose.yaml shm_size: 1gb


# --- rendering -----------------------------------------------------------------------------------


@cache
def _render(path: str) -> tuple[dict, ...]:
    """The objects ``kubectl kustomize`` renders from ``path`` (a folder)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is not installed: `make k8s-deps` installs it (Debian's kubectl)")
    proc = subprocess.run(
        [kubectl, "kustomize", path], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, f"kubectl kustomize {path}: {proc.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(proc.stdout) if doc)


def render(name: str) -> tuple[dict, ...]:
    return _render(str(K8S_DIR / name))


def one(objects: tuple[dict, ...], kind: str, name: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container(pod_spec: dict, name: str) -> dict:
    found = [c for c in pod_spec.get("containers", []) + pod_spec.get("initContainers", [])]
    found = [c for c in found if c["name"] == name]
    assert len(found) == 1, f"no container {name}"
    return found[0]


def env(c: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def port(c: dict, name: str) -> int:
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    assert name in ports, f"container {c['name']} has no port {name}"
    return ports[name]


def quantity(q: str | int) -> float:
    """A Kubernetes quantity (``1Gi``, ``512Mi``, ``4``, ``50m``) as a number."""
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(q))
    assert match, f"unreadable quantity {q!r}"
    units = {"": 1, "m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return float(match[1]) * units[match[2]]


def deployment(overlay: str) -> dict:
    return one(render(f"overlays/{overlay}"), "Deployment", "tritonrepo")


def pod_spec(overlay: str) -> dict:
    return deployment(overlay)["spec"]["template"]["spec"]


# --- schema validation ---------------------------------------------------------------------------


def _validate(obj: dict, version: str) -> None:
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} on {version}: {path}: {exc.message}")


def _embedded_core_objects(obj: dict) -> list[dict]:
    """The built-in parts a custom resource embeds, as objects kubernetes-validate knows."""
    meta = {"name": f"{obj['metadata']['name']}-embedded"}
    if obj["kind"] == "ServingRuntime":
        spec = {k: obj["spec"][k] for k in ("containers", "volumes") if k in obj["spec"]}
        return [{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}]
    if obj["kind"] == "InferenceService":
        predictor = obj["spec"]["predictor"]
        model = predictor["model"]
        # The predictor is a PodSpec plus KServe's fields; the model is a container whose
        # name, image and command the runtime supplies.
        pod_fields = ("initContainers", "securityContext", "terminationGracePeriodSeconds")
        spec = {k: predictor[k] for k in pod_fields if k in predictor}
        model_container = {"name": "kserve-container", "image": "from-the-runtime"}
        model_container |= {k: model[k] for k in ("env", "resources") if k in model}
        spec["containers"] = [model_container]
        strategy = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "selector": {"matchLabels": {"app": "x"}},
                "strategy": predictor["deploymentStrategy"],
                "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "x", "image": "x"}]},
                },
            },
        }
        return [{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}, strategy]
    return []  # PodMonitor: nothing built-in inside; checked in test_podmonitor_*


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_rendered_objects_validate_strictly(name: str, version: str) -> None:
    """Every built-in object validates (unknown fields rejected); custom kinds are only the
    known ones, and the built-in parts they embed validate too."""
    objects = render(name)
    assert objects
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CUSTOM_KINDS:
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                kubernetes_validate.validate(obj, version, strict=True)
            for embedded in _embedded_core_objects(obj):
                _validate(embedded, version)
        else:
            _validate(obj, version)


def test_validation_rejects_unknown_fields() -> None:
    """The validation above is not vacuous: a misspelt field of a Deployment fails it."""
    bad = copy.deepcopy(deployment("cpu"))
    bad["spec"]["minReadySecond"] = bad["spec"].pop("minReadySeconds")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSIONS[0], strict=True)


def test_no_secret_in_the_tree() -> None:
    """The key is created in the cluster (docs/operations/kubernetes.md), never rendered."""
    for name in KUSTOMIZATIONS:
        assert not [o for o in render(name) if o["kind"] == "Secret"], name


# --- the server pod ------------------------------------------------------------------------------


def _client_args(command: list[str]):
    """``command`` (``tritonrepo-client ...``) parsed by the client's own parser."""
    assert command[0] == "tritonrepo-client", command
    return cli._parser().parse_args(command[1:])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_run_the_clients_checks(overlay: str) -> None:
    """Readiness = `tritonrepo-client health` (every model READY + a real inference on each);
    liveness and startup = `health --live`; the client gives up before the kubelet does."""
    triton = container(pod_spec(overlay), "triton")
    http = port(triton, "http")
    for probe, live in (("readinessProbe", False), ("livenessProbe", True), ("startupProbe", True)):
        spec = triton[probe]
        args = _client_args(spec["exec"]["command"])
        assert args.command == "health" and args.live is live, probe
        assert not args.models, f"{probe}: probes the served models (the default set)"
        assert args.url in (None, f"127.0.0.1:{http}") and args.protocol == "http"
        assert args.timeout < spec["timeoutSeconds"], probe
    readiness = triton["readinessProbe"]
    assert readiness.get("successThreshold", 1) == 1
    startup = triton["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 180  # compose start_period


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_heal_sidecar_runs_the_clients_watch_with_metrics(overlay: str) -> None:
    """The compose `heal` service as a sidecar: the client's own parser accepts its arguments,
    it watches the local server with the key, and its metrics are reachable on heal-metrics."""
    spec = pod_spec(overlay)
    heal, triton = container(spec, "heal"), container(spec, "triton")
    args = _client_args(heal["command"] + heal["args"])
    assert args.command == "heal" and args.watch
    assert args.url == f"127.0.0.1:{port(triton, 'http')}"
    assert args.metrics_port == port(heal, "heal-metrics") == 8003
    assert args.metrics_address == "0.0.0.0"  # the pod IP, where Prometheus connects
    assert env(heal)[KEY_ENV] == env(triton)[KEY_ENV]
    assert heal["livenessProbe"]["httpGet"]["port"] == "heal-metrics"
    assert heal["image"] == triton["image"]


def _sized_shm(spec: dict, c: dict) -> int:
    mounts = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert len(mounts) == 1, "no /dev/shm mount"
    volume = next(v for v in spec["volumes"] if v["name"] == mounts[0]["name"])
    assert volume["emptyDir"]["medium"] == "Memory"
    return int(quantity(volume["emptyDir"]["sizeLimit"]))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_dev_shm_is_sized_for_the_python_backend(overlay: str) -> None:
    """A memory-backed /dev/shm as large as compose's (1 GiB), above what the preflight asks
    for this config set (32 MiB per Python instance), inside the container's memory limit."""
    spec = pod_spec(overlay)
    triton = container(spec, "triton")
    size = _sized_shm(spec, triton)
    config = "cpu" if overlay == "cpu" else None
    closure = preflight.dependencies(MODEL_REPOSITORY, default_models(), config)
    need = preflight.python_instances(MODEL_REPOSITORY, closure, config)
    assert size >= need * preflight.SHM_PER_PYTHON_INSTANCE
    assert size == COMPOSE_SHM
    assert quantity(triton["resources"]["limits"]["memory"]) >= size + 2**30


def _gpus(c: dict) -> dict[str, str]:
    resources = c.get("resources", {})
    return {
        part: resources.get(part, {}).get("nvidia.com/gpu")
        for part in ("requests", "limits")
        if "nvidia.com/gpu" in resources.get(part, {})
    }


def test_gpu_only_in_the_gpu_overlay() -> None:
    gpu, cpu = pod_spec("gpu"), pod_spec("cpu")
    assert _gpus(container(gpu, "triton")) == {"requests": 1, "limits": 1}
    assert _gpus(container(gpu, "heal")) == {}
    assert all(_gpus(c) == {} for c in cpu["containers"])
    assert "nvidia.com/gpu" not in yaml.safe_dump(list(render("overlays/cpu")))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_repository_is_read_only(overlay: str) -> None:
    """The image's copy of the repository, on a read-only root filesystem; nothing writable is
    mounted over it."""
    triton = container(pod_spec(overlay), "triton")
    assert triton["securityContext"]["readOnlyRootFilesystem"] is True
    for mount in triton["volumeMounts"]:
        over = IMAGE_REPOSITORY.startswith(mount["mountPath"].rstrip("/") + "/")
        if mount["mountPath"] == IMAGE_REPOSITORY or over:
            assert mount.get("readOnly") is True, mount


def test_repository_volume_component_mounts_read_only(tmp_path: Path) -> None:
    """The component that serves the repository from a PVC mounts it read-only, twice over
    (the claim and the mount), on the server container. (Kustomize wants relative paths.)"""
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(K8S_DIR / "overlays" / "gpu", tmp_path)],
            "components": [os.path.relpath(K8S_DIR / "components" / "repository-volume", tmp_path)],
        })
    )  # fmt: skip
    objects = _render(str(tmp_path))
    spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if "persistentVolumeClaim" in v)
    assert volume["persistentVolumeClaim"]["readOnly"] is True
    mounts = container(spec, "triton")["volumeMounts"]
    mount = next(m for m in mounts if m["name"] == volume["name"])
    assert mount["mountPath"] == IMAGE_REPOSITORY and mount["readOnly"] is True
    for version in KUBERNETES_VERSIONS:
        _validate(one(objects, "Deployment"), version)


def _key_from_secret(spec: dict, c: dict) -> None:
    path = env(c)[KEY_ENV]
    assert "TRITONREPO_REPOSITORY_KEY" not in env(c), "the key itself in the pod spec"
    mount = next(m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    assert mount["readOnly"] is True
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    secret = volume["secret"]
    assert secret["secretName"] == SECRET
    assert secret["defaultMode"] & 0o007 == 0, "the key readable by others"
    items = {i["path"]: i["key"] for i in secret["items"]}
    assert items[path.removeprefix(mount["mountPath"] + "/")] == "repository_key"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_key_comes_from_a_secret(overlay: str) -> None:
    """Both containers read the key from the Secret's file (never a literal), group-readable
    for the non-root user."""
    spec = pod_spec(overlay)
    for name in ("triton", "heal"):
        _key_from_secret(spec, container(spec, name))
    security = spec["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
    assert security["fsGroup"] == security["runAsGroup"]


def _exit_timeout(args: list[str]) -> int:
    timeouts = [a.split("=", 1)[1] for a in args if a.startswith("--exit-timeout-secs=")]
    assert len(timeouts) == 1, "the exit timeout is spelled out (the grace period depends on it)"
    return int(timeouts[0])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rolling_update_keeps_serving(overlay: str) -> None:
    """No ready pod goes before its replacement passes the real check (maxUnavailable 0, one
    surge pod, minReadySeconds); a stopping pod drains (preStop) and Triton gets its exit
    timeout within the grace period."""
    dep = deployment(overlay)
    spec = dep["spec"]
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert spec["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    triton = container(spec["template"]["spec"], "triton")
    assert spec["minReadySeconds"] >= triton["readinessProbe"]["periodSeconds"]
    pre_stop = triton["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep" and int(pre_stop[1]) >= 5
    exit_timeout = _exit_timeout(triton["args"])
    assert exit_timeout >= 30  # Triton's default; the launcher's "up to 30 s"
    grace = spec["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= int(pre_stop[1]) + exit_timeout + 10


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pdb_and_hpa_point_at_the_pods(overlay: str) -> None:
    objects = render(f"overlays/{overlay}")
    dep = one(objects, "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert dep["spec"]["selector"]["matchLabels"] == pdb["spec"]["selector"]["matchLabels"]
    hpa = one(objects, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == (
        "apps/v1",
        "Deployment",
        dep["metadata"]["name"],
    )
    # A drain never takes the last serving pod: the PDB allows fewer than the minimum.
    assert pdb["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"]
    assert "replicas" not in dep["spec"], "kubectl apply would reset the HPA's count"


def _adapter_rules() -> list[dict]:
    config = one(render("prometheus-adapter"), "ConfigMap", "adapter-config")
    return yaml.safe_load(config["data"]["config.yaml"])["rules"]


def test_adapter_rules_are_well_formed() -> None:
    """Each rule has what the Prometheus adapter needs, maps namespace and pod, and queries
    the Triton metric its seriesQuery names."""
    rules = _adapter_rules()
    assert rules
    for rule in rules:
        assert {"seriesQuery", "resources", "name", "metricsQuery"} <= rule.keys()
        series = re.match(r"(\w+)\{", rule["seriesQuery"])[1]
        assert series.startswith("nv_inference_")
        assert re.match(rule["name"]["matches"], series)
        assert rule["resources"]["overrides"] == {
            "namespace": {"resource": "namespace"},
            "pod": {"resource": "pod"},
        }
        query = rule["metricsQuery"]
        assert "<<.LabelMatchers>>" in query and "<<.GroupBy>>" in query
        assert "<<.Series>>" in query or series in query


@pytest.mark.parametrize("name", [*(f"overlays/{o}" for o in OVERLAYS), "kserve"])
def test_hpa_metrics_come_from_the_adapter_rules(name: str) -> None:
    """The HPA's per-pod metrics are exactly ones the adapter's rules publish."""
    published = {rule["name"]["as"] for rule in _adapter_rules()}
    hpa = one(render(name), "HorizontalPodAutoscaler")
    metrics = hpa["spec"]["metrics"]
    assert metrics and all(m["type"] == "Pods" for m in metrics)
    assert {m["pods"]["metric"]["name"] for m in metrics} <= published


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_and_scrape_annotations(overlay: str) -> None:
    """Services select the server pods and name ports they have; Prometheus' annotations name
    Triton's metrics port on the pod and the healer's on its headless Service."""
    objects = render(f"overlays/{overlay}")
    template = one(objects, "Deployment")["spec"]["template"]
    labels, spec = template["metadata"]["labels"], template["spec"]
    ports = {p["name"]: p["containerPort"] for c in spec["containers"] for p in c["ports"]}
    for svc in (o for o in objects if o["kind"] == "Service"):
        assert svc["spec"]["selector"].items() <= labels.items(), svc["metadata"]["name"]
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in ports, (svc["metadata"]["name"], p)
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == ports["metrics"] == 8002
    heal = one(objects, "Service", "tritonrepo-heal-metrics")
    assert int(heal["metadata"]["annotations"]["prometheus.io/port"]) == ports["heal-metrics"]
    sessions = one(objects, "Service", "tritonrepo-sessions")
    assert sessions["spec"]["sessionAffinity"] == "ClientIP"  # ctr_session's state is per pod


# --- what docker/entrypoint.sh makes of the containers' env and args ---------------------------


def _run_entrypoint(tmp: Path, c: dict, plans: bool, **overrides: str) -> list[str]:
    """docker/entrypoint.sh run with ``c``'s env and args (stand-ins for python and
    tritonserver); the tritonserver command line it execs, split."""
    variables = {
        **{k: v for k, v in env(c).items() if v is not None},
        KEY_ENV: str(tmp / "key"),  # the Secret's file, which exists only in the pod
        **overrides,
    }
    proc, log = run_entrypoint_script(tmp, plans, *c.get("args", []), **variables)
    assert proc.returncode == 0, proc.stderr
    serve = [line for line in log.splitlines() if line.startswith("tritonserver ")]
    assert len(serve) == 1
    return serve[0].split()[1:]


def test_entrypoint_reads_the_env_the_manifests_set() -> None:
    """Every TRITONREPO_* variable the server containers set is one docker/entrypoint.sh or the
    client reads (a misspelt name would be ignored silently)."""
    script = (REPO_ROOT / "docker" / "entrypoint.sh").read_text()
    names = set()
    for overlay in OVERLAYS:
        names |= {n for n in env(container(pod_spec(overlay), "triton")) if "TRITONREPO" in n}
    runtime = one(render("kserve"), "ServingRuntime")
    names |= {n for n in env(container(runtime["spec"], "kserve-container"))}
    isvc = one(render("kserve"), "InferenceService")
    names |= {e["name"] for e in isvc["spec"]["predictor"]["model"].get("env", [])}
    assert names
    for name in names:
        assert re.search(rf"\$\{{?{name}\b", script), f"entrypoint.sh does not read {name}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_entrypoint_serves_the_overlays_config_set(overlay: str, tmp_path: Path) -> None:
    """The CPU overlay makes the entrypoint pass --model-config-name=cpu (and needs no plans);
    the GPU overlay serves config.pbtxt; the container's args reach tritonserver."""
    triton = container(pod_spec(overlay), "triton")
    assert "command" not in triton, "the image's entrypoint must run (preflight, key, models)"
    serve = _run_entrypoint(tmp_path, triton, plans=overlay == "gpu")
    assert ("--model-config-name=cpu" in serve) is (overlay == "cpu")
    assert "--model-control-mode=explicit" in serve  # the models: tests/deploy/test_compose.py
    assert serve[-len(triton["args"]) :] == triton["args"]


# --- KServe --------------------------------------------------------------------------------------


def test_kserve_inference_service_uses_the_runtime_and_the_repository() -> None:
    """The InferenceService names the ServingRuntime, a model format it supports and a PVC
    (read-only); the runtime runs the same image and entrypoint with Triton on KServe's ports,
    the real checks as probes and the key from the Secret."""
    objects = render("kserve")
    runtime, isvc = one(objects, "ServingRuntime"), one(objects, "InferenceService")
    predictor = isvc["spec"]["predictor"]
    model = predictor["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"] in [
        {k: f[k] for k in ("name", "version")} for f in runtime["spec"]["supportedModelFormats"]
    ]
    assert {"v2", "grpc-v2"} <= set(runtime["spec"]["protocolVersions"])
    assert model["storageUri"].startswith("pvc://")
    assert isvc["metadata"]["annotations"]["storage.kserve.io/readonly"] == "true"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] in (
        "RawDeployment",
        "Standard",
    )
    server = container(runtime["spec"], "kserve-container")
    assert server["image"] == container(pod_spec("gpu"), "triton")["image"]
    assert "command" not in server
    assert env(server)["TRITONREPO_MODEL_REPOSITORY"] == "/mnt/models"  # KServe's mount
    assert {"--http-port=8080", "--grpc-port=9000"} <= set(server["args"])
    for probe, live in (("readinessProbe", False), ("livenessProbe", True), ("startupProbe", True)):
        args = _client_args(server[probe]["exec"]["command"])
        assert args.command == "health" and args.live is live
        assert args.url == "127.0.0.1:8080" and args.timeout < server[probe]["timeoutSeconds"]
    _key_from_secret(runtime["spec"], server)
    spec = {"volumes": runtime["spec"]["volumes"]}
    assert _sized_shm(spec, server) == COMPOSE_SHM
    assert predictor["deploymentStrategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    assert predictor["terminationGracePeriodSeconds"] >= 15 + _exit_timeout(server["args"]) + 10
    assert _gpus(model) == {"requests": "1", "limits": "1"}


def test_kserve_heal_sidecar(tmp_path: Path) -> None:
    """The healer as a native sidecar (KServe keeps the predictor's init containers, not the
    runtime's extra containers), on KServe's HTTP port, with the key."""
    objects = render("kserve")
    runtime, isvc = one(objects, "ServingRuntime"), one(objects, "InferenceService")
    heal = container(isvc["spec"]["predictor"], "heal")
    assert heal["restartPolicy"] == "Always"
    args = _client_args(heal["command"] + heal["args"])
    assert args.command == "heal" and args.watch and args.url == "127.0.0.1:8080"
    assert args.metrics_port == port(heal, "heal-metrics") and args.metrics_address == "0.0.0.0"
    spec = {"volumes": runtime["spec"]["volumes"]}  # KServe merges the runtime's volumes in
    _key_from_secret(spec, heal)
    server = container(runtime["spec"], "kserve-container")
    serve = _run_entrypoint(tmp_path, server, plans=True)
    assert "--http-port=8080" in serve and "--grpc-port=9000" in serve


def test_kserve_hpa_and_pdb_point_at_the_predictor() -> None:
    objects = render("kserve")
    isvc = one(objects, "InferenceService")
    name = isvc["metadata"]["name"]
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "external"
    hpa = one(objects, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == f"{name}-predictor"  # KServe's naming
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == {"serving.kserve.io/inferenceservice": name}
    assert pdb["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"]


def test_podmonitor_scrapes_both_metrics_ports() -> None:
    """The Prometheus Operator's PodMonitor selects the server pods and names their metrics
    ports (Triton's, for the HPA, and the healer's)."""
    monitor = one(render("prometheus-adapter"), "PodMonitor")
    template = deployment("gpu")["spec"]["template"]
    labels = template["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    names = {p["name"] for c in template["spec"]["containers"] for p in c["ports"]}
    scraped = {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]}
    assert scraped == {"metrics", "heal-metrics"} and scraped <= names
    # The job names of deploy/prometheus/prometheus.yml, which the alerts' `up` rules select.
    prometheus = yaml.safe_load(
        (REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text()
    )
    jobs = {c["job_name"] for c in prometheus["scrape_configs"]}
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        [relabel] = [r for r in endpoint["relabelings"] if r["targetLabel"] == "job"]
        assert relabel["replacement"] in jobs, endpoint["port"]


def test_argo_rollout_takes_over_the_deployment_with_analysed_steps(tmp_path: Path) -> None:
    """The Rollout references the overlays' Deployment (workloadRef) with its pod selector,
    its stable Service is the one clients use and its canary Service selects the same pods;
    10 % then 50 %, each followed by the analysis, whose two Prometheus queries parse (promtool,
    with the arguments filled in) and read the pod-template hash the PodMonitor keeps."""
    objects = render("argo-rollouts")
    rollout = one(objects, "Rollout")
    spec = rollout["spec"]
    server = deployment("cpu")
    workload = {"apiVersion": "apps/v1", "kind": "Deployment"}
    workload |= {"name": server["metadata"]["name"], "scaleDown": "progressively"}
    assert spec["workloadRef"] == workload
    labels = server["spec"]["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    canary = spec["strategy"]["canary"]
    services = {
        s["metadata"]["name"]: s for s in render("overlays/cpu") + objects if s["kind"] == "Service"
    }
    for name in (canary["stableService"], canary["canaryService"]):
        assert services[name]["spec"]["selector"].items() <= labels.items(), name
    weights = [s["setWeight"] for s in canary["steps"] if "setWeight" in s]
    assert weights == [10, 50]
    template = one(objects, "AnalysisTemplate")
    for i, step in enumerate(canary["steps"]):
        if "setWeight" in step:
            analysis = canary["steps"][i + 1]["analysis"]
            assert analysis["templates"] == [{"templateName": template["metadata"]["name"]}]
            given = {a["name"] for a in analysis["args"]}
            declared = {a["name"] for a in template["spec"]["args"] if "value" not in a}
            assert given == declared == {"canary-hash", "stable-hash"}
    values = {"canary-hash": "abc", "stable-hash": "def", "prometheus": "", "model": "m"}
    records = []
    for metric in template["spec"]["metrics"]:
        query = metric["provider"]["prometheus"]["query"]
        assert "rollouts_pod_template_hash" in query
        for name, value in values.items():
            query = query.replace("{{args." + name + "}}", value)
        assert "{{" not in query
        records.append({"record": f"argo:{metric['name'].replace('-', '_')}", "expr": query})
    path = tmp_path / "analysis.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "argo", "rules": records}]}))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: make monitoring-deps installs it"
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    monitor = one(render("prometheus-adapter"), "PodMonitor")
    assert "rollouts-pod-template-hash" in monitor["spec"]["podTargetLabels"]


def test_check_crds_script_rejects_unknown_fields(tmp_path: Path) -> None:
    """deploy/kubernetes/check_crds.py (run by hand against a cluster's CRDs) passes a custom
    resource that fits its CRD and fails one with a misspelt field or no CRD."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_crds", K8S_DIR / "check_crds.py")
    check_crds = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_crds)
    schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {"port": {"type": "string"}}},
        },
    }
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {
            "group": "example.com",
            "names": {"kind": "Thing"},
            "versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}],
        },
    }
    (tmp_path / "crd.yaml").write_text(yaml.safe_dump(crd))
    for name, spec_, expected in (("good", {"port": "x"}, 0), ("bad", {"prot": "x"}, 1)):
        thing = {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": name}}
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ignored"}}
        (tmp_path / f"{name}.yaml").write_text(
            yaml.safe_dump_all([service, thing | {"spec": spec_}])
        )
        args = [str(tmp_path / f"{name}.yaml"), str(tmp_path / "crd.yaml")]
        assert check_crds.main(args) == expected, name
    assert check_crds.main([str(tmp_path / "good.yaml"), str(tmp_path / "good.yaml")]) == 1
