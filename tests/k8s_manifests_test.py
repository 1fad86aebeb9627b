#!/usr/bin/python3
"""Validates deploy/k8s/*.yaml: they parse, have the fields Kubernetes requires, and agree
with each other and with the binaries: one image, ports matching the coordinator's flags,
probes on /healthz, Services selecting the pods, the workers' --coordinator naming the
Service and its port, node counts and GPU counts consistent, every referenced Secret,
ConfigMap, PVC and volume defined, every flag known to the binary it is passed to, and the
run spec accepted by a real coordinator; the cluster's shape is set once, in
kustomization.yaml, and reaches every field that depends on it (rendered with `kubectl
kustomize` when kubectl is installed, and by this test's own reading of the replacements); no
pod mounts a service-account token, every pod has a disruption budget and a network policy
admitting only its ports, the coordinator is scrapeable (annotations, ServiceMonitor), the
workers tolerate GPU taints, the example mounts no claim but the coordinator's ReadWriteOnce
state, the start-run Job uses the small coordinator image, and the components (Kueue gang
admission, models and data volumes) add what they say."""
import copy
import glob
import os
import shutil
import re
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"])
BINARIES = {
    "/opt/localsgd/bin/coordinator": f"{ROOT}/coordinator/coordinator",
    "/opt/localsgd/bin/localsgdctl": f"{ROOT}/coordinator/localsgdctl",
    "/opt/localsgd/bin/worker": f"{ROOT}/worker/worker",
}
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def flags(args):
    out = {}
    for arg in args:
        for m in re.finditer(r"--([a-z_]+)(?:=(\S*))?", arg):
            out[m.group(1)] = (m.group(2) or "").strip('"')
    return out


def known_flags(binary):
    help_text = subprocess.run([binary, "--helpfull"], capture_output=True, text=True).stdout
    return set(re.findall(r"--([a-z_]+) \(", help_text))


docs = []
KUSTOMIZATION = f"{ROOT}/deploy/k8s/kustomization.yaml"
for path in sorted(set(glob.glob(f"{ROOT}/deploy/k8s/*.yaml")) - {KUSTOMIZATION}):
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if doc:
                docs.append((os.path.basename(path), doc))
check(len(docs) >= 7, f"expected at least 7 objects, found {len(docs)}")
objects = {}
for name, doc in docs:
    for field in ("apiVersion", "kind", "metadata"):
        check(field in doc, f"{name}: missing {field}")
    check("name" in doc.get("metadata", {}), f"{name}: {doc.get('kind')} without metadata.name")
    objects[(doc["kind"], doc["metadata"]["name"])] = doc


def get(kind, name):
    doc = objects.get((kind, name))
    check(doc is not None, f"missing {kind} {name}")
    return doc or {}


known = {path: known_flags(binary) for path, binary in BINARIES.items()}
images = set()
secrets = set()
for (kind, name), doc in objects.items():
    if kind not in ("Deployment", "Job"):
        continue
    pod = doc["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for container in pod["containers"]:
        images.add(container["image"])
        for mount in container.get("volumeMounts", []):
            check(mount["name"] in volumes, f"{name}: mount of undefined volume {mount['name']}")
        text = " ".join(container.get("command", []) + container.get("args", []))
        for path, flag_set in known.items():
            for invocation in re.findall(re.escape(path) + r"((?:\s+\\?\s*--\S+)*)", text):
                for flag in flags([invocation]):
                    check(flag in flag_set, f"{name}: {os.path.basename(path)} has no --{flag}")
    for container in pod["containers"]:
        # Least privilege and bounded resources, for every container.
        security = container.get("securityContext", {})
        check(security.get("runAsNonRoot") is True and security.get("runAsUser", 0) != 0,
              f"{name}: must run as a non-root user")
        check(security.get("allowPrivilegeEscalation") is False,
              f"{name}: allowPrivilegeEscalation must be false")
        check(security.get("readOnlyRootFilesystem") is True,
              f"{name}: the root filesystem must be read-only")
        resources = container.get("resources", {})
        for bound in ("requests", "limits"):
            for what in ("cpu", "memory"):
                check(what in resources.get(bound, {}), f"{name}: no {what} {bound}")
    for volume in volumes.values():
        if "secret" in volume:
            secrets.add(volume["secret"]["secretName"])
        if "configMap" in volume:
            get("ConfigMap", volume["configMap"]["name"])
        if "persistentVolumeClaim" in volume:
            get("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
# Pinned to the release (VERSION), never a moving tag such as `latest`.
VERSION = open(f"{ROOT}/VERSION").read().strip()
check(re.fullmatch(r"\d+\.\d+\.\d+", VERSION), f"VERSION: {VERSION!r} is not MAJOR.MINOR.PATCH")
check(images == {f"localsgd-coordinator:{VERSION}", f"localsgd-worker:{VERSION}-cuda"},
      f"the images are not the coordinator's and the CUDA worker's of release {VERSION}: {images}")
# Secrets are created by the operator (documented commands), never shipped with placeholders
# (a placeholder token is one anyone knows, and the coordinator would accept it).
header = "".join(open(path).read() for path in glob.glob(f"{ROOT}/deploy/k8s/*.yaml"))
for secret in sorted(secrets):
    check(("Secret", secret) not in objects, f"Secret {secret} is shipped; document its creation")
    check(f"kubectl create secret generic {secret}" in header,
          f"Secret {secret}: no kubectl command to create it")
check("REPLACE_WITH" not in header, "a placeholder value is shipped")
# The image runs as the non-root user the manifests name, with the launcher; one container
# file builds the CPU and the CUDA image (build argument TORCH), and the manifests use the
# CUDA one.
dockerfile = open(f"{ROOT}/deploy/Dockerfile").read()
stage = f"{ROOT}/deploy/image/stage.sh"
check(re.search(r"^USER 65532$", dockerfile, re.M) is not None, "Dockerfile: not USER 65532")
check(re.search(r"^ARG TORCH=cpu$", dockerfile, re.M) is not None, "Dockerfile: no ARG TORCH")
check('deploy/image/stage.sh "$TORCH" /opt/localsgd' in dockerfile,
      "Dockerfile: does not stage the build with deploy/image/stage.sh")
check("deploy/bin/launch-ranks" in open(stage).read(), "stage.sh: no launch-ranks")
check("--build-arg TORCH=cuda" in dockerfile and
      '-t "localsgd-worker:$(cat VERSION)-cuda"' in dockerfile,
      "Dockerfile: the CUDA worker image's build command is not documented")
check(re.search(r'^ENTRYPOINT \["/opt/localsgd/bin/worker"\]$', dockerfile, re.M) is not None,
      "Dockerfile: the worker image's entrypoint is not the worker")
build_sh = open(f"{ROOT}/deploy/image/build.sh").read()
check("tag=$(cat VERSION)" in build_sh, "build.sh: the images are not tagged with VERSION by default")
check("image coordinator coordinator" in build_sh and '"$bin/localsgdctl"' in build_sh,
      "build.sh: the coordinator image (with localsgdctl, for the start-run Job) is not built")
# The CUDA build refuses, naming the folder, when its inputs are not there (nothing is built).
with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as libtorch:
    os.makedirs(f"{libtorch}/include/torch")
    os.makedirs(f"{libtorch}/lib")
    open(f"{libtorch}/lib/libtorch_cuda.so", "w").close()
    for env, says in [({"LIBTORCH": empty}, f"LIBTORCH={empty} is not a CUDA LibTorch"),
                      ({"LIBTORCH": libtorch, "CUDA": empty}, f"CUDA={empty} has no")]:
        result = subprocess.run([stage, "cuda", f"{empty}/out"], capture_output=True, text=True,
                                env={**os.environ, **env})
        check(result.returncode == 2 and says in result.stderr,
              f"stage.sh cuda with {env}: {result.returncode} {result.stderr!r}")
    result = subprocess.run([stage, "gpu", "x"], capture_output=True, text=True)
    check(result.returncode == 2 and "stage.sh cuda DEST" in result.stderr,
          f"stage.sh gpu: {result.returncode} {result.stderr!r}")

# Coordinator: ports and probes agree with its flags; the Service selects it.
deployment = get("Deployment", "localsgd-coordinator")
pod = deployment["spec"]["template"]["spec"]
container = pod["containers"][0]
cflags = flags(container["args"])
ports = {p["name"]: p["containerPort"] for p in container["ports"]}
check(cflags["grpc_address"].endswith(f":{ports['grpc']}"), "grpc port differs from --grpc_address")
check(cflags["http_address"].endswith(f":{ports['http']}"), "http port differs from --http_address")
check(cflags["grpc_address"].startswith("0.0.0.0:"), "coordinator must listen on all interfaces in a pod")
for probe in ("readinessProbe", "livenessProbe"):
    check(container[probe]["httpGet"]["path"] == "/healthz", f"{probe} not on /healthz")
    check(container[probe]["httpGet"]["port"] == "http", f"{probe} not on the http port")
check(deployment["spec"]["replicas"] == 1, "one coordinator owns the run")
labels = deployment["spec"]["template"]["metadata"]["labels"]
check(deployment["spec"]["selector"]["matchLabels"].items() <= labels.items(), "selector misses pods")
service = get("Service", "localsgd-coordinator")
check(service["spec"]["selector"].items() <= labels.items(), "Service does not select the coordinator")
service_ports = {p["name"]: p for p in service["spec"]["ports"]}
for port_name in ("grpc", "http"):
    check(service_ports[port_name]["targetPort"] in (port_name, ports[port_name]),
          f"Service {port_name} does not target the container port")
mounts = {m["mountPath"] for m in container["volumeMounts"]}
check(os.path.dirname(cflags["token_file"]) in mounts, "--token_file not on a mounted volume")
check(cflags["state_dir"] in mounts, "--state_dir not on a mounted volume")


def check_tls(name, pod_spec, container_flags, wanted):
    """Each TLS flag is set, its file lies on a volume mounted from a Secret."""
    container = pod_spec["containers"][0]
    secret_mounts = {m["mountPath"] for m in container["volumeMounts"]
                     if any(v["name"] == m["name"] and "secret" in v for v in pod_spec["volumes"])}
    for flag in wanted:
        check(flag in container_flags, f"{name}: --{flag} missing (mutual TLS)")
        check(os.path.dirname(container_flags[flag]) in secret_mounts,
              f"{name}: --{flag} not on a volume mounted from a Secret")


check_tls("coordinator", deployment["spec"]["template"]["spec"], cflags,
          ["tls_cert", "tls_key", "tls_client_ca"])

# Workers: reach the Service, node counts and GPUs agree, node rank from the index.
workers = get("Job", "localsgd-workers")
wspec = workers["spec"]
check(wspec.get("completionMode") == "Indexed", "workers: use an Indexed Job")
wcontainer = wspec["template"]["spec"]["containers"][0]
wflags = flags(wcontainer["args"])
check(wflags["coordinator"] == f"localsgd-coordinator:{service_ports['grpc']['port']}",
      "workers: --coordinator is not the Service's grpc port")
wenv = {e["name"]: e for e in wspec["template"]["spec"]["containers"][0]["env"]}
check(wflags["num_nodes"] == "$NODES", "workers: --num_nodes is not $NODES")
check(int(wenv["NODES"]["value"]) == wspec["completions"] == wspec["parallelism"],
      "workers: NODES, completions and parallelism differ")
check(wflags["node_rank"] == "$JOB_COMPLETION_INDEX", "workers: node rank not from the index")
check_tls("workers", wspec["template"]["spec"], wflags,
          ["tls_ca", "tls_cert", "tls_key", "data_tls_cert", "data_tls_key"])
# The sharded data plane: each leader is reached at its pod's name under the headless Service.
data_service = get("Service", "localsgd-workers")
check(data_service["spec"].get("clusterIP") == "None", "workers' Service must be headless")
check(wspec["template"]["spec"].get("subdomain") == "localsgd-workers",
      "workers: pods need subdomain localsgd-workers for their data-plane names")
data_port = {p["name"]: p["port"] for p in data_service["spec"]["ports"]}["data"]
check(wflags["data_address"] == f"$(hostname).localsgd-workers:{data_port}",
      "workers: --data_address is not the pod's name under the Service, on its data port")
# One launcher per pod for the node's ranks: SIGTERM forwarded, a failed rank fails the pod.
wtext = " ".join(wcontainer["command"] + wcontainer["args"])
check(re.search(r"exec /opt/localsgd/bin/launch-ranks \"\$LOCAL_WORLD_SIZE\"", wtext) is not None,
      "workers: the ranks are not started by launch-ranks $LOCAL_WORLD_SIZE")
check(wflags.get("local_rank") == "{rank}", "workers: --local_rank is not the launcher's {rank}")
check(wflags.get("device") == "auto",
      "workers: --device=auto (a GPU per rank where the pod has them, else the CPU)")
wpod = wspec["template"]["spec"]
wvolumes = {v["name"]: v for v in wpod["volumes"]}
wmounts = {m["mountPath"]: wvolumes[m["name"]] for m in wcontainer["volumeMounts"]}
check(wmounts.get("/dev/shm", {}).get("emptyDir", {}).get("medium") == "Memory",
      "workers: /dev/shm must be a memory emptyDir (NCCL)")
check("emptyDir" in wmounts.get(wflags["rendezvous_dir"], {}),
      "workers: --rendezvous_dir not on a writable emptyDir (the root filesystem is read-only)")
env = {e["name"]: e for e in wcontainer["env"]}
# The example needs no volume a provisioner might not offer: the workers mount no claim, and
# the only claim is the coordinator's ReadWriteOnce state (which keeps the final model).
check(not any("persistentVolumeClaim" in v for v in wvolumes.values()),
      "workers: the example mounts a claim (pods stay Pending where no provisioner offers it)")
check([n for k, n in objects if k == "PersistentVolumeClaim"] == ["localsgd-state"] and
      get("PersistentVolumeClaim", "localsgd-state")["spec"]["accessModes"] == ["ReadWriteOnce"],
      "the only claim must be the coordinator's ReadWriteOnce state")
check("${SAVE_MODEL:+--save_model=\"$SAVE_MODEL\"}" in wtext
      and env["SAVE_MODEL"]["value"] == "",
      "workers: --save_model only when SAVE_MODEL is set (components/models-volume)")
gpus = wcontainer["resources"]["limits"]["nvidia.com/gpu"]
check(int(env["LOCAL_WORLD_SIZE"]["value"]) == int(gpus), "workers: one worker per GPU")
check(env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name",
      "workers: node name from the pod")

# The run spec is accepted by a real coordinator (which validates every field).
spec_text = get("ConfigMap", "localsgd-run-spec")["data"]["spec.textproto"]
starter = get("Job", "localsgd-start-run")["spec"]["template"]["spec"]["containers"][0]
check(flags(starter["args"])["spec"] == "/etc/localsgd/spec/spec.textproto", "start job: spec path")
senv = {e["name"]: e["value"] for e in starter["env"]}
check(senv["NODES"] == wenv["NODES"]["value"] and senv["GPUS_PER_NODE"] == env["LOCAL_WORLD_SIZE"]["value"],
      "start job: NODES and GPUS_PER_NODE differ from the workers'")
check('--min_workers="$((NODES * GPUS_PER_NODE))"' in " ".join(starter["args"]),
      "start job: min_workers is not every worker (NODES x GPUS_PER_NODE)")
check("min_workers:" not in "".join(l for l in get("ConfigMap", "localsgd-run-spec")["data"]
                                    ["spec.textproto"].splitlines() if not l.strip().startswith("#")),
      "run spec: min_workers is set by the start job, not in the spec")
check("if_absent" in flags(starter["args"]),
      "start job: --if_absent, so that a retried or re-created Job finds its run instead of failing")
check_tls("start job", get("Job", "localsgd-start-run")["spec"]["template"]["spec"],
          flags(starter["args"]), ["tls_ca", "tls_cert", "tls_key"])
with tempfile.TemporaryDirectory() as work:
    with open(f"{work}/spec.textproto", "w") as f:
        f.write(spec_text)
    coordinator = subprocess.Popen(
        [BINARIES["/opt/localsgd/bin/coordinator"], "--grpc_address=127.0.0.1:0", "--http_address="],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        address = coordinator.stdout.readline().split()[-1]
        result = subprocess.run([BINARIES["/opt/localsgd/bin/localsgdctl"], f"--coordinator={address}",
                                 "start", f"--spec={work}/spec.textproto"],
                                capture_output=True, text=True)
        check(result.returncode == 0, f"the coordinator refused the run spec: {result.stderr}")
    finally:
        coordinator.terminate()
        coordinator.wait()


# The cluster's shape, set once in kustomization.yaml.
def resolve(node, path):
    """The parent and key of a kustomize fieldPath ("a.b.[name=x].c.[dotted.key]") in node."""
    parts = re.findall(r"\[[^\]]*\]|[^.\[]+", path)
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part.startswith("[") and "=" in part:
            key, value = part[1:-1].split("=", 1)
            matches = [item for item in node if item.get(key) == value]
            if len(matches) != 1:
                raise KeyError(path)
            node = matches[0]
            continue
        key = part.strip("[]")
        if last:
            if key not in node:
                raise KeyError(path)
            return node, key
        node = node[key]
    raise KeyError(path)


def render(kustomization, by_key):
    """Applies the kustomization's replacements to copies of the manifests' objects."""
    literals = dict(l.split("=", 1) for l in kustomization["configMapGenerator"][0]["literals"])
    rendered = copy.deepcopy(by_key)
    for replacement in kustomization["replacements"]:
        value = literals[replacement["source"]["fieldPath"].split(".", 1)[1]]
        for target in replacement["targets"]:
            doc = rendered[(target["select"]["kind"], target["select"]["name"])]
            for path in target["fieldPaths"]:
                parent, key = resolve(doc, path)
                parent[key] = int(value) if isinstance(parent[key], int) else value
    return rendered


def check_shape(rendered, nodes, gpus, how):
    w = rendered[("Job", "localsgd-workers")]["spec"]
    container = w["template"]["spec"]["containers"][0]
    wenv = {e["name"]: e.get("value") for e in container["env"]}
    s = rendered[("Job", "localsgd-start-run")]["spec"]["template"]["spec"]["containers"][0]
    senv = {e["name"]: e.get("value") for e in s["env"]}
    got = (w["completions"], w["parallelism"], wenv["NODES"], senv["NODES"],
           wenv["LOCAL_WORLD_SIZE"], senv["GPUS_PER_NODE"],
           container["resources"]["requests"]["nvidia.com/gpu"],
           container["resources"]["limits"]["nvidia.com/gpu"])
    want = (nodes, nodes, str(nodes), str(nodes), str(gpus), str(gpus), gpus, gpus)
    check(got == want, f"{how}: the shape does not reach every field: {got} != {want}")


# What a cluster admin asks of every pod: no service-account token (no pod calls the API),
# a disruption budget and a network policy admitting only the pod's own ports; the
# coordinator scrapeable; the workers tolerating GPU nodes' taint.
for (kind, name), doc in objects.items():
    if kind in ("Deployment", "Job"):
        check(doc["spec"]["template"]["spec"].get("automountServiceAccountToken") is False,
              f"{name}: mounts a service-account token")


def selecting(kind, labels):
    return [d for (k, _), d in objects.items()
            if k == kind and d["spec"]["selector" if kind == "PodDisruptionBudget"
                                       else "podSelector"]["matchLabels"].items() <= labels.items()]


# Issue 49: each port is admitted only from the pods that need it (a rule without `from`
# admits every pod of every namespace), and no budget blocks every drain of the coordinator's
# node (it resumes from its volume), while a training pod is not evicted voluntarily.
operator_labels = get("Job", "localsgd-start-run")["spec"]["template"]["metadata"]["labels"]
worker_labels = get("Job", "localsgd-workers")["spec"]["template"]["metadata"]["labels"]
for owner, ports_wanted, callers, blocked in (
        (("Deployment", "localsgd-coordinator"), {50051, 8080}, (worker_labels, operator_labels),
         False),
        (("Job", "localsgd-workers"), {7000}, (worker_labels,), True)):
    pod_labels = get(*owner)["spec"]["template"]["metadata"]["labels"]
    zero_budget = any(d["spec"].get("maxUnavailable") == 0
                      for d in selecting("PodDisruptionBudget", pod_labels))
    check(zero_budget == blocked, f"{owner[1]}: a PodDisruptionBudget of 0 is {zero_budget}, "
                                  f"not {blocked}")
    policies = selecting("NetworkPolicy", pod_labels)
    rules = [rule for pol in policies for rule in pol["spec"].get("ingress", [])]
    admitted = {p["port"] for rule in rules for p in rule.get("ports", [])}
    check(policies and admitted == ports_wanted,
          f"{owner[1]}: NetworkPolicy admits {sorted(admitted)}, not {sorted(ports_wanted)}")
    check(all(rule.get("from") for rule in rules),
          f"{owner[1]}: a NetworkPolicy rule without `from` admits every pod")
    for port in ports_wanted:
        for labels in callers:
            check(any(port in {p["port"] for p in rule.get("ports", [])} and
                      any(peer.get("podSelector", {}).get("matchLabels", {}).items()
                          <= labels.items() and "namespaceSelector" not in peer
                          for peer in rule["from"]) for rule in rules),
                  f"{owner[1]}: port {port} is not open to pods labelled {labels}")
# Only the run's pods and the monitoring namespace reach the coordinator.
for rule in (r for pol in selecting("NetworkPolicy", get("Deployment", "localsgd-coordinator")
                                    ["spec"]["template"]["metadata"]["labels"])
             for r in pol["spec"]["ingress"]):
    for peer in rule["from"]:
        check(peer.get("podSelector", {}).get("matchLabels", {}).get("app") == "localsgd" or
              peer.get("namespaceSelector", {}).get("matchLabels") ==
              {"kubernetes.io/metadata.name": "monitoring"},
              f"coordinator: NetworkPolicy admits {peer}")
        if "namespaceSelector" in peer:
            check({p["port"] for p in rule["ports"]} == {8080},
                  "coordinator: the monitoring namespace reaches more than /metrics' port")
check(get("Job", "localsgd-start-run")["spec"].get("ttlSecondsAfterFinished", 0) > 0,
      "localsgd-start-run: no ttlSecondsAfterFinished (the finished Job stays forever)")
annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
check(annotations.get("prometheus.io/scrape") == "true" and
      annotations.get("prometheus.io/port") == str(ports["http"]) and
      annotations.get("prometheus.io/path") == "/metrics",
      "coordinator: no Prometheus scrape annotations for its http port")
monitor = yaml.safe_load(open(f"{ROOT}/deploy/monitoring/servicemonitor.yaml"))
check(monitor["kind"] == "ServiceMonitor" and
      monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items() and
      monitor["spec"]["endpoints"][0]["port"] == "http",
      "servicemonitor.yaml: does not scrape the coordinator Service's http port")
check({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in
      wspec["template"]["spec"].get("tolerations", []), "workers: no toleration for GPU taints")

kustomization = yaml.safe_load(open(KUSTOMIZATION))
check(sorted(kustomization["resources"]) ==
      sorted(os.path.basename(p) for p in set(glob.glob(f"{ROOT}/deploy/k8s/*.yaml")) - {KUSTOMIZATION}),
      "kustomization.yaml: resources are not every manifest")
check(sorted((i["name"], i["newTag"]) for i in kustomization["images"]) ==
      sorted(tuple(i.split(":")) for i in images),
      "kustomization.yaml: images does not name the manifests' images with their tags")
check(starter["image"].startswith("localsgd-coordinator:"),
      "start job: not the small coordinator image (it needs only localsgdctl)")
literals = dict(l.split("=", 1) for l in kustomization["configMapGenerator"][0]["literals"])
try:
    # The manifests as shipped carry the same values (they also apply without -k).
    check_shape(render(kustomization, objects), int(literals["NODES"]),
                int(literals["GPUS_PER_NODE"]), "kustomization.yaml")
    # Another shape, set in the one place, reaches every field.
    other = copy.deepcopy(kustomization)
    other["configMapGenerator"][0]["literals"] = ["NODES=5", "GPUS_PER_NODE=4"]
    check_shape(render(other, objects), 5, 4, "NODES=5, GPUS_PER_NODE=4")
except KeyError as e:
    check(False, f"kustomization.yaml: a replacement's fieldPath is not in the manifest: {e}")
kubectl = shutil.which("kubectl")
if kubectl:
    with tempfile.TemporaryDirectory() as work:
        shutil.copytree(f"{ROOT}/deploy/k8s", f"{work}/k8s")
        with open(f"{work}/k8s/kustomization.yaml", "w") as f:
            yaml.safe_dump(other, f)
        result = subprocess.run([kubectl, "kustomize", f"{work}/k8s"], capture_output=True, text=True)
        check(result.returncode == 0, f"kubectl kustomize failed: {result.stderr}")
        if result.returncode == 0:
            by_key = {(d["kind"], d["metadata"]["name"]): d
                      for d in yaml.safe_load_all(result.stdout) if d}
            check_shape(by_key, 5, 4, "kubectl kustomize with NODES=5, GPUS_PER_NODE=4")
    print("kustomization rendered with kubectl kustomize")
else:
    print("kubectl is not installed: the kustomization was checked by this test's own rendering")


# The optional components (deploy/k8s/components), each applied by this test's own strategic
# merge and, where kubectl is installed, all together by kubectl kustomize.
def merge(base, patch):
    """Kubernetes' strategic merge for what the components patch: lists of objects by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        for key, value in patch.items():
            base[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return base
    if (isinstance(base, list) and isinstance(patch, list) and
            all(isinstance(x, dict) and "name" in x for x in base + patch)):
        for item in patch:
            same = [b for b in base if b["name"] == item["name"]]
            if same:
                merge(same[0], item)
            else:
                base.append(copy.deepcopy(item))
        return base
    return copy.deepcopy(patch)


def with_component(by_key, name):
    folder = f"{ROOT}/deploy/k8s/components/{name}"
    component = yaml.safe_load(open(f"{folder}/kustomization.yaml"))
    check(component["kind"] == "Component", f"components/{name}: not a kustomize Component")
    rendered = copy.deepcopy(by_key)
    for resource in component.get("resources", []):
        for doc in yaml.safe_load_all(open(f"{folder}/{resource}")):
            rendered[(doc["kind"], doc["metadata"]["name"])] = doc
    for patch in component["patches"]:
        doc = yaml.safe_load(patch["patch"])
        merge(rendered[(doc["kind"], doc["metadata"]["name"])], doc)
    return rendered


def check_components(by_key, how):
    """by_key: the manifests with every component applied."""
    job = by_key[("Job", "localsgd-workers")]
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: (m, volumes.get(m["name"], {})) for m in container["volumeMounts"]}
    save = {e["name"]: e.get("value") for e in container["env"]}["SAVE_MODEL"]
    claim = mounts.get(os.path.dirname(save or "/none"), ({}, {}))[1].get("persistentVolumeClaim", {})
    models = by_key.get(("PersistentVolumeClaim", claim.get("claimName")), {})
    check(models.get("spec", {}).get("accessModes") == ["ReadWriteMany"],
          f"{how}: models-volume: SAVE_MODEL={save} is not on a shipped ReadWriteMany claim")
    data, data_volume = mounts.get("/data", ({}, {}))
    check(data.get("readOnly") is True and
          data_volume.get("persistentVolumeClaim", {}).get("claimName") == "localsgd-data",
          f"{how}: data-volume: /data is not the claim localsgd-data, read-only")
    queues = [d for (k, _), d in by_key.items() if k == "LocalQueue"]
    check(len(queues) == 1 and job["spec"].get("suspend") is True and
          job["metadata"]["labels"].get("kueue.x-k8s.io/queue-name") == queues[0]["metadata"]["name"],
          f"{how}: kueue: the workers' Job is not suspended in the component's LocalQueue")
    check("suspend" not in by_key[("Job", "localsgd-start-run")]["spec"],
          f"{how}: kueue: the start-run Job must not wait for the workers' quota")


components = sorted(os.listdir(f"{ROOT}/deploy/k8s/components"))
check(components == ["data-volume", "kueue", "models-volume"], f"components: {components}")
rendered = objects
for component in components:
    rendered = with_component(rendered, component)
check_components(rendered, "this test's rendering")
for component in components:
    check(f"#   - components/{component}" in open(KUSTOMIZATION).read(),
          f"kustomization.yaml does not show how to turn on components/{component}")
if kubectl:
    with tempfile.TemporaryDirectory() as work:
        shutil.copytree(f"{ROOT}/deploy/k8s", f"{work}/k8s")
        with open(f"{work}/k8s/kustomization.yaml", "a") as f:
            f.write("components:\n" + "".join(f"  - components/{c}\n" for c in components))
        result = subprocess.run([kubectl, "kustomize", f"{work}/k8s"], capture_output=True, text=True)
        check(result.returncode == 0, f"kubectl kustomize with the components failed: {result.stderr}")
        if result.returncode == 0:
            check_components({(d["kind"], d["metadata"]["name"]): d
                              for d in yaml.safe_load_all(result.stdout) if d}, "kubectl kustomize")

if failures:
    print("\n".join("FAIL: " + f for f in failures))
    sys.exit(1)
print(f"{len(objects)} objects checked")
