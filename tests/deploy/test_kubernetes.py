"""deploy/kubernetes/, checked without a cluster.

- Every manifest passes yamllint and a strict schema check against the API models of Debian's
  python3-kubernetes (22.6.0, Kubernetes 1.22): every field known to its model and of its type,
  required fields present, plus what the API server would refuse and the models do not encode
  (enum values, names, quantities, references between fields). The checker is shown to reject
  broken manifests, one fault at a time, with the exact message.
- The project's invariants: the broker and the workload share the node's socket directory, so
  both reach the same two sockets (broker.sock, gRPC, and broker.sock.fd, the local channel that
  hands out the segments' memfd descriptors); that directory is the only node path any pod
  mounts: no /dev/shm, no hostIPC (the segments have no name to share); the workload carries
  the broker's group, the Dockerfile makes that user and group, every daemon flag exists, the
  probes are `tensorbroker ... health`.
- The DaemonSet's own command line, probes and metrics port, and the example pod's Python, run
  against the real daemon and CLI (TENSORBROKERD, TENSORBROKER_CLI), the node's hostPath
  directory mapped into a temporary directory; the daemon's segments are seen as memfds among
  its descriptors and never in /dev/shm.
- Peers (tensorbrokerd-daemonset-peers.yaml: the readers; tensorbrokerd-daemonset-publishers.yaml:
  the publishers; peer-certificate.yaml, peer-networkpolicy.yaml): the readers' DaemonSet is the
  CPU one plus the peer port, flags, the Secret's mount, the ConfigMap's settings file and a node
  affinity that keeps it off the publishers' nodes; the publishers' DaemonSet is the readers'
  without the settings file, on the labelled nodes only, so each node runs one broker; each
  headless Service selects its role's pods on that port; the NetworkPolicy admits the port from
  both roles; the settings file's remote[policy/] is the publishers' Service at its port, a name
  the certificate has; cert-manager's Issuers and Certificates pass a structural check against
  cert-manager's CRDs and name that Secret and both Services; the README's openssl recipe, run
  with openssl, makes certificates with the same names, which each DaemonSet's command line
  serves peers with, through the Secret's mount mapped into a temporary directory; a gRPC client
  that dials its Service's names with them is served; the real daemon reads the readers'
  settings file with their command line; and a reader's Get of policy/... fetches from a
  publisher by the Service's name (resolved through an /etc/hosts of the reader's own).
"""

import functools
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import grpc
import kubernetes.client as k8s
import pytest
import yaml
from kubernetes.client.configuration import Configuration
from prometheus_client.parser import text_string_to_metric_families
from yamllint import linter
from yamllint.config import YamlLintConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from daemon_wait import log_line, wait_for  # noqa: E402  (tests/python/daemon_wait.py)

DAEMON = os.environ.get("TENSORBROKERD", "")
CLI = os.environ.get("TENSORBROKER_CLI", "")
HANG_GUARD = 60  # seconds; only against hangs

ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = ROOT / "deploy" / "kubernetes"
DAEMONSET_FILE = K8S_DIR / "tensorbrokerd-daemonset.yaml"
WORKLOAD_FILE = K8S_DIR / "example-workload-pod.yaml"
GPU_DAEMONSET_FILE = K8S_DIR / "tensorbrokerd-daemonset-gpu.yaml"
GPU_WORKLOAD_FILE = K8S_DIR / "example-gpu-workload-pod.yaml"
PEERS_DAEMONSET_FILE = K8S_DIR / "tensorbrokerd-daemonset-peers.yaml"
PUBLISHERS_DAEMONSET_FILE = K8S_DIR / "tensorbrokerd-daemonset-publishers.yaml"
PEER_NETWORKPOLICY_FILE = K8S_DIR / "peer-networkpolicy.yaml"
# What the schema check covers: Kubernetes' own kinds.
MANIFESTS = [DAEMONSET_FILE, WORKLOAD_FILE, GPU_DAEMONSET_FILE, GPU_WORKLOAD_FILE,
             PEERS_DAEMONSET_FILE, PUBLISHERS_DAEMONSET_FILE, PEER_NETWORKPOLICY_FILE]
# cert-manager's Issuer and Certificate (custom resources: not in python3-kubernetes' models).
PEER_CERTIFICATE_FILE = K8S_DIR / "peer-certificate.yaml"
DOCKERFILE = K8S_DIR / "Dockerfile"
README = K8S_DIR / "README.md"

# Paths inside the image (the .deb's).
DAEMON_IN_IMAGE = "/usr/sbin/tensorbrokerd"
CLI_IN_IMAGE = "/usr/bin/tensorbroker"


def need(value, variable):
    assert value, f"set {variable} (the CMake registration of deploy.kubernetes passes it)"
    return value


# --- Reading the manifests ------------------------------------------------------------------------

def documents(path):
    docs = list(yaml.safe_load_all(Path(path).read_text()))
    assert None not in docs, f"{path}: an empty YAML document"
    return docs


def only(docs, kind):
    found = [d for d in docs if d.get("kind") == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def daemonset():
    return only(documents(DAEMONSET_FILE), "DaemonSet")


def workload():
    return only(documents(WORKLOAD_FILE), "Pod")


def gpu_daemonset():
    return only(documents(GPU_DAEMONSET_FILE), "DaemonSet")


def gpu_workload():
    return only(documents(GPU_WORKLOAD_FILE), "Pod")


def peers_daemonset():
    return only(documents(PEERS_DAEMONSET_FILE), "DaemonSet")


def peers_service():
    return only(documents(PEERS_DAEMONSET_FILE), "Service")


def peers_configmap():
    return only(documents(PEERS_DAEMONSET_FILE), "ConfigMap")


def publishers_daemonset():
    return only(documents(PUBLISHERS_DAEMONSET_FILE), "DaemonSet")


def publishers_service():
    return only(documents(PUBLISHERS_DAEMONSET_FILE), "Service")


def peer_networkpolicy():
    return only(documents(PEER_NETWORKPOLICY_FILE), "NetworkPolicy")


def pod_spec(obj):
    return obj["spec"]["template"]["spec"] if obj["kind"] == "DaemonSet" else obj["spec"]


def container(obj, name):
    found = [c for c in pod_spec(obj)["containers"] if c["name"] == name]
    assert len(found) == 1, f"expected one container {name!r}"
    return found[0]


def argv(c):
    return list(c.get("command", [])) + list(c.get("args", []))


def flag_value(args, flag):
    assert args.count(flag) == 1, f"{flag} should appear once in {args}"
    return args[args.index(flag) + 1]


def host_path(obj, c, path_in_container):
    """The node path that `path_in_container` is, through the container's hostPath mounts."""
    volumes = {v["name"]: v for v in pod_spec(obj).get("volumes", [])}
    best = None
    for mount in c.get("volumeMounts", []):
        mount_path = mount["mountPath"].rstrip("/")
        if path_in_container == mount_path or path_in_container.startswith(mount_path + "/"):
            if best is None or len(mount_path) > len(best[0]):
                best = (mount_path, mount)
    assert best is not None, f"{path_in_container} is on no volume of container {c['name']}"
    mount_path, mount = best
    source = volumes[mount["name"]].get("hostPath")
    assert source is not None, f"volume {mount['name']} is not a hostPath"
    return source["path"].rstrip("/") + path_in_container[len(mount_path):]


def secret_file(obj, c, path_in_container):
    """(Secret name, key) of the file `path_in_container`, through the container's Secret
    mounts: each key of the Secret is a file of its own name (there are no `items`)."""
    volumes = {v["name"]: v for v in pod_spec(obj).get("volumes", [])}
    directory, _, key = path_in_container.rpartition("/")
    mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"].rstrip("/") == directory]
    assert len(mounts) == 1, f"{directory} is not one mount of container {c['name']}"
    source = volumes[mounts[0]["name"]].get("secret")
    assert source is not None, f"volume {mounts[0]['name']} is not a Secret"
    assert "items" not in source, "the Secret's keys should be its file names"
    return source["secretName"], key


def configmap_file(obj, c, path_in_container):
    """(ConfigMap name, key) of the file `path_in_container`, through the container's ConfigMap
    mounts, read-only, each key a file of its own name (no `items`)."""
    volumes = {v["name"]: v for v in pod_spec(obj).get("volumes", [])}
    directory, _, key = path_in_container.rpartition("/")
    mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"].rstrip("/") == directory]
    assert len(mounts) == 1, f"{directory} is not one mount of container {c['name']}"
    assert mounts[0].get("readOnly") is True, f"{directory} is not mounted read-only"
    source = volumes[mounts[0]["name"]].get("configMap")
    assert source is not None, f"volume {mounts[0]['name']} is not a ConfigMap"
    assert "items" not in source, "the ConfigMap's keys should be its file names"
    return source["name"], key


# --- Which pods and nodes the selectors take ------------------------------------------------------

def requirement_holds(labels, requirement):
    """One matchExpressions entry (label or node selector) against a set of labels."""
    key, operator, values = requirement["key"], requirement["operator"], \
        requirement.get("values", [])
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":  # also true without the label
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {operator!r} not handled here")


def selects(selector, labels):
    """Whether a LabelSelector (matchLabels and matchExpressions, ANDed) takes these labels."""
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()) and \
        all(requirement_holds(labels, r) for r in selector.get("matchExpressions") or [])


def runs_on(obj, node_labels):
    """Whether a DaemonSet puts a pod on a node with these labels (no taints): its nodeSelector
    and its required node affinity (nodeSelectorTerms ORed, each term's expressions ANDed)."""
    spec = pod_spec(obj)
    if any(node_labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(all(requirement_holds(node_labels, r) for r in term.get("matchExpressions", []))
               for term in required["nodeSelectorTerms"])


# --- yamllint -------------------------------------------------------------------------------------

YAMLLINT_CONFIG = YamlLintConfig("extends: default\nrules:\n  line-length: {max: 100}\n")


def lint(text):
    return [f"{p.line}:{p.column} {p.level}: {p.desc} ({p.rule})"
            for p in linter.run(text, YAMLLINT_CONFIG)]


# --- The schema check -----------------------------------------------------------------------------

# apiVersion and kind of what deploy/kubernetes/ holds -> the model of that object.
MODELS = {
    ("v1", "Namespace"): k8s.V1Namespace,
    ("v1", "Pod"): k8s.V1Pod,
    ("apps/v1", "DaemonSet"): k8s.V1DaemonSet,
    ("v1", "Service"): k8s.V1Service,
    ("v1", "ConfigMap"): k8s.V1ConfigMap,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.V1NetworkPolicy,
}

# Fields whose values the API server restricts to a set (the models type them as plain str).
ENUMS = {
    (k8s.V1HostPathVolumeSource, "type"): {"", "DirectoryOrCreate", "Directory", "FileOrCreate",
                                           "File", "Socket", "CharDevice", "BlockDevice"},
    (k8s.V1Container, "image_pull_policy"): {"Always", "IfNotPresent", "Never"},
    (k8s.V1Container, "termination_message_policy"): {"File", "FallbackToLogsOnError"},
    (k8s.V1PodSpec, "restart_policy"): {"Always", "OnFailure", "Never"},
    (k8s.V1PodSpec, "dns_policy"): {"ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"},
    (k8s.V1DaemonSetUpdateStrategy, "type"): {"RollingUpdate", "OnDelete"},
    (k8s.V1ContainerPort, "protocol"): {"TCP", "UDP", "SCTP"},
    (k8s.V1SeccompProfile, "type"): {"RuntimeDefault", "Localhost", "Unconfined"},
    (k8s.V1ServiceSpec, "type"): {"ClusterIP", "NodePort", "LoadBalancer", "ExternalName"},
    (k8s.V1ServiceSpec, "session_affinity"): {"None", "ClientIP"},
    (k8s.V1ServicePort, "protocol"): {"TCP", "UDP", "SCTP"},
    (k8s.V1NetworkPolicyPort, "protocol"): {"TCP", "UDP", "SCTP"},
    (k8s.V1LabelSelectorRequirement, "operator"): {"In", "NotIn", "Exists", "DoesNotExist"},
    (k8s.V1NodeSelectorRequirement, "operator"): {"In", "NotIn", "Exists", "DoesNotExist", "Gt",
                                                  "Lt"},
}

# Linux capabilities (capabilities(7)), as Kubernetes spells them: without CAP_.
CAPABILITIES = {
    "ALL", "AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF",
    "CHECKPOINT_RESTORE", "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID",
    "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE", "LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE",
    "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_RAW", "PERFMON", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYSLOG", "SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT", "SYS_MODULE",
    "SYS_NICE", "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME",
    "SYS_TTY_CONFIG", "WAKE_ALARM",
}

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # a Service's name
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
PORT_NAME = re.compile(r"[a-z0-9]([a-z0-9]|-(?=[a-z0-9]))*")
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")  # a ConfigMap's key (a file name when mounted)
QUANTITY = re.compile(r"([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?")
QUANTITY_FACTORS = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
                    "E": 1e18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
                    "Ei": 2**60, "n": 1e-9, "u": 1e-6}


def quantity(text):
    """A Kubernetes quantity as a number ('4608Mi' -> 4831838208); None if malformed."""
    m = QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if m is None or not re.fullmatch(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)", m[1]):
        return None
    suffix = m[2]
    if suffix and suffix[0] in "eE":
        return float(m[1]) * 10 ** int(suffix[1:])
    return float(m[1]) * QUANTITY_FACTORS[suffix]


@functools.lru_cache(maxsize=None)
def required_fields(model):
    """The attributes whose setter refuses None: the model's required fields."""
    probe = model.__new__(model)
    probe.local_vars_configuration = Configuration()  # client_side_validation is on
    required = []
    for attr in model.openapi_types:
        try:
            setattr(probe, attr, None)
        except ValueError:
            required.append(attr)
    return tuple(required)


def join(path, key):
    return f"{path}.{key}" if path else key


def describe(value):
    return f"{type(value).__name__} {value!r}"


def check_value(value, type_name, path, errors):
    if value is None:
        errors.append(f"{path}: null where {type_name} is expected")
        return
    if m := re.fullmatch(r"list\[(.+)\]", type_name):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {describe(value)}")
            return
        for i, item in enumerate(value):
            check_value(item, m[1], f"{path}[{i}]", errors)
        return
    if m := re.fullmatch(r"dict\(str, (.+)\)", type_name):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a mapping, got {describe(value)}")
            return
        for key, item in value.items():
            if not isinstance(key, str):
                errors.append(f"{path}: key {key!r} is not a string")
            check_value(item, m[1], join(path, key), errors)
        return
    primitive = {"str": str, "int": int, "bool": bool, "float": (int, float),
                 "datetime": str, "date": str}.get(type_name)
    if type_name == "object":  # int-or-string and free-form fields
        return
    if primitive is not None:
        if not isinstance(value, primitive) or (type_name != "bool" and isinstance(value, bool)):
            errors.append(f"{path}: expected {type_name}, got {describe(value)}")
        return
    check_model(value, getattr(k8s, type_name), path, errors)


def check_model(data, model, path, errors):
    if not isinstance(data, dict):
        errors.append(f"{path}: expected a {model.__name__} mapping, got {describe(data)}")
        return
    attribute_of = {json: attr for attr, json in model.attribute_map.items()}
    for key, value in data.items():
        attr = attribute_of.get(key)
        if attr is None:
            errors.append(f"{join(path, key)}: unknown field of {model.__name__}")
            continue
        check_value(value, model.openapi_types[attr], join(path, key), errors)
        allowed = ENUMS.get((model, attr))
        if allowed is not None and isinstance(value, str) and value not in allowed:
            errors.append(f"{join(path, key)}: {value!r} is not one of {sorted(allowed)}")
    for attr in required_fields(model):
        if model.attribute_map[attr] not in data:
            errors.append(f"{path or '(top)'}: required field {model.attribute_map[attr]!r} of "
                          f"{model.__name__} missing")


def check_keys(mapping, path, errors, label_values):
    """Qualified-name keys (labels, annotations, selectors); label values if `label_values`."""
    for key, value in mapping.items():
        prefix, _, label = key.rpartition("/")
        if (prefix and not DNS_SUBDOMAIN.fullmatch(prefix)) or len(label) > 63 or \
                not LABEL_NAME.fullmatch(label):
            errors.append(f"{path}: key {key!r} is not a qualified name")
        if label_values and isinstance(value, str) and value and \
                (len(value) > 63 or not LABEL_NAME.fullmatch(value)):
            errors.append(f"{path}.{key}: {value!r} is not a valid label value")


def check_metadata(meta, path, name_pattern, errors):
    """name_pattern None: no name (a pod template's metadata)."""
    name = meta.get("name")
    if name_pattern is not None and (not isinstance(name, str) or len(name) > 253 or
                                     not name_pattern.fullmatch(name)):
        errors.append(f"{path}.name: {name!r} is not a valid name")
    for field in ("labels", "annotations"):
        check_keys(meta.get(field) or {}, f"{path}.{field}", errors, field == "labels")


def check_requirements(requirements, path, errors):
    """matchExpressions (label or node selector): qualified keys, label values, and the values
    each operator needs: some for In and NotIn, none for Exists and DoesNotExist, one integer for
    Gt and Lt."""
    for i, requirement in enumerate(requirements):
        where = f"{path}[{i}]"
        check_keys({requirement["key"]: ""}, where, errors, label_values=False)
        operator, values = requirement["operator"], requirement.get("values") or []
        if operator in ("In", "NotIn") and not values:
            errors.append(f"{where}.values: required for {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            errors.append(f"{where}.values: must be empty for {operator}")
        if operator in ("Gt", "Lt") and (len(values) != 1 or not values[0].isdigit()):
            errors.append(f"{where}.values: one integer for {operator}")
        for value in values:
            if value and (len(value) > 63 or not LABEL_NAME.fullmatch(value)):
                errors.append(f"{where}.values: {value!r} is not a valid label value")


def check_pod_spec(spec, path, errors):
    check_keys(spec.get("nodeSelector") or {}, f"{path}.nodeSelector", errors, label_values=True)
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for i, term in enumerate(required.get("nodeSelectorTerms") or []):
        check_requirements(term.get("matchExpressions") or [],
                           f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuring"
                           f"Execution.nodeSelectorTerms[{i}].matchExpressions", errors)
    volumes = spec.get("volumes", [])
    volume_names = [v.get("name") for v in volumes]
    for i, volume in enumerate(volumes):
        if not DNS_LABEL.fullmatch(str(volume.get("name"))):
            errors.append(f"{path}.volumes[{i}].name: {volume.get('name')!r} is not a DNS label")
        if volume_names.count(volume.get("name")) > 1:
            errors.append(f"{path}.volumes[{i}].name: {volume.get('name')!r} is not unique")
        sources = sorted(k for k in volume if k != "name")
        if len(sources) != 1:
            errors.append(f"{path}.volumes[{i}]: has {len(sources)} sources {sources}, needs "
                          f"exactly one")
        host = volume.get("hostPath")
        if isinstance(host, dict) and not str(host.get("path", "")).startswith("/"):
            errors.append(f"{path}.volumes[{i}].hostPath.path: must be absolute")
        secret = volume.get("secret")
        if isinstance(secret, dict):
            if not DNS_SUBDOMAIN.fullmatch(str(secret.get("secretName"))):
                errors.append(f"{path}.volumes[{i}].secret.secretName: "
                              f"{secret.get('secretName')!r} is not a valid name")
            mode = secret.get("defaultMode", 0o644)
            if not 0 <= mode <= 0o777:
                errors.append(f"{path}.volumes[{i}].secret.defaultMode: {mode:#o} is not a "
                              f"file mode (0 to 0o777)")
        config_map = volume.get("configMap")
        if isinstance(config_map, dict):
            if not DNS_SUBDOMAIN.fullmatch(str(config_map.get("name"))):
                errors.append(f"{path}.volumes[{i}].configMap.name: "
                              f"{config_map.get('name')!r} is not a valid name")
            mode = config_map.get("defaultMode", 0o644)
            if not 0 <= mode <= 0o777:
                errors.append(f"{path}.volumes[{i}].configMap.defaultMode: {mode:#o} is not a "
                              f"file mode (0 to 0o777)")
    all_names = [c.get("name") for group in ("initContainers", "containers")
                 for c in spec.get(group, [])]
    for group in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(group, [])):
            where = f"{path}.{group}[{i}]"
            if not DNS_LABEL.fullmatch(str(c.get("name"))) or all_names.count(c.get("name")) > 1:
                errors.append(f"{where}.name: {c.get('name')!r} is not a unique DNS label")
            mount_paths = []
            for j, mount in enumerate(c.get("volumeMounts", [])):
                if mount.get("name") not in volume_names:
                    errors.append(f"{where}.volumeMounts[{j}].name: no volume "
                                  f"{mount.get('name')!r}")
                if not str(mount.get("mountPath", "")).startswith("/"):
                    errors.append(f"{where}.volumeMounts[{j}].mountPath: must be absolute")
                mount_paths.append(mount.get("mountPath"))
            if len(set(mount_paths)) != len(mount_paths):
                errors.append(f"{where}.volumeMounts: a mountPath is used twice")
            for j, port in enumerate(c.get("ports", [])):
                name = port.get("name")
                if name is not None and (len(name) > 15 or not PORT_NAME.fullmatch(name) or
                                         not re.search("[a-z]", name)):
                    errors.append(f"{where}.ports[{j}].name: {name!r} is not an IANA_SVC_NAME")
                if not 0 < port.get("containerPort", 0) < 65536:
                    errors.append(f"{where}.ports[{j}].containerPort: out of range")
            for j, env in enumerate(c.get("env", [])):
                if not ENV_NAME.fullmatch(str(env.get("name"))):
                    errors.append(f"{where}.env[{j}].name: {env.get('name')!r} is not valid")
            resources = c.get("resources", {})
            for kind in ("requests", "limits"):
                for resource, value in (resources.get(kind) or {}).items():
                    if quantity(value) is None:
                        errors.append(f"{where}.resources.{kind}.{resource}: {value!r} is not "
                                      f"a quantity")
            for resource, request in (resources.get("requests") or {}).items():
                limit = (resources.get("limits") or {}).get(resource)
                if limit is not None and None not in (quantity(request), quantity(limit)) and \
                        quantity(request) > quantity(limit):
                    errors.append(f"{where}.resources.requests.{resource}: more than its limit")
            for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
                probe = c.get(probe_name)
                if isinstance(probe, dict):
                    handlers = [h for h in ("exec", "httpGet", "tcpSocket") if h in probe]
                    if len(handlers) != 1:
                        errors.append(f"{where}.{probe_name}: needs exactly one handler, has "
                                      f"{handlers}")
            caps = (c.get("securityContext") or {}).get("capabilities") or {}
            for kind in ("add", "drop"):
                for cap in caps.get(kind) or []:
                    if cap not in CAPABILITIES:
                        errors.append(f"{where}.securityContext.capabilities.{kind}: unknown "
                                      f"capability {cap!r}")


def check_port_number_or_name(value, path, errors):
    """A port given as a number (1-65535) or as the IANA_SVC_NAME of a container port."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        errors.append(f"{path}: expected a port number or name, got {describe(value)}")
    elif isinstance(value, int) and not 0 < value < 65536:
        errors.append(f"{path}: {value} is out of range")
    elif isinstance(value, str) and (len(value) > 15 or not PORT_NAME.fullmatch(value) or
                                     not re.search("[a-z]", value)):
        errors.append(f"{path}: {value!r} is not an IANA_SVC_NAME")


def check_service(spec, errors):
    ports = spec.get("ports", [])
    names = [port.get("name") for port in ports]
    for j, port in enumerate(ports):
        where = f"spec.ports[{j}]"
        name = port.get("name")
        if name is None and len(ports) > 1:
            errors.append(f"{where}.name: required when there are several ports")
        if name is not None:
            check_port_number_or_name(name, f"{where}.name", errors)
            if names.count(name) > 1:
                errors.append(f"{where}.name: {name!r} is not unique")
        if not 0 < port["port"] < 65536:  # an int: the schema says so
            errors.append(f"{where}.port: {port['port']} is out of range")
        if "targetPort" in port:  # int or string
            check_port_number_or_name(port["targetPort"], f"{where}.targetPort", errors)
    check_keys(spec.get("selector") or {}, "spec.selector", errors, label_values=True)


def check_label_selector(selector, path, errors):
    check_keys(selector.get("matchLabels") or {}, f"{path}.matchLabels", errors,
               label_values=True)
    check_requirements(selector.get("matchExpressions") or [], f"{path}.matchExpressions", errors)


def check_network_policy(spec, errors):
    check_label_selector(spec["podSelector"], "spec.podSelector", errors)
    for policy_type in spec.get("policyTypes", []):
        if policy_type not in ("Ingress", "Egress"):
            errors.append(f"spec.policyTypes: {policy_type!r} is not one of "
                          f"['Egress', 'Ingress']")
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction, [])):
            for j, port in enumerate(rule.get("ports", [])):
                if "port" in port:  # int or string
                    check_port_number_or_name(port["port"],
                                              f"spec.{direction}[{i}].ports[{j}].port", errors)
            for j, peer in enumerate(rule.get(peers, [])):
                for selector in ("podSelector", "namespaceSelector"):
                    if isinstance(peer.get(selector), dict):
                        check_label_selector(peer[selector],
                                             f"spec.{direction}[{i}].{peers}[{j}].{selector}",
                                             errors)


def check_config_map(doc, errors):
    data, binary = doc.get("data") or {}, doc.get("binaryData") or {}
    for field, mapping in (("data", data), ("binaryData", binary)):
        for key in mapping:
            if len(key) > 253 or not CONFIG_KEY.fullmatch(key) or key in (".", ".."):
                errors.append(f"{field}: key {key!r} is not a valid ConfigMap key")
    for key in sorted(set(data) & set(binary)):
        errors.append(f"binaryData: key {key!r} is in data too")


def validate(doc):
    """Every problem the checker finds in one manifest document (an empty list: none)."""
    if not isinstance(doc, dict):
        return [f"(top): expected a mapping, got {describe(doc)}"]
    model = MODELS.get((doc.get("apiVersion"), doc.get("kind")))
    if model is None:
        return [f"(top): unknown apiVersion/kind {doc.get('apiVersion')}/{doc.get('kind')} "
                f"(known: {sorted('/'.join(k) for k in MODELS)})"]
    errors = []
    check_model(doc, model, "", errors)
    if errors:  # the checks below assume the shapes the schema promises
        return errors
    if "metadata" not in doc:
        return ["(top): metadata missing"]
    check_metadata(doc["metadata"], "metadata",
                   {"Namespace": DNS_LABEL, "Service": DNS_1035_LABEL}.get(doc["kind"],
                                                                          DNS_SUBDOMAIN), errors)
    if doc["kind"] == "Service":
        check_service(doc["spec"], errors)
    if doc["kind"] == "NetworkPolicy":
        check_network_policy(doc["spec"], errors)
    if doc["kind"] == "ConfigMap":
        check_config_map(doc, errors)
    if doc["kind"] == "Pod":
        check_pod_spec(doc["spec"], "spec", errors)
    if doc["kind"] == "DaemonSet":
        template = doc["spec"]["template"]
        labels = (template.get("metadata") or {}).get("labels") or {}
        selector = doc["spec"]["selector"].get("matchLabels") or {}
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            errors.append("spec.selector.matchLabels: does not match spec.template.metadata.labels")
        check_metadata(template.get("metadata") or {}, "spec.template.metadata", None, errors)
        check_pod_spec(template["spec"], "spec.template.spec", errors)
    return errors


# --- cert-manager's Issuer and Certificate --------------------------------------------------------

# cert-manager.io/v1, as cert-manager's CRDs define them (deploy/crds/cert-manager.io_issuers.yaml
# and cert-manager.io_certificates.yaml of cert-manager 1.18 or later; its Go types in
# pkg/apis/certmanager/v1): every field of `spec`, with its type: "str", "int", "bool", "duration"
# (a string Go's time.ParseDuration reads), a set (a string out of it), a list of one type, a
# mapping of fields (nested), or "object"/"array" (a mapping/list this check does not look into,
# e.g. ACME's). A name ending in "!" is required.
CERT_MANAGER_USAGES = {
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
    "server auth", "client auth", "code signing", "email protection", "s/mime",
    "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
    "microsoft sgc", "netscape sgc"}
CERT_MANAGER_SPECS = {
    "Issuer": {
        "acme": "object", "vault": "object", "venafi": "object",
        "ca": {"secretName!": "str", "crlDistributionPoints": ["str"], "ocspServers": ["str"],
               "issuingCertificateURLs": ["str"]},
        "selfSigned": {"crlDistributionPoints": ["str"]},
    },
    "Certificate": {
        "secretName!": "str",
        "issuerRef!": {"name!": "str", "kind": "str", "group": "str"},
        "commonName": "str", "literalSubject": "str", "subject": "object",
        "dnsNames": ["str"], "ipAddresses": ["str"], "uris": ["str"], "emailAddresses": ["str"],
        "otherNames": "array", "duration": "duration", "renewBefore": "duration",
        "renewBeforePercentage": "int", "isCA": "bool", "usages": [CERT_MANAGER_USAGES],
        "privateKey": {"algorithm": {"RSA", "ECDSA", "Ed25519"}, "encoding": {"PKCS1", "PKCS8"},
                       "rotationPolicy": {"Never", "Always"}, "size": "int"},
        "signatureAlgorithm": {"SHA256WithRSA", "SHA384WithRSA", "SHA512WithRSA",
                               "ECDSAWithSHA256", "ECDSAWithSHA384", "ECDSAWithSHA512",
                               "PureEd25519"},
        "encodeUsagesInRequest": "bool", "revisionHistoryLimit": "int",
        "secretTemplate": "object", "keystores": "object", "additionalOutputFormats": "array",
        "nameConstraints": "object",
    },
}
# The sizes cert-manager accepts for each key algorithm (Ed25519 has no size).
KEY_SIZES = {"RSA": {2048, 4096, 8192}, "ECDSA": {256, 384, 521}}
GO_DURATION = re.compile(r"(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+")
GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
DNS_NAME = re.compile(r"(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def go_duration(text):
    """Seconds in a Go duration ("8760h", "1h30m"); None if time.ParseDuration would refuse it
    (cert-manager's durations have no sign)."""
    if not isinstance(text, str) or not GO_DURATION.fullmatch(text):
        return None
    return sum(float(n) * GO_UNITS[unit]
               for n, _, unit in re.findall(r"([0-9]*(\.[0-9]*)?)(ns|us|µs|ms|s|m|h)", text))


def check_fields(value, schema, path, errors):
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a mapping, got {describe(value)}")
            return
        known = {name.rstrip("!"): name for name in schema}
        for key, item in value.items():
            if key not in known:
                errors.append(f"{join(path, key)}: unknown field")
            else:
                check_fields(item, schema[known[key]], join(path, key), errors)
        for name in schema:
            if name.endswith("!") and name[:-1] not in value:
                errors.append(f"{path}: required field {name[:-1]!r} missing")
    elif isinstance(schema, list):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {describe(value)}")
            return
        for i, item in enumerate(value):
            check_fields(item, schema[0], f"{path}[{i}]", errors)
    elif isinstance(schema, set):
        if value not in schema:
            errors.append(f"{path}: {value!r} is not one of {sorted(schema)}")
    elif schema == "duration":
        if go_duration(value) is None:
            errors.append(f"{path}: {value!r} is not a Go duration")
    elif schema in ("object", "array"):
        if not isinstance(value, dict if schema == "object" else list):
            errors.append(f"{path}: expected a{' mapping' if schema == 'object' else ' list'}, "
                          f"got {describe(value)}")
    else:
        python_type = {"str": str, "int": int, "bool": bool}[schema]
        if not isinstance(value, python_type) or (schema != "bool" and isinstance(value, bool)):
            errors.append(f"{path}: expected {schema}, got {describe(value)}")


def validate_cert_manager(doc):
    """Every problem found in one cert-manager Issuer or Certificate (an empty list: none): its
    fields against the CRD's schema, then the rules of its webhook and its CRD's field
    descriptions that matter here."""
    if not isinstance(doc, dict):
        return [f"(top): expected a mapping, got {describe(doc)}"]
    spec_schema = CERT_MANAGER_SPECS.get(doc.get("kind"))
    if doc.get("apiVersion") != "cert-manager.io/v1" or spec_schema is None:
        return [f"(top): unknown apiVersion/kind {doc.get('apiVersion')}/{doc.get('kind')} "
                f"(known: {sorted('cert-manager.io/v1/' + k for k in CERT_MANAGER_SPECS)})"]
    errors = []
    check_fields(doc, {"apiVersion!": "str", "kind!": "str", "metadata!": "object",
                       "spec!": spec_schema}, "", errors)
    if "metadata" in doc:
        check_model(doc["metadata"], k8s.V1ObjectMeta, "metadata", errors)
    if errors:  # the checks below assume the shapes the schema promises
        return errors
    check_metadata(doc["metadata"], "metadata", DNS_SUBDOMAIN, errors)
    spec = doc["spec"]
    if doc["kind"] == "Issuer":
        kinds = sorted(k for k in spec)
        if len(kinds) != 1:
            errors.append(f"spec: needs exactly one issuer type, has {kinds}")
        return errors
    if not DNS_SUBDOMAIN.fullmatch(spec["secretName"]):
        errors.append(f"spec.secretName: {spec['secretName']!r} is not a valid name")
    if len(spec.get("commonName", "")) > 64:
        errors.append("spec.commonName: longer than 64 characters")
    if "literalSubject" in spec and ("commonName" in spec or "subject" in spec):
        errors.append("spec.literalSubject: cannot be set with commonName or subject")
    if "renewBefore" in spec and "renewBeforePercentage" in spec:
        errors.append("spec.renewBefore: cannot be set with renewBeforePercentage")
    if not spec.get("commonName") and not spec.get("dnsNames") and \
            not spec.get("literalSubject") and not spec.get("ipAddresses") and \
            not spec.get("uris") and not spec.get("emailAddresses"):
        errors.append("spec: needs a name (commonName, dnsNames, ...)")
    for i, name in enumerate(spec.get("dnsNames", [])):
        if len(name) > 253 or not DNS_NAME.fullmatch(name):
            errors.append(f"spec.dnsNames[{i}]: {name!r} is not a DNS name")
    duration = go_duration(spec.get("duration", "2160h"))  # cert-manager's default: 90 days
    if duration < 3600:
        errors.append(f"spec.duration: {spec['duration']} is less than 1h")
    if "renewBefore" in spec:
        renew_before = go_duration(spec["renewBefore"])
        if renew_before < 300:
            errors.append(f"spec.renewBefore: {spec['renewBefore']} is less than 5m")
        if renew_before >= duration:
            errors.append(f"spec.renewBefore: {spec['renewBefore']} is not less than the "
                          f"duration")
    key = spec.get("privateKey", {})
    algorithm = key.get("algorithm", "RSA")
    if "size" in key and algorithm in KEY_SIZES and key["size"] not in KEY_SIZES[algorithm]:
        errors.append(f"spec.privateKey.size: {key['size']} is not one of "
                      f"{sorted(KEY_SIZES[algorithm])} for {algorithm}")
    return errors


# --- The manifests: files, lint, schema -----------------------------------------------------------

def test_the_directory_holds_what_the_readme_describes():
    names = sorted(p.name for p in K8S_DIR.iterdir())
    assert names == [
        "Dockerfile", "README.md", "example-gpu-workload-pod.yaml", "example-workload-pod.yaml",
        "peer-certificate.yaml", "peer-networkpolicy.yaml", "tensorbrokerd-daemonset-gpu.yaml",
        "tensorbrokerd-daemonset-peers.yaml", "tensorbrokerd-daemonset-publishers.yaml",
        "tensorbrokerd-daemonset.yaml"]
    assert [d["kind"] for d in documents(DAEMONSET_FILE)] == ["Namespace", "DaemonSet"]
    assert [d["kind"] for d in documents(WORKLOAD_FILE)] == ["Pod"]
    assert [d["kind"] for d in documents(GPU_DAEMONSET_FILE)] == ["Namespace", "DaemonSet"]
    assert [d["kind"] for d in documents(GPU_WORKLOAD_FILE)] == ["Pod"]
    assert [d["kind"] for d in documents(PEERS_DAEMONSET_FILE)] == [
        "Namespace", "ConfigMap", "DaemonSet", "Service"]
    assert [d["kind"] for d in documents(PUBLISHERS_DAEMONSET_FILE)] == [
        "Namespace", "DaemonSet", "Service"]
    assert [d["kind"] for d in documents(PEER_CERTIFICATE_FILE)] == [
        "Issuer", "Certificate", "Issuer", "Certificate"]
    assert [d["kind"] for d in documents(PEER_NETWORKPOLICY_FILE)] == ["NetworkPolicy"]
    # The README's table has a row for each file.
    rows = re.findall(r"^\| `([^`]+)` \|", README.read_text(), re.M)
    assert sorted(rows) == [n for n in names if n != "README.md"]


@pytest.mark.parametrize("path", MANIFESTS + [PEER_CERTIFICATE_FILE], ids=lambda p: p.name)
def test_yamllint_finds_nothing(path):
    assert lint(path.read_text()) == []


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_document_passes_the_schema_check(path):
    for doc in documents(path):
        assert validate(doc) == [], f"{doc.get('kind')} {doc.get('metadata', {}).get('name')}"


def test_yamllint_rejects_a_duplicate_key_the_yaml_loader_would_hide():
    text = "---\nspec:\n  restartPolicy: Never\n  restartPolicy: Always\n"
    assert yaml.safe_load(text) == {"spec": {"restartPolicy": "Always"}}  # silently the last one
    assert lint(text) == ['4:3 error: duplication of key "restartPolicy" in mapping '
                          '(key-duplicates)']


def broken(edit):
    """The DaemonSet with one fault put in by `edit(doc, pod_spec, container)`."""
    doc = daemonset()
    spec = doc["spec"]["template"]["spec"]
    edit(doc, spec, spec["containers"][0])
    return doc


C0 = "spec.template.spec.containers[0]"


@pytest.mark.parametrize("edit, expected", [
    (lambda d, s, c: c.__setitem__("volumeMount", c.pop("volumeMounts")),
     [f"{C0}.volumeMount: unknown field of V1Container"]),
    (lambda d, s, c: s.__setitem__("terminationGracePeriodSeconds", "30"),
     ["spec.template.spec.terminationGracePeriodSeconds: expected int, got str '30'"]),
    (lambda d, s, c: c["securityContext"].__setitem__("runAsNonRoot", "true"),
     [f"{C0}.securityContext.runAsNonRoot: expected bool, got str 'true'"]),
    (lambda d, s, c: c["ports"][0].__setitem__("containerPort", True),
     [f"{C0}.ports[0].containerPort: expected int, got bool True"]),
    (lambda d, s, c: c.__setitem__("args", "--socket /run/tensorbroker/broker.sock"),
     [f"{C0}.args: expected a list, got str '--socket /run/tensorbroker/broker.sock'"]),
    (lambda d, s, c: c["readinessProbe"].__setitem__("exec", ["tensorbroker", "health"]),
     [f"{C0}.readinessProbe.exec: expected a V1ExecAction mapping, got list "
      "['tensorbroker', 'health']"]),
    (lambda d, s, c: c["volumeMounts"][0].pop("mountPath"),
     [f"{C0}.volumeMounts[0]: required field 'mountPath' of V1VolumeMount missing"]),
    (lambda d, s, c: c.pop("name"),
     [f"{C0}: required field 'name' of V1Container missing"]),
    (lambda d, s, c: s["volumes"][0]["hostPath"].__setitem__("type", "DirectoryOrCreat"),
     ["spec.template.spec.volumes[0].hostPath.type: 'DirectoryOrCreat' is not one of ['', "
      "'BlockDevice', 'CharDevice', 'Directory', 'DirectoryOrCreate', 'File', 'FileOrCreate', "
      "'Socket']"]),
    (lambda d, s, c: d.__setitem__("apiVersion", "extensions/v1beta1"),
     ["(top): unknown apiVersion/kind extensions/v1beta1/DaemonSet (known: ['apps/v1/DaemonSet', "
      "'networking.k8s.io/v1/NetworkPolicy', 'v1/ConfigMap', 'v1/Namespace', 'v1/Pod', "
      "'v1/Service'])"]),
    (lambda d, s, c: c["resources"]["limits"].__setitem__("memory", "4.5 GiB"),
     [f"{C0}.resources.limits.memory: '4.5 GiB' is not a quantity"]),
    (lambda d, s, c: c["resources"]["requests"].__setitem__("cpu", "4"),
     [f"{C0}.resources.requests.cpu: more than its limit"]),
    (lambda d, s, c: c["volumeMounts"][0].__setitem__("name", "socketdir"),
     [f"{C0}.volumeMounts[0].name: no volume 'socketdir'"]),
    (lambda d, s, c: c["ports"][0].__setitem__("name", "prometheus-metrics"),
     [f"{C0}.ports[0].name: 'prometheus-metrics' is not an IANA_SVC_NAME"]),
    (lambda d, s, c: c["securityContext"]["capabilities"].__setitem__("drop", ["AL"]),
     [f"{C0}.securityContext.capabilities.drop: unknown capability 'AL'"]),
    (lambda d, s, c: d["spec"]["selector"]["matchLabels"].__setitem__(
        "app.kubernetes.io/name", "broker"),
     ["spec.selector.matchLabels: does not match spec.template.metadata.labels"]),
    (lambda d, s, c: d["metadata"].__setitem__("name", "tensorbrokerd_"),
     ["metadata.name: 'tensorbrokerd_' is not a valid name"]),
], ids=["misspelled-field", "string-for-int", "string-for-bool", "bool-for-int",
        "string-for-list", "list-for-object", "missing-mountPath", "missing-container-name",
        "bad-enum", "old-apiVersion", "bad-quantity", "request-over-limit", "dangling-mount",
        "long-port-name", "bad-capability", "selector-mismatch", "bad-name"])
def test_the_schema_check_rejects_each_fault_exactly(edit, expected):
    assert validate(daemonset()) == []  # the fault below is the only one
    assert validate(broken(edit)) == expected


def broken_peers(edit):
    """The peers file's DaemonSet, Service and ConfigMap, the NetworkPolicy and the publishers'
    DaemonSet, one fault put in by `edit(daemonset, service, networkpolicy, configmap,
    publishers)`: the problems the checker finds in the five."""
    docs = (peers_daemonset(), peers_service(), peer_networkpolicy(), peers_configmap(),
            publishers_daemonset())
    edit(*docs)
    return [problem for doc in docs for problem in validate(doc)]


V1 = "spec.template.spec.volumes[1]"
V2 = "spec.template.spec.volumes[2]"
NODE_TERM = ("spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuring"
             "Execution.nodeSelectorTerms[0].matchExpressions[0]")


def node_term(ds):
    affinity = pod_spec(ds)["affinity"]["nodeAffinity"]
    return affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"][0]


@pytest.mark.parametrize("edit, expected", [
    (lambda d, s, p, c, q: pod_spec(d)["volumes"][1]["secret"].__setitem__("defaultMode", 0o1440),
     [f"{V1}.secret.defaultMode: 0o1440 is not a file mode (0 to 0o777)"]),
    (lambda d, s, p, c, q: pod_spec(d)["volumes"][1]["secret"].__setitem__("secretName",
                                                                            "peer_tls"),
     [f"{V1}.secret.secretName: 'peer_tls' is not a valid name"]),
    (lambda d, s, p, c, q: pod_spec(d)["volumes"][1].__setitem__("hostPath", {"path": "/etc/tls"}),
     [f"{V1}: has 2 sources ['hostPath', 'secret'], needs exactly one"]),
    (lambda d, s, p, c, q: s["metadata"].__setitem__("name", "7070-peers"),
     ["metadata.name: '7070-peers' is not a valid name"]),
    (lambda d, s, p, c, q: s["spec"]["ports"][0].__setitem__("targetPort", "peers_tls"),
     ["spec.ports[0].targetPort: 'peers_tls' is not an IANA_SVC_NAME"]),
    (lambda d, s, p, c, q: s["spec"]["ports"][0].__setitem__("port", 70700),
     ["spec.ports[0].port: 70700 is out of range"]),
    (lambda d, s, p, c, q: s["spec"]["ports"][0].__setitem__("protocol", "tcp"),
     ["spec.ports[0].protocol: 'tcp' is not one of ['SCTP', 'TCP', 'UDP']"]),
    (lambda d, s, p, c, q: s["spec"]["selector"].__setitem__("app.kubernetes.io/component",
                                                             "broker/"),
     ["spec.selector.app.kubernetes.io/component: 'broker/' is not a valid label value"]),
    (lambda d, s, p, c, q: p["spec"].__setitem__("policyTypes", ["Ingres"]),
     ["spec.policyTypes: 'Ingres' is not one of ['Egress', 'Ingress']"]),
    (lambda d, s, p, c, q: p["spec"]["ingress"][0]["ports"][0].__setitem__("port",
                                                                          "peers-for-brokers"),
     ["spec.ingress[0].ports[0].port: 'peers-for-brokers' is not an IANA_SVC_NAME"]),
    (lambda d, s, p, c, q: p["spec"]["ingress"][0].__setitem__("from", {"podSelector": {}}),
     ["spec.ingress[0].from: expected a list, got dict {'podSelector': {}}"]),
    (lambda d, s, p, c, q: p["spec"]["podSelector"]["matchExpressions"][1].__setitem__(
        "operator", "in"),
     ["spec.podSelector.matchExpressions[1].operator: 'in' is not one of ['DoesNotExist', "
      "'Exists', 'In', 'NotIn']"]),
    (lambda d, s, p, c, q: p["spec"]["ingress"][0]["from"][0]["podSelector"]["matchExpressions"][
        1].__setitem__("values", []),
     ["spec.ingress[0].from[0].podSelector.matchExpressions[1].values: required for In"]),
    (lambda d, s, p, c, q: node_term(d).__setitem__("operator", "NotEqual"),
     [f"{NODE_TERM}.operator: 'NotEqual' is not one of ['DoesNotExist', 'Exists', 'Gt', 'In', "
      "'Lt', 'NotIn']"]),
    (lambda d, s, p, c, q: node_term(d).__setitem__("values", True),
     [f"{NODE_TERM}.values: expected a list, got bool True"]),
    (lambda d, s, p, c, q: node_term(d).__setitem__("operator", "DoesNotExist"),
     [f"{NODE_TERM}.values: must be empty for DoesNotExist"]),
    (lambda d, s, p, c, q: node_term(d).__setitem__("key", "tensorbroker.io/publisher?"),
     [f"{NODE_TERM}: key 'tensorbroker.io/publisher?' is not a qualified name"]),
    (lambda d, s, p, c, q: pod_spec(q)["nodeSelector"].__setitem__("tensorbroker.io/publisher",
                                                                   True),
     ["spec.template.spec.nodeSelector.tensorbroker.io/publisher: expected str, got bool True"]),
    (lambda d, s, p, c, q: pod_spec(q)["nodeSelector"].__setitem__("tensorbroker.io/publisher",
                                                                   "yes please"),
     ["spec.template.spec.nodeSelector.tensorbroker.io/publisher: 'yes please' is not a valid "
      "label value"]),
    (lambda d, s, p, c, q: pod_spec(d)["volumes"][2]["configMap"].__setitem__(
        "name", "tensorbrokerd_peers_config"),
     [f"{V2}.configMap.name: 'tensorbrokerd_peers_config' is not a valid name"]),
    (lambda d, s, p, c, q: c["data"].__setitem__("tensorbrokerd/conf", "log-level = info\n"),
     ["data: key 'tensorbrokerd/conf' is not a valid ConfigMap key"]),
    (lambda d, s, p, c, q: c.__setitem__("data", "remote[policy/] = publishers:7070"),
     ["data: expected a mapping, got str 'remote[policy/] = publishers:7070'"]),
], ids=["bad-defaultMode", "bad-secretName", "two-sources", "bad-service-name", "bad-targetPort",
        "port-out-of-range", "lowercase-protocol", "bad-selector-value", "bad-policyType",
        "long-policy-port-name", "mapping-for-list", "lowercase-selector-operator",
        "in-without-values", "bad-node-operator", "bool-for-values", "values-with-doesnotexist",
        "bad-node-label-key", "bool-node-selector", "bad-node-selector-value",
        "bad-configmap-name", "bad-configmap-key", "string-for-data"])
def test_the_schema_check_rejects_each_fault_of_the_peer_manifests_exactly(edit, expected):
    assert broken_peers(lambda *docs: None) == []  # the fault below is the only one
    assert broken_peers(edit) == expected


def broken_certificates(edit):
    """peer-certificate.yaml with one fault put in by `edit(docs)`: what the checker finds."""
    docs = documents(PEER_CERTIFICATE_FILE)
    edit(docs)
    return [problem for doc in docs for problem in validate_cert_manager(doc)]


@pytest.mark.parametrize("edit, expected", [
    (lambda docs: docs[3]["spec"].__setitem__("dnsName", docs[3]["spec"].pop("dnsNames")),
     ["spec.dnsName: unknown field"]),
    (lambda docs: docs[3]["spec"]["usages"].__setitem__(1, "serverAuth"),
     [f"spec.usages[1]: 'serverAuth' is not one of {sorted(CERT_MANAGER_USAGES)}"]),
    (lambda docs: docs[3]["spec"].pop("secretName"),
     ["spec: required field 'secretName' missing"]),
    (lambda docs: docs[3]["spec"]["issuerRef"].pop("name"),
     ["spec.issuerRef: required field 'name' missing"]),
    (lambda docs: docs[1]["spec"].__setitem__("isCA", "true"),
     ["spec.isCA: expected bool, got str 'true'"]),
    (lambda docs: docs[3]["spec"].__setitem__("duration", "1y"),
     ["spec.duration: '1y' is not a Go duration"]),
    (lambda docs: docs[3]["spec"].__setitem__("renewBefore", "8760h"),
     ["spec.renewBefore: 8760h is not less than the duration"]),
    (lambda docs: docs[3]["spec"]["privateKey"].__setitem__("size", 2048),
     ["spec.privateKey.size: 2048 is not one of [256, 384, 521] for ECDSA"]),
    (lambda docs: docs[3]["spec"]["dnsNames"].append("tensorbroker_peers.tensorbroker.svc"),
     ["spec.dnsNames[4]: 'tensorbroker_peers.tensorbroker.svc' is not a DNS name"]),
    (lambda docs: docs[2]["spec"].__setitem__("selfSigned", {}),
     ["spec: needs exactly one issuer type, has ['ca', 'selfSigned']"]),
    (lambda docs: docs[0].__setitem__("apiVersion", "cert-manager.io/v1alpha2"),
     ["(top): unknown apiVersion/kind cert-manager.io/v1alpha2/Issuer (known: "
      "['cert-manager.io/v1/Certificate', 'cert-manager.io/v1/Issuer'])"]),
    (lambda docs: docs[0]["metadata"].__setitem__("labelz", {}),
     ["metadata.labelz: unknown field of V1ObjectMeta"]),
], ids=["misspelled-field", "bad-usage", "missing-secretName", "missing-issuer-name",
        "string-for-bool", "bad-duration", "renewal-after-the-end", "bad-key-size", "bad-dns-name",
        "two-issuer-types", "old-apiVersion", "bad-metadata"])
def test_the_cert_manager_check_rejects_each_fault_exactly(edit, expected):
    assert broken_certificates(lambda docs: None) == []  # the fault below is the only one
    assert broken_certificates(edit) == expected


def test_the_schema_check_reports_every_fault_of_a_broken_manifest():
    def edit(doc, spec, c):
        c["volumeMount"] = c.pop("volumeMounts")
        spec["terminationGracePeriodSeconds"] = "30"
    assert validate(broken(edit)) == [
        "spec.template.spec.terminationGracePeriodSeconds: expected int, got str '30'",
        f"{C0}.volumeMount: unknown field of V1Container",
    ]


# --- The project's invariants ---------------------------------------------------------------------

SOCKET_DIR = "/run/tensorbroker"  # on the node


def test_broker_and_workload_share_the_socket_directory():
    ds, pod = daemonset(), workload()
    broker, example = container(ds, "tensorbrokerd"), container(pod, "example")
    socket_path = flag_value(argv(broker), "--socket")
    env = {e["name"]: e["value"] for e in example["env"]}
    # Both sockets, the gRPC one and the local channel beside it ("<socket>.fd", the only way
    # the broker's memory reaches a pod), are the same node files for the two pods.
    for suffix in ("", ".fd"):
        assert host_path(ds, broker, socket_path + suffix) == \
            f"{SOCKET_DIR}/broker.sock{suffix}"
        assert host_path(pod, example, env["TENSORBROKER_SOCKET"] + suffix) == \
            f"{SOCKET_DIR}/broker.sock{suffix}"
    # The broker creates the sockets and its lock file: its mount is writable, its directory
    # made. The workload's is read-only (connecting checks the socket's mode, not the mount's).
    assert pod_spec(ds)["volumes"] == [{"name": "socket-dir", "hostPath": {
        "path": SOCKET_DIR, "type": "DirectoryOrCreate"}}]
    assert broker["volumeMounts"] == [{"name": "socket-dir", "mountPath": SOCKET_DIR}]
    assert pod_spec(pod)["volumes"] == [{"name": "tensorbroker-socket", "hostPath": {
        "path": SOCKET_DIR, "type": "Directory"}}]
    assert example["volumeMounts"] == [{"name": "tensorbroker-socket", "mountPath": SOCKET_DIR,
                                        "readOnly": True}]


def keys(value):
    """Every mapping key anywhere in a YAML document, with its value."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from keys(item)


def node_sharing_faults(obj):
    """What a pod shares with its node besides the socket directory: hostIPC, hostPath volumes
    elsewhere, a mount of anything at, above or below /dev/shm. An empty list: nothing."""
    spec = pod_spec(obj)
    faults = [f"{key}: {value}" for key, value in keys(obj) if key == "hostIPC"]
    for volume in spec.get("volumes", []):
        host = volume.get("hostPath")
        if host is not None and host["path"].rstrip("/") != SOCKET_DIR:
            faults.append(f"volume {volume['name']}: hostPath {host['path']}")
    for group in ("initContainers", "containers"):
        for c in spec.get(group, []):
            for mount in c.get("volumeMounts", []):
                path = mount["mountPath"].rstrip("/")
                if path in ("/dev", "/dev/shm") or path.startswith("/dev/shm/"):
                    faults.append(f"container {c['name']}: mounts {mount['name']} at {path}")
    return faults


def test_no_pod_shares_dev_shm_or_ipc_with_the_node():
    # The segments are memfds handed over as descriptors: no pod needs the node's /dev/shm or
    # its IPC namespace, and the socket directory is the only node path any container mounts
    # (the init container's included).
    for obj in (daemonset(), workload(), gpu_daemonset(), gpu_workload(), peers_daemonset(),
                publishers_daemonset()):
        assert node_sharing_faults(obj) == []
    # The check sees each thing the /dev/shm-sharing manifests had.
    ds = daemonset()
    spec = pod_spec(ds)
    spec["hostIPC"] = True
    spec["volumes"].append({"name": "dev-shm", "hostPath": {"path": "/dev/shm",
                                                            "type": "Directory"}})
    spec["containers"][0]["volumeMounts"].append({"name": "dev-shm", "mountPath": "/dev/shm"})
    spec["initContainers"][0]["volumeMounts"].append({"name": "scratch",
                                                      "mountPath": "/dev/shm/"})
    spec["volumes"].append({"name": "scratch", "emptyDir": {"medium": "Memory"}})
    assert node_sharing_faults(ds) == [
        "hostIPC: True", "volume dev-shm: hostPath /dev/shm",
        "container socket-dir: mounts scratch at /dev/shm",
        "container tensorbrokerd: mounts dev-shm at /dev/shm"]


def test_the_workload_carries_the_brokers_group():
    ds_security = pod_spec(daemonset())["securityContext"]
    uid, gid = ds_security["runAsUser"], ds_security["runAsGroup"]
    assert (uid, gid) == (2470, 2470) and ds_security["runAsNonRoot"] is True
    pod_security = pod_spec(workload())["securityContext"]
    assert gid in pod_security["supplementalGroups"]
    assert pod_security["runAsUser"] != uid  # a different user: the group is what lets it in
    # ... and it trusts the broker's uid to serve the socket, whatever its image calls it.
    env = {e["name"]: e["value"] for e in container(workload(), "example")["env"]}
    assert env["TENSORBROKER_DAEMON_USER"] == str(uid)
    # The init step gives the socket directory to that user and group.
    init = pod_spec(daemonset())["initContainers"]
    assert [argv(c) for c in init] == [["/usr/bin/install", "-d", "-o", str(uid), "-g", str(gid),
                                        "-m", "0750", "/run/tensorbroker"]]
    # ... and the image has them, made before the package so that its postinst keeps them.
    text = DOCKERFILE.read_text()
    assert re.search(rf"groupadd --system --gid {gid} tensorbroker\b", text)
    assert re.search(rf"useradd --system --uid {uid} --gid {gid}\b", text)
    assert text.index("groupadd") < text.index("apt-get install")


def test_security_contexts():
    for obj, name in ((daemonset(), "tensorbrokerd"), (workload(), "example"),
                      (gpu_daemonset(), "tensorbrokerd"), (gpu_workload(), "example-gpu"),
                      (peers_daemonset(), "tensorbrokerd"),
                      (publishers_daemonset(), "tensorbrokerd")):
        c = container(obj, name)
        assert c["securityContext"] == {
            "runAsNonRoot": True, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        assert pod_spec(obj)["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod_spec(obj)["automountServiceAccountToken"] is False
        for forbidden in ("hostNetwork", "hostPID", "hostIPC"):
            assert forbidden not in pod_spec(obj)
    # Only the init step is root, with the two capabilities that chown and chmod need.
    (init,) = pod_spec(daemonset())["initContainers"]
    assert init["securityContext"] == {
        "runAsNonRoot": False, "runAsUser": 0, "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"],
                                                            "add": ["CHOWN", "FOWNER"]}}


def without(obj, paths):
    """A deep copy of `obj` without the keys at `paths` (tuples of keys and list indexes)."""
    import copy
    out = copy.deepcopy(obj)
    for path in paths:
        parent = out
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]
    return out


def test_the_gpu_manifests_share_gpus_by_descriptor_without_hostpid():
    # The GPU DaemonSet is the CPU one plus what GPUs need, and nothing else: its node selection,
    # NVIDIA's runtime with every GPU visible, CUDA capacity and VMM descriptors.
    cpu, gpu = daemonset(), gpu_daemonset()
    spec = pod_spec(gpu)
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists",
                                    "effect": "NoSchedule"}]
    broker = container(gpu, "tensorbrokerd")
    assert broker["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                             {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}]
    args = argv(broker)
    assert flag_value(args, "--cuda-handles") == "vmm"
    assert flag_value(args, "--cuda-capacity") == "16G"
    # The broker takes no GPU from the device plugin (it would have it exclusively).
    assert not [k for k, _ in keys(broker["resources"]) if k.startswith("nvidia.com/")]
    containers = ("spec", "template", "spec", "containers", 0)
    stripped = without(gpu, [("spec", "template", "spec", k)
                             for k in ("runtimeClassName", "nodeSelector", "tolerations")] +
                       [containers + ("env",), containers + ("args",)])
    assert stripped == without(cpu, [containers + ("args",)])
    cpu_args, gpu_args = argv(container(cpu, "tensorbrokerd")), args
    assert [a for a in gpu_args if a not in ("--cuda-handles", "vmm", "16G")] == \
        [a for a in cpu_args if a != "0"]
    # The workload: one GPU of its own, the broker's socket and group as the CPU example, and
    # nothing of the node's PID or IPC namespace.
    pod, cpu_pod = gpu_workload(), workload()
    example = container(pod, "example-gpu")
    assert example["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod_spec(pod)["runtimeClassName"] == "nvidia"
    assert example["volumeMounts"] == container(cpu_pod, "example")["volumeMounts"]
    assert example["env"] == container(cpu_pod, "example")["env"]
    assert pod_spec(pod)["volumes"] == pod_spec(cpu_pod)["volumes"]
    assert pod_spec(pod)["securityContext"] == pod_spec(cpu_pod)["securityContext"]
    for obj in (gpu, pod):
        assert [k for k, _ in keys(obj) if k in ("hostPID", "hostIPC", "hostNetwork")] == []
    # The daemon accepts the GPU DaemonSet's command line (no GPU here: it serves CPU only).
    done = subprocess.run([need(DAEMON, "TENSORBROKERD"), *args[1:], "--print-config"],
                          capture_output=True, text=True, timeout=HANG_GUARD)
    assert done.returncode == 0, done.stderr
    assert "cuda-handles = vmm" in done.stdout.splitlines()


# The peer parts of tensorbrokerd-daemonset-peers.yaml (the readers) and
# tensorbrokerd-daemonset-publishers.yaml (the publishers).
PEER_PORT = 7070
TLS_DIR = "/etc/tensorbroker/tls"  # in the broker's container
PEER_ARGS = ["--peer-listen", f":{PEER_PORT}", "--tls-cert", f"{TLS_DIR}/tls.crt",
             "--tls-key", f"{TLS_DIR}/tls.key", "--tls-ca", f"{TLS_DIR}/ca.crt"]
PEER_SECRET = "tensorbroker-peer-tls"
PEER_SERVICE = "tensorbroker-peers"
PUBLISHERS_SERVICE = "tensorbroker-publishers"
PEER_NAME = "tensorbroker-peer"  # the certificate's common name: readers say peer:tensorbroker-peer
PUBLISHER_LABEL = "tensorbroker.io/publisher"  # on the publishers' nodes, "true"
CONFIG_DIR = "/etc/tensorbroker/config"  # the readers' ConfigMap, in the broker's container
CONFIG_ARGS = ["--config", f"{CONFIG_DIR}/tensorbrokerd.conf"]
CONFIG_VOLUME = {"name": "config", "configMap": {"name": "tensorbrokerd-peers-config"}}
CONFIG_MOUNT = {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}
# Each role's DaemonSet and the headless Service that names its brokers.
ROLES = {"readers": (peers_daemonset, peers_service),
         "publishers": (publishers_daemonset, publishers_service)}


def service_dns_names(service):
    """The names a broker dials a headless Service by: NAME.NAMESPACE.svc and its fully
    qualified form in the default cluster domain."""
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    return [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"]


def pod_labels(obj):
    return (obj["spec"]["template"]["metadata"] if obj["kind"] == "DaemonSet"
            else obj["metadata"]).get("labels", {})


def config_settings(text):
    """(key, value) of each `key = value` line of a settings file, as the daemon reads it."""
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return [tuple(part.strip() for part in line.split("=", 1)) for line in lines if line]


def test_the_peers_daemonset_is_the_cpu_one_plus_the_peer_parts():
    # Everything but the peer listener, the settings file and the node selection is the CPU
    # DaemonSet's, so the plain DaemonSet keeps working without a Secret and the two stay in step.
    cpu, peers = daemonset(), peers_daemonset()
    spec, cpu_spec = pod_spec(peers), pod_spec(cpu)
    broker, cpu_broker = container(peers, "tensorbrokerd"), container(cpu, "tensorbrokerd")
    assert argv(broker) == argv(cpu_broker) + PEER_ARGS + CONFIG_ARGS
    assert broker["ports"] == cpu_broker["ports"] + [
        {"name": "peers", "containerPort": PEER_PORT, "protocol": "TCP"}]
    assert broker["volumeMounts"] == cpu_broker["volumeMounts"] + [
        {"name": "peer-tls", "mountPath": TLS_DIR, "readOnly": True}, CONFIG_MOUNT]
    assert spec["volumes"] == cpu_spec["volumes"] + [
        {"name": "peer-tls", "secret": {"secretName": PEER_SECRET, "defaultMode": 0o440}},
        CONFIG_VOLUME]
    assert spec["securityContext"] == {**cpu_spec["securityContext"], "fsGroup": 2470}
    assert "affinity" not in cpu_spec and "nodeSelector" not in cpu_spec
    containers = ("spec", "template", "spec", "containers", 0)
    peer_parts = [containers + (k,) for k in ("args", "ports", "volumeMounts")] + [
        ("spec", "template", "spec", "volumes"), ("spec", "template", "spec", "securityContext")]
    assert without(peers, peer_parts + [("spec", "template", "spec", "affinity")]) == \
        without(cpu, peer_parts)
    # The Namespace too.
    assert only(documents(PEERS_DAEMONSET_FILE), "Namespace") == \
        only(documents(DAEMONSET_FILE), "Namespace")


def test_the_publishers_daemonset_is_the_readers_without_the_settings_file():
    # A broker refuses to publish under its own remote prefixes: the publishers have no
    # remote[] (no --config, no ConfigMap), and are otherwise the readers' broker.
    readers, publishers = peers_daemonset(), publishers_daemonset()
    reader, publisher = container(readers, "tensorbrokerd"), container(publishers, "tensorbrokerd")
    assert argv(reader) == argv(publisher) + CONFIG_ARGS
    assert reader["volumeMounts"] == publisher["volumeMounts"] + [CONFIG_MOUNT]
    assert pod_spec(readers)["volumes"] == pod_spec(publishers)["volumes"] + [CONFIG_VOLUME]
    # Its own name and pod labels, on the labelled nodes only.
    labels = {"app.kubernetes.io/name": "tensorbroker", "app.kubernetes.io/component": "publisher"}
    assert publishers["metadata"]["name"] == "tensorbrokerd-publisher"
    assert publishers["metadata"]["labels"] == {**labels, "app.kubernetes.io/version": "0.1.0"}
    assert publishers["spec"]["selector"] == {"matchLabels": labels}
    assert pod_labels(publishers) == labels
    assert pod_spec(publishers)["nodeSelector"] == {PUBLISHER_LABEL: "true"}
    assert "affinity" not in pod_spec(publishers)
    containers = ("spec", "template", "spec", "containers", 0)
    differing = [("metadata", "name"), ("metadata", "labels"), ("spec", "selector"),
                 ("spec", "template", "metadata", "labels"), containers + ("args",),
                 containers + ("volumeMounts",), ("spec", "template", "spec", "volumes")]
    assert without(publishers, differing + [("spec", "template", "spec", "nodeSelector")]) == \
        without(readers, differing + [("spec", "template", "spec", "affinity")])
    # Neither DaemonSet's selector takes the other's pods (a controller would count them as its).
    assert not selects(readers["spec"]["selector"], pod_labels(publishers))
    assert not selects(publishers["spec"]["selector"], pod_labels(readers))
    assert only(documents(PUBLISHERS_DAEMONSET_FILE), "Namespace") == \
        only(documents(DAEMONSET_FILE), "Namespace")


def test_each_node_runs_one_broker_a_reader_or_a_publisher():
    readers, publishers = peers_daemonset(), publishers_daemonset()
    for node_labels, role in (({}, "readers"), ({"kubernetes.io/hostname": "n1"}, "readers"),
                              ({PUBLISHER_LABEL: "true"}, "publishers"),
                              ({PUBLISHER_LABEL: "false"}, "readers"),
                              ({PUBLISHER_LABEL: ""}, "readers")):
        running = [name for name, ds in (("readers", readers), ("publishers", publishers))
                   if runs_on(ds, node_labels)]
        assert running == [role], node_labels
    # Two would meet in the node's one socket directory (one daemon per socket).
    paths = {host_path(ds, container(ds, "tensorbrokerd"),
                       flag_value(argv(container(ds, "tensorbrokerd")), "--socket"))
             for ds in (readers, publishers)}
    assert paths == {f"{SOCKET_DIR}/broker.sock"}
    # The README's label command sets what the publishers select.
    assert f"kubectl label node NODE {PUBLISHER_LABEL}=true" in README.read_text()


@pytest.mark.parametrize("role", ROLES)
def test_the_peer_port_is_on_the_pod_network_and_the_secret_readable_by_the_broker_alone(role):
    ds = ROLES[role][0]()
    spec, broker = pod_spec(ds), container(ds, "tensorbrokerd")
    # The pod's own network namespace: no hostNetwork, no hostPort anywhere.
    assert [k for k, _ in keys(ds) if k in ("hostNetwork", "hostPort")] == []
    host, _, port = flag_value(argv(broker), "--peer-listen").rpartition(":")
    assert (host, int(port)) == ("", PEER_PORT)  # every interface of the pod
    assert [p for p in broker["ports"] if p["containerPort"] == PEER_PORT] == [
        {"name": "peers", "containerPort": PEER_PORT, "protocol": "TCP"}]
    # The three files are the Secret's keys, as cert-manager names them, in one read-only mount
    # (init containers mount nothing of it).
    files = {flag: secret_file(ds, broker, flag_value(argv(broker), flag))
             for flag in ("--tls-cert", "--tls-key", "--tls-ca")}
    assert files == {"--tls-cert": (PEER_SECRET, "tls.crt"), "--tls-key": (PEER_SECRET, "tls.key"),
                     "--tls-ca": (PEER_SECRET, "ca.crt")}
    (mount,) = [m for m in broker["volumeMounts"] if m["mountPath"] == TLS_DIR]
    assert mount["readOnly"] is True
    assert [m for c in spec["initContainers"] for m in c["volumeMounts"]
            if m["name"] == mount["name"]] == []
    # The kubelet writes them owned by root; fsGroup makes their group the broker's, and the
    # mode lets that group read them and nobody else (the key especially).
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    security = spec["securityContext"]
    assert security["fsGroup"] == security["runAsGroup"] == 2470
    mode = volume["secret"]["defaultMode"]
    assert mode & 0o040 and not mode & 0o007, oct(mode)
    # The Secret is not optional: without it a pod waits rather than serves no peers.
    assert "optional" not in volume["secret"]


@pytest.mark.parametrize("role", ROLES)
def test_each_headless_service_selects_its_roles_brokers_on_the_peer_port(role):
    ds, service = ROLES[role][0](), ROLES[role][1]()
    (other,) = [daemonset_of() for name, (daemonset_of, _) in ROLES.items() if name != role]
    broker = container(ds, "tensorbrokerd")
    assert service["metadata"]["name"] == {"readers": PEER_SERVICE,
                                           "publishers": PUBLISHERS_SERVICE}[role]
    assert service["metadata"]["namespace"] == ds["metadata"]["namespace"]
    spec = service["spec"]
    # Headless: DNS answers with the brokers' pod IPs; no virtual IP, nothing on the nodes.
    assert spec["clusterIP"] == "None"
    assert spec.get("type", "ClusterIP") == "ClusterIP"
    assert "publishNotReadyAddresses" not in spec  # only ready brokers (their health probe)
    # Exactly the DaemonSet's pods (the DaemonSet's own selector): not the other role's, and no
    # example workload.
    assert spec["selector"] == pod_labels(ds) == ds["spec"]["selector"]["matchLabels"]
    for pod in (other, workload(), gpu_workload()):
        assert not selects({"matchLabels": spec["selector"]}, pod_labels(pod))
    # Its one port is the container's peer port, by name and by number: clients of a headless
    # Service dial the pod IPs themselves, at the container port.
    (port,) = spec["ports"]
    (target,) = [p for p in broker["ports"] if p["name"] == port["targetPort"]]
    assert port == {"name": "peers", "port": PEER_PORT, "targetPort": "peers", "protocol": "TCP"}
    assert target["containerPort"] == port["port"] == PEER_PORT
    assert [p["containerPort"] for p in broker["ports"]] == [9464, PEER_PORT]


def test_the_network_policy_admits_the_peer_port_from_the_brokers_of_both_roles():
    policy = peer_networkpolicy()
    brokers = [peers_daemonset(), publishers_daemonset()]
    assert {ds["metadata"]["namespace"] for ds in brokers} == {policy["metadata"]["namespace"]}
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    peer_rule, metrics_rule = spec["ingress"]
    # The peer port from the pods it applies to (this namespace's: no namespaceSelector) ...
    assert peer_rule == {"from": [{"podSelector": spec["podSelector"]}],
                         "ports": [{"protocol": "TCP", "port": PEER_PORT}]}
    # ... which are the brokers of both roles and nothing else.
    for ds in brokers:
        assert selects(spec["podSelector"], pod_labels(ds)), ds["metadata"]["name"]
    for labels in (pod_labels(workload()), pod_labels(gpu_workload()),
                   {"app.kubernetes.io/name": "tensorbroker"},
                   {"app.kubernetes.io/name": "tensorbroker", "app.kubernetes.io/component": "x"}):
        assert not selects(spec["podSelector"], labels), labels
    # The metrics port stays open as it was.
    assert metrics_rule == {"ports": [{"protocol": "TCP", "port": 9464}]}


def test_the_peer_certificate_is_the_daemonsets_secret_for_the_services_names():
    docs = documents(PEER_CERTIFICATE_FILE)
    for doc in docs:
        assert validate_cert_manager(doc) == [], f"{doc['kind']} {doc['metadata']['name']}"
    namespace = peers_daemonset()["metadata"]["namespace"]
    assert {doc["metadata"]["namespace"] for doc in docs} == {namespace}
    issuers = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Issuer"}
    certificates = {d["spec"]["secretName"]: d for d in docs if d["kind"] == "Certificate"}

    def issuer_of(certificate):
        ref = certificate["spec"]["issuerRef"]
        assert (ref.get("group"), ref.get("kind")) == ("cert-manager.io", "Issuer")
        return issuers[ref["name"]]

    # The brokers': the one Secret both DaemonSets mount, its name the one readers admit, its DNS
    # names both Services', for serving and calling.
    secrets = {v["secret"]["secretName"] for ds in (peers_daemonset(), publishers_daemonset())
               for v in pod_spec(ds)["volumes"] if "secret" in v}
    (secret,) = secrets
    broker = certificates[secret]["spec"]
    assert broker["commonName"] == PEER_NAME
    assert broker["dnsNames"] == service_dns_names(peers_service()) + \
        service_dns_names(publishers_service())
    assert {"server auth", "client auth"} <= set(broker["usages"])
    assert "isCA" not in broker
    assert go_duration(broker["renewBefore"]) == 30 * 86400
    # ... signed by a CA Issuer whose CA is the other Certificate, self-signed at the root.
    ca_issuer = issuer_of(certificates[secret])
    ca = certificates[ca_issuer["spec"]["ca"]["secretName"]]
    assert ca["spec"]["isCA"] is True
    assert issuer_of(ca)["spec"] == {"selfSigned": {}}
    assert sorted(certificates) == sorted([secret, ca_issuer["spec"]["ca"]["secretName"]])
    assert len(issuers) == 2
    # The README tells publishers to let that peer read.
    assert f"`peer:{PEER_NAME}`" in README.read_text()


def test_the_readers_settings_file_names_the_publishers_service():
    ds, configmap, publishers = peers_daemonset(), peers_configmap(), publishers_daemonset()
    broker = container(ds, "tensorbrokerd")
    # --config is the ConfigMap's one key, through its read-only mount, in the same namespace.
    name, key = configmap_file(ds, broker, flag_value(argv(broker), "--config"))
    assert name == configmap["metadata"]["name"]
    assert configmap["metadata"]["namespace"] == ds["metadata"]["namespace"]
    assert list(configmap["data"]) == [key]
    assert "optional" not in [v for v in pod_spec(ds)["volumes"] if "configMap" in v][0][
        "configMap"]
    # Only remote[] there: the command line sets the rest, and a key set in both would be the
    # flag's (flags override the file), the file's line dead.
    settings = config_settings(configmap["data"][key])
    assert [k for k, _ in settings] == ["remote[policy/]"]
    flags = {a[2:] for a in argv(broker)[1:] if a.startswith("--")}
    assert flags & {k for k, _ in settings} == set()
    # The address is the publishers' Service by its fully qualified name, at its port, which is
    # the publishers' container port.
    host, _, port = settings[0][1].rpartition(":")
    service = publishers_service()
    assert host == service_dns_names(service)[1]
    (service_port,) = service["spec"]["ports"]
    assert int(port) == service_port["port"]
    (target,) = [p for p in container(publishers, "tensorbrokerd")["ports"]
                 if p["name"] == service_port["targetPort"]]
    assert target["containerPort"] == int(port)
    # A reader checks the publisher's certificate against that host: the brokers' certificate
    # (the Secret both mount) has it.
    (certificate,) = [d["spec"] for d in documents(PEER_CERTIFICATE_FILE)
                      if d["kind"] == "Certificate" and d["spec"]["secretName"] == PEER_SECRET]
    assert host in certificate["dnsNames"]


def test_the_probes_are_the_clis_health_command():
    broker = container(daemonset(), "tensorbrokerd")
    socket_path = flag_value(argv(broker), "--socket")
    for probe in ("readinessProbe", "livenessProbe"):
        assert broker[probe]["exec"]["command"] == [CLI_IN_IMAGE, "--socket", socket_path,
                                                    "health"]
        assert broker[probe]["timeoutSeconds"] >= 1


def test_metrics_port_and_scrape_annotations_agree():
    ds = daemonset()
    broker = container(ds, "tensorbrokerd")
    host, _, port = flag_value(argv(broker), "--metrics-listen").rpartition(":")
    assert host == "0.0.0.0"
    assert broker["ports"] == [{"name": "metrics", "containerPort": int(port), "protocol": "TCP"}]
    assert ds["spec"]["template"]["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/port": port,
        "prometheus.io/path": "/metrics"}


def test_images_are_the_projects_version_everywhere():
    version = re.search(r"project\(tensorbroker VERSION ([0-9.]+)",
                        (ROOT / "CMakeLists.txt").read_text())[1]
    images = {c["image"] for obj in (daemonset(), workload(), gpu_daemonset(), peers_daemonset(),
                                     publishers_daemonset())
              for group in ("initContainers", "containers") for c in pod_spec(obj).get(group, [])}
    assert images == {f"tensorbroker:{version}"}
    text = DOCKERFILE.read_text()
    assert "FROM debian:bookworm-slim\n" in text
    assert "apt-get install -y --no-install-recommends ./tensorbroker_*.deb" in text
    assert container(daemonset(), "tensorbrokerd")["command"] == [DAEMON_IN_IMAGE]


def test_every_daemon_flag_used_is_in_its_help():
    done = subprocess.run([need(DAEMON, "TENSORBROKERD"), "--help"], capture_output=True,
                          text=True, timeout=HANG_GUARD)
    assert done.returncode == 0, done.stderr
    known = set(re.findall(r"--[a-z][a-z-]*", done.stdout))
    used = [a.split("=")[0] for a in argv(container(daemonset(), "tensorbrokerd"))[1:]
            if a.startswith("--")]
    assert used == ["--socket", "--capacity", "--cuda-capacity", "--log-level", "--metrics-listen"]
    assert [flag for flag in used if flag not in known] == []
    gpu_used = [a.split("=")[0] for a in argv(container(gpu_daemonset(), "tensorbrokerd"))[1:]
                if a.startswith("--")]
    assert "--cuda-handles" in gpu_used
    assert [flag for flag in gpu_used if flag not in known] == []
    peer_flags = ["--peer-listen", "--tls-cert", "--tls-key", "--tls-ca"]
    for ds, expected in ((peers_daemonset(), used + peer_flags + ["--config"]),
                         (publishers_daemonset(), used + peer_flags)):
        peers_used = [a.split("=")[0] for a in argv(container(ds, "tensorbrokerd"))[1:]
                      if a.startswith("--")]
        assert peers_used == expected
        assert [flag for flag in peers_used if flag not in known] == []


def test_the_cli_has_the_health_command_the_probes_run():
    done = subprocess.run([need(CLI, "TENSORBROKER_CLI"), "--help"], capture_output=True,
                          text=True, timeout=HANG_GUARD)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^\s+health\b", done.stdout, re.M), done.stdout


def test_the_daemon_reads_the_daemonsets_settings_and_the_memory_limit_covers_them():
    broker = container(daemonset(), "tensorbrokerd")
    done = subprocess.run([need(DAEMON, "TENSORBROKERD"), *argv(broker)[1:], "--print-config"],
                          capture_output=True, text=True, timeout=HANG_GUARD)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for line in ("socket = /run/tensorbroker/broker.sock",
                 "capacity = 4294967296  # 4.0 GiB",
                 "log-level = info"):
        assert line in lines, done.stdout
    assert [line for line in lines if line.startswith("cuda-capacity = ")] == \
        ["cuda-capacity = 0  # 0 B per GPU"], done.stdout
    # The segments are memfds whose every page the broker reserves (fallocate) when it creates
    # them, and shmem is charged to the memory cgroup that first touches a page: the broker's.
    # The limit must hold them and leave room for the daemon itself, and the request equals it
    # (no overcommit).
    resources = broker["resources"]
    assert quantity(resources["limits"]["memory"]) == 4 * 2**30 + 512 * 2**20
    assert resources["requests"]["memory"] == resources["limits"]["memory"]


# --- The manifests' commands, run against the real daemon -----------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def segment_prefix(socket_path):
    """The name prefix of the daemon's segments for a socket: "tb-" + FNV-1a 32 of the path +
    "-". The names label its memfds; none is a file anywhere."""
    h = 2166136261
    for byte in os.path.normpath(os.path.abspath(socket_path)).encode():
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return f"tb-{h:08x}-"


def in_dev_shm(prefix):
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))


def memfds(pid):
    """What the descriptors of process `pid` that are tensorbroker memfds link to:
    "/memfd:tb-<...> (deleted)"."""
    links = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:  # closed meanwhile
            pass
    return sorted(link for link in links if link.startswith("/memfd:tb-"))


def python_env(extra):
    """The environment for running the example with the package built next to TENSORBROKERD,
    preloading the sanitizer runtime when that build is instrumented (TENSORBROKER_PYTHON_PRELOAD,
    set by the CMake registration as for every Python test)."""
    package_dir = Path(DAEMON).resolve().parents[1] / "python"
    extension = sorted((package_dir / "tensorbroker").glob("_core*.so"))
    assert len(extension) == 1, f"no built tensorbroker Python package in {package_dir}"
    env = dict(os.environ, PYTHONPATH=str(package_dir), PYTHONDONTWRITEBYTECODE="1", **extra)
    preload = os.environ.get("TENSORBROKER_PYTHON_PRELOAD", "")
    if preload:
        env["LD_PRELOAD"] = preload
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"  # CPython keeps memory at exit
    return env


@pytest.fixture
def node():
    """A temporary directory standing for the node's root (hostPath volumes under it)."""
    with tempfile.TemporaryDirectory(prefix="tbk8s.") as d:
        yield d


def test_the_daemonset_and_the_example_pod_run_as_written(node):
    need(DAEMON, "TENSORBROKERD")
    need(CLI, "TENSORBROKER_CLI")
    ds, pod = daemonset(), workload()
    broker = container(ds, "tensorbrokerd")

    def on_node(obj, c, path_in_container):
        return node + host_path(obj, c, path_in_container)

    # The broker's command line, with the node's paths and a free local port for the metrics.
    args = argv(broker)
    assert args[0] == DAEMON_IN_IMAGE
    socket_in_pod = flag_value(args, "--socket")
    sock = on_node(ds, broker, socket_in_pod)
    port = free_port()
    args = [DAEMON] + [sock if a == socket_in_pod else a for a in args[1:]]
    args[args.index("--metrics-listen") + 1] = f"127.0.0.1:{port}"
    os.makedirs(os.path.dirname(sock))  # what the kubelet's DirectoryOrCreate does
    log_path = os.path.join(node, "daemon.log")

    def log():
        with open(log_path) as f:
            return f.read()

    def probe(name, timeout):
        command = broker[name]["exec"]["command"]
        assert command[0] == CLI_IN_IMAGE
        command = [CLI] + [sock if a == socket_in_pod else a for a in command[1:]]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)

    prefix = segment_prefix(sock)
    with open(log_path, "w") as out:
        daemon = subprocess.Popen(args, stderr=out)
    try:
        wait_for(daemon, f"serving on {sock}", lambda: os.path.exists(sock), log_path)
        # Both sockets in the one directory the pods mount, with the same mode.
        for path in (sock, sock + ".fd"):
            assert stat.S_ISSOCK(os.stat(path).st_mode), path
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o660, path
        # Readiness and liveness: the probes as written, within their timeouts.
        for name in ("readinessProbe", "livenessProbe"):
            done = probe(name, timeout=broker[name]["timeoutSeconds"])
            assert done.returncode == 0, (name, done.stdout, done.stderr)
        # The scrape Prometheus does from the annotations.
        annotations = ds["spec"]["template"]["metadata"]["annotations"]
        with urllib.request.urlopen(
                f"http://127.0.0.1:{port}{annotations['prometheus.io/path']}",
                timeout=HANG_GUARD) as response:
            assert response.status == 200
            text = response.read().decode()
        capacity = [s.value for family in text_string_to_metric_families(text)
                    for s in family.samples
                    if s.name == "tensorbroker_capacity_bytes" and s.labels == {"device": "cpu"}]
        assert capacity == [4 * 2**30], text
        # The example pod's program, with its environment and its view of the node's socket.
        example = container(pod, "example")
        assert example["command"] == ["/usr/bin/python3", "-c"]
        env = {e["name"]: e["value"] for e in example["env"]}
        assert list(env) == ["TENSORBROKER_SOCKET", "TENSORBROKER_DAEMON_USER"]
        example_sock = on_node(pod, example, env["TENSORBROKER_SOCKET"])
        assert example_sock == sock
        assert on_node(pod, example, env["TENSORBROKER_SOCKET"] + ".fd") == sock + ".fd"
        # Run while /dev/shm is watched: the daemon's segments never appear there.
        example_run = subprocess.Popen([*example["command"], *example["args"]],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       env=python_env({**env, "TENSORBROKER_SOCKET": example_sock}))
        seen_in_dev_shm = set()
        deadline = time.monotonic() + HANG_GUARD
        while True:
            seen_in_dev_shm.update(in_dev_shm(prefix))
            try:
                stdout, stderr = example_run.communicate(timeout=0.01)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    example_run.kill()
                    example_run.communicate()
                    raise
        assert example_run.returncode == 0, stderr
        assert stdout == f"put/get through {sock}: ok, sum=66\n"
        assert seen_in_dev_shm == set()
        # The example's segment (kept idle for reuse) is a memfd the daemon holds, which is
        # what the example received over broker.sock.fd; nothing of it is in /dev/shm.
        held = memfds(daemon.pid)
        assert held != [], "the daemon should hold the example's segment as a memfd"
        assert all(link.startswith("/memfd:" + prefix) for link in held), held
        assert in_dev_shm(prefix) == []
        # Pod deletion: SIGTERM, then the grace period.
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=pod_spec(ds)["terminationGracePeriodSeconds"]) == 0, log()
        assert not os.path.exists(sock) and not os.path.exists(sock + ".fd")
        assert in_dev_shm(prefix) == []
        # Now the probe fails (exit 1; the kubelet would also count running past its timeout as
        # a failure): the pod would be marked unready.
        done = probe("readinessProbe", timeout=HANG_GUARD)
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert [line for line in log().splitlines() if line[:3] in ("<3>", "<4>")] == []
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


# --- Peers: the README's certificates and the peers DaemonSet, run --------------------------------

def readme_section(title):
    """The README's "## title" section, up to the next "## " heading."""
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end == -1 else text[start:end]


def sh_blocks(text):
    return re.findall(r"^```sh\n(.*?)^```$", text, re.M | re.S)


def run_readme_openssl_recipe(directory):
    """Runs the README's openssl recipe ("Peers across nodes") in `directory`, as a reader would
    paste it into bash; its stdout."""
    (recipe,) = [b for b in sh_blocks(readme_section("Peers across nodes")) if "openssl req" in b]
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", recipe], cwd=directory,
                          capture_output=True, text=True, timeout=HANG_GUARD)
    assert done.returncode == 0, done.stderr
    return done.stdout


def openssl(*args, cwd):
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=HANG_GUARD)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def test_the_readmes_openssl_recipe_makes_what_cert_manager_makes(tmp_path):
    assert run_readme_openssl_recipe(tmp_path) == "tls.crt: OK\n"
    # The certificate, as peer-certificate.yaml asks cert-manager for it: the same common name
    # and DNS names (the Service's), a leaf for servers and clients both.
    (broker,) = [d["spec"] for d in documents(PEER_CERTIFICATE_FILE)
                 if d["kind"] == "Certificate" and d["spec"]["secretName"] == PEER_SECRET]
    text = openssl("x509", "-in", "tls.crt", "-noout", "-subject", "-nameopt", "RFC2253", "-ext",
                   "basicConstraints,keyUsage,extendedKeyUsage,subjectAltName", cwd=tmp_path)
    lines = [line.strip() for line in text.splitlines()]
    assert lines == [
        f"subject=CN={broker['commonName']}",
        "X509v3 Basic Constraints: critical", "CA:FALSE",
        "X509v3 Key Usage: critical", "Digital Signature",
        "X509v3 Extended Key Usage:",
        "TLS Web Server Authentication, TLS Web Client Authentication",
        "X509v3 Subject Alternative Name:",
        ", ".join(f"DNS:{name}" for name in broker["dnsNames"])], text
    assert {"digital signature", "server auth", "client auth"} == set(broker["usages"])
    # The CA verifies it for both ends of a peer connection.
    for purpose in ("sslserver", "sslclient"):
        assert openssl("verify", "-purpose", purpose, "-CAfile", "ca.crt", "tls.crt",
                       cwd=tmp_path) == "tls.crt: OK\n"
    # The Secret: the DaemonSet's, in its namespace, of exactly the files it reads (as keys of
    # the same names), which the recipe made; the CA's key stays out.
    ds = peers_daemonset()
    broker_container = container(ds, "tensorbrokerd")
    read = {secret_file(ds, broker_container, flag_value(argv(broker_container), flag))
            for flag in ("--tls-cert", "--tls-key", "--tls-ca")}
    (create,) = [line for block in sh_blocks(readme_section("Peers across nodes"))
                 for line in block.replace("\\\n", " ").splitlines() if "create secret" in line]
    words = shlex.split(create)
    assert words[:7] == ["kubectl", "-n", ds["metadata"]["namespace"], "create", "secret",
                         "generic", PEER_SECRET]
    files = [w.removeprefix("--from-file=") for w in words[7:]]
    assert all(w.startswith("--from-file=") for w in words[7:]), words
    assert {(PEER_SECRET, f) for f in files} == read and len(files) == len(read)
    assert all((tmp_path / f).is_file() for f in files)


def on_node(ds, node, pki):
    """The DaemonSet's command line (the real daemon's path first), with what the kubelet would
    mount put under `node`: the Secret's files, copied from `pki` (where the README's recipe
    ran) with the volume's mode; the ConfigMap's file, written from the manifest; the socket's
    hostPath directory, made."""
    broker = container(ds, "tensorbrokerd")
    args = argv(broker)
    assert args[0] == DAEMON_IN_IMAGE
    args = [DAEMON] + args[1:]
    volumes = pod_spec(ds)["volumes"]
    for flag in ("--tls-cert", "--tls-key", "--tls-ca"):
        i = args.index(flag) + 1
        secret, key = secret_file(ds, broker, args[i])
        (volume,) = [v for v in volumes if v.get("secret", {}).get("secretName") == secret]
        args[i] = os.path.join(node, "secrets", secret, key)
        os.makedirs(os.path.dirname(args[i]), exist_ok=True)
        shutil.copyfile(os.path.join(pki, key), args[i])
        os.chmod(args[i], volume["secret"]["defaultMode"])
    if "--config" in args:
        i = args.index("--config") + 1
        name, key = configmap_file(ds, broker, args[i])
        (configmap,) = [d for d in documents(PEERS_DAEMONSET_FILE)
                        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
        args[i] = os.path.join(node, "configmaps", name, key)
        os.makedirs(os.path.dirname(args[i]))
        with open(args[i], "w") as f:
            f.write(configmap["data"][key])
    i = args.index("--socket") + 1
    args[i] = node + host_path(ds, broker, args[i])
    os.makedirs(os.path.dirname(args[i]))
    return args


def set_flag(args, flag, value):
    args[args.index(flag) + 1] = value


def test_the_daemon_reads_the_readers_settings_file_with_their_command_line(node):
    """The readers' command line and the ConfigMap's file, as the kubelet mounts them: the real
    daemon takes both and prints the file's remote[] back, with the flags' peer settings."""
    need(DAEMON, "TENSORBROKERD")
    pki = os.path.join(node, "pki")
    os.makedirs(pki)
    run_readme_openssl_recipe(pki)
    args = on_node(peers_daemonset(), os.path.join(node, "reader"), pki)
    done = subprocess.run([*args, "--print-config"], capture_output=True, text=True,
                          timeout=HANG_GUARD)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    config = flag_value(args, "--config")
    assert lines[0] == f"# tensorbrokerd's effective configuration (config file: {config})"
    (setting,) = config_settings(peers_configmap()["data"]["tensorbrokerd.conf"])
    assert " = ".join(setting) in lines, done.stdout
    assert [line for line in lines if line.startswith("remote[")] == [" = ".join(setting)]
    for flag in ("--peer-listen", "--tls-cert", "--tls-key", "--tls-ca"):
        assert f"{flag[2:]} = {flag_value(args, flag)}" in lines, done.stdout


@pytest.mark.parametrize("role", ROLES)
def test_each_peer_daemonset_serves_peers_as_written(node, role):
    """Each role's command line, with the Secret the README's recipe makes where the kubelet
    would mount it (and the readers' settings file): the broker serves peers as the
    certificate's names, and a broker that dials its headless Service's names with the same
    Secret is served."""
    need(DAEMON, "TENSORBROKERD")
    ds, service = ROLES[role][0](), ROLES[role][1]()
    pki = os.path.join(node, "pki")  # where the recipe runs (ca.key stays here)
    os.makedirs(pki)
    run_readme_openssl_recipe(pki)
    args = on_node(ds, node, pki)
    sock = flag_value(args, "--socket")
    # Free local ports for the metrics and the peers.
    metrics_port, peer_port = free_port(), free_port()
    set_flag(args, "--metrics-listen", f"127.0.0.1:{metrics_port}")
    assert flag_value(args, "--peer-listen") == f":{PEER_PORT}"
    set_flag(args, "--peer-listen", f"127.0.0.1:{peer_port}")
    tls = {flag: flag_value(args, flag) for flag in ("--tls-cert", "--tls-key", "--tls-ca")}
    log_path = os.path.join(node, "daemon.log")

    def log():
        with open(log_path) as f:
            return f.read()

    not_after = openssl("x509", "-in", tls["--tls-cert"], "-noout", "-enddate",
                        cwd=node).strip().removeprefix("notAfter=")
    with open(log_path, "w") as out:
        daemon = subprocess.Popen(args, stderr=out)
    try:
        wait_for(daemon, f"serving on {sock}", lambda: log_line(log_path, "serving on " + sock),
                 log_path)
        # Who it is to its peers: the certificate's common name, then both Services' names.
        names = ", ".join([PEER_NAME] + service_dns_names(peers_service()) +
                          service_dns_names(publishers_service()))
        assert f"<6>peers: serving on 127.0.0.1:{peer_port} with mutual TLS as {names} " \
               f"(certificate valid until {not_after}); peers need a certificate that " \
               f"{tls['--tls-ca']} verifies" in log().splitlines(), log()

        # Another broker, with the same Secret, dialling the Service by either name (here at the
        # local port): the certificate is checked against the name, and the call is served.
        def read(flag):
            with open(tls[flag], "rb") as f:
                return f.read()

        credentials = grpc.ssl_channel_credentials(read("--tls-ca"), read("--tls-key"),
                                                   read("--tls-cert"))

        def ping(dialled_name):
            with grpc.secure_channel(f"127.0.0.1:{peer_port}", credentials, options=[
                    ("grpc.ssl_target_name_override", dialled_name)]) as channel:
                call = channel.unary_unary("/tensorbroker.v1.Broker/Ping")
                return call(b"", timeout=HANG_GUARD)  # Empty in, Empty out

        for name in service_dns_names(service):
            assert ping(name) == b"", name
        # ... and a name the certificate does not have is refused before any call.
        with pytest.raises(grpc.RpcError) as refused:
            ping("tensorbroker-peers.elsewhere.svc")
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        # The broker counted the two calls as the peer's: tensorbroker-peer, the one name every
        # broker with this Secret has (publishers' tensors name it in their readers).
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                    timeout=HANG_GUARD) as response:
            text = response.read().decode()
        calls = {s.labels["peer"]: s.value for family in text_string_to_metric_families(text)
                 for s in family.samples if s.name == "tensorbroker_peer_calls_total"}
        assert calls == {PEER_NAME: 2}, text
        # Pod deletion: as the plain DaemonSet's.
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=pod_spec(ds)["terminationGracePeriodSeconds"]) == 0, log()
        assert [line for line in log().splitlines() if line[:3] in ("<3>", "<4>")] == []
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


# --- Peers: a reader's Get of policy/..., fetched from a publisher by the Service's name ----------

def with_hosts(hosts_file, args):
    """`args` run in a user and mount namespace of their own, where `hosts_file` is /etc/hosts:
    the names in it resolve as it says for that process alone (the daemon resolves a remote[]
    host with getaddrinfo, which reads /etc/hosts first)."""
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts_file), *args]


@functools.lru_cache(maxsize=None)
def can_have_own_hosts():
    done = subprocess.run(with_hosts("/etc/hosts", ["true"]), capture_output=True,
                          timeout=HANG_GUARD)
    return done.returncode == 0


def start_daemon(args, log_path):
    with open(log_path, "w") as out:
        daemon = subprocess.Popen(args, stderr=out)
    sock = flag_value(args, "--socket")
    wait_for(daemon, f"serving on {sock}", lambda: log_line(log_path, "serving on " + sock),
             log_path)
    return daemon


def stop_daemon(daemon, log_path, grace):
    daemon.send_signal(signal.SIGTERM)
    with open(log_path) as f:
        assert daemon.wait(timeout=grace) == 0, f.read()


def test_a_readers_get_under_policy_fetches_from_a_publisher_by_the_services_name(tmp_path):
    """A publisher and a reader, each its DaemonSet's command line with the README's Secret and
    the reader's ConfigMap: a Get on the reader of a name under policy/ that a process published
    on the publisher's node fetches it by the name remote[policy/] gives (here resolving to this
    machine: an /etc/hosts of the reader's own), checking the publisher's certificate against
    that name; what the publisher's readers do not admit stays out of reach; publishing under
    policy/ on the reader is refused."""
    need(DAEMON, "TENSORBROKERD")
    need(CLI, "TENSORBROKER_CLI")
    if not can_have_own_hosts():
        pytest.skip("no user namespaces here (unshare --user --map-root-user --mount): the "
                    "reader's own /etc/hosts needs one")
    import numpy as np

    pki = tmp_path / "pki"
    pki.mkdir()
    run_readme_openssl_recipe(pki)
    publishers, readers = publishers_daemonset(), peers_daemonset()
    publisher_args = on_node(publishers, str(tmp_path / "publisher"), str(pki))
    reader_args = on_node(readers, str(tmp_path / "reader"), str(pki))
    peer_port, metrics_port = free_port(), free_port()
    set_flag(publisher_args, "--peer-listen", f"127.0.0.1:{peer_port}")
    set_flag(publisher_args, "--metrics-listen", f"127.0.0.1:{metrics_port}")
    set_flag(reader_args, "--peer-listen", f"127.0.0.1:{free_port()}")
    set_flag(reader_args, "--metrics-listen", f"127.0.0.1:{free_port()}")
    # The ConfigMap's file as mounted, the Service's port moved to the publisher's local one.
    config = Path(flag_value(reader_args, "--config"))
    ((_, address),) = config_settings(config.read_text())
    host = address.rpartition(":")[0]
    assert address == f"{host}:{PEER_PORT}"
    config.write_text(config.read_text().replace(f"= {address}\n", f"= {host}:{peer_port}\n"))
    assert config_settings(config.read_text()) == [("remote[policy/]", f"{host}:{peer_port}")]
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 {host}\n")
    publisher_sock, reader_sock = (flag_value(a, "--socket") for a in (publisher_args, reader_args))

    def cli(sock, *words):
        return subprocess.run([CLI, "--socket", sock, *words], capture_output=True, text=True,
                              timeout=HANG_GUARD)

    weights = np.arange(3 * 1024, dtype=np.float32).reshape(3, 1024)
    np.save(tmp_path / "w.npy", weights)
    logs = {"publisher": tmp_path / "publisher.log", "reader": tmp_path / "reader.log"}
    daemons = {}
    try:
        daemons["publisher"] = start_daemon(publisher_args, logs["publisher"])
        daemons["reader"] = start_daemon(with_hosts(hosts, reader_args), logs["reader"])
        # On the publisher's node: one tensor the readers may read (peer:tensorbroker-peer, as
        # the README says), one they may not.
        for name, readers_list in (("policy/w", f"peer:{PEER_NAME}"),
                                   ("policy/private", "uid:4242")):
            done = cli(publisher_sock, "put", name, str(tmp_path / "w.npy"),
                       "--readers", readers_list)
            assert done.returncode == 0, done.stderr
        # On the reader's: the Get fetches it from the publisher, by the Service's name.
        done = cli(reader_sock, "get", "policy/w", str(tmp_path / "got.npy"))
        assert done.returncode == 0, done.stderr
        assert np.array_equal(np.load(tmp_path / "got.npy"), weights)
        done = cli(reader_sock, "stat", "policy/w", "--json")
        assert done.returncode == 0, done.stderr
        assert f'"peer": "{host}:{peer_port}"' in done.stdout, done.stdout
        # The publisher knew the reader by the certificate's name and sent it the bytes once.
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                    timeout=HANG_GUARD) as response:
            text = response.read().decode()
        sent = {s.labels["peer"]: s.value for family in text_string_to_metric_families(text)
                for s in family.samples if s.name == "tensorbroker_peer_sent_bytes_total"}
        assert sent == {PEER_NAME: weights.nbytes}, text
        # What the publisher's readers do not admit is, to the reader, not there.
        done = cli(reader_sock, "get", "policy/private", str(tmp_path / "no.npy"))
        assert done.returncode == 1
        assert "NOT_FOUND" in done.stderr and \
            f"is not published at peer {host}:{peer_port}" in done.stderr, done.stderr
        # The reader may not publish under its remote prefix.
        done = cli(reader_sock, "put", "policy/x", str(tmp_path / "w.npy"))
        assert done.returncode == 1
        assert "FAILED_PRECONDITION" in done.stderr and f"{host}:{peer_port}" in done.stderr, \
            done.stderr
        # Pod deletions, the reader first (its watch of the publisher ends with it).
        for role, ds in (("reader", readers), ("publisher", publishers)):
            stop_daemon(daemons[role], logs[role], pod_spec(ds)["terminationGracePeriodSeconds"])
        for role in logs:
            text = logs[role].read_text()
            assert [line for line in text.splitlines() if line[:3] in ("<3>", "<4>")] == [], text
    finally:
        for daemon in daemons.values():
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
