#!/usr/bin/python3
"""Fails on an #include that crosses the layers the other way round.

Each C++ source of the tree belongs to a layer, named by where it sits (LAYERS, first match
wins); each layer may include only the layers it reaches through USES (its own among them). Headers of
the generated protocol code ("tensorbroker/v1/...", "grpc/health/...") are the layer `proto`;
the client's public headers ("tensorbroker/*.h") are `api`; anything else that is not a file of
the tree is a library's (Abseil, gRPC, ...), allowed everywhere except that `base` stays free
of gRPC and protobuf. Prints every offending line as FILE:LINE, then a summary.

    tests/style/check_layers.py [ROOT]
"""
import os
import re
import subprocess
import sys

# (path prefix, layer): the first that matches a file's path names its layer.
LAYERS = [
    ("common/wire/", "wire"),
    ("common/command_line.", "command_line"),
    ("common/", "base"),
    ("client/include/", "api"),
    ("client/src/", "client"),
    ("daemon/frontend/grpc/", "daemon/frontend/grpc"),
    ("daemon/frontend/local/", "daemon/frontend/local"),
    ("daemon/base/", "daemon/base"),
    ("daemon/identity/", "daemon/identity"),
    ("daemon/memory/", "daemon/memory"),
    ("daemon/store/", "daemon/store"),
    ("daemon/wire/", "daemon/wire"),
    ("daemon/persistence/", "daemon/persistence"),
    ("daemon/net/", "daemon/net"),
    ("daemon/remote/", "daemon/remote"),
    ("daemon/metrics/", "daemon/metrics"),
    ("daemon/app/", "daemon/app"),
    ("cli/", "cli"),
    ("python/src/", "python"),
    ("bench/", "bench"),
    ("tests/support/", "test_support"),
    ("tests/", "tests"),
]

# The direct edges each layer may have (its own layer is always allowed); a layer may also
# use whatever the layers it uses may use (the closure below). The daemon's folders form the
# DAG daemon/CMakeLists.txt draws.
USES = {
    "api": set(),
    "proto": set(),
    "base": {"api"},
    "wire": {"base", "proto"},
    "client": {"wire"},
    "daemon/base": {"base", "proto"},
    "daemon/identity": {"daemon/base"},
    "daemon/memory": {"daemon/base"},
    "daemon/store": {"daemon/identity", "daemon/memory", "wire"},
    "daemon/wire": {"daemon/store"},
    "daemon/persistence": {"daemon/store", "daemon/wire"},
    "daemon/net": {"daemon/identity"},
    "daemon/metrics": {"daemon/net"},
    "daemon/remote": {"daemon/wire", "daemon/net"},
    "daemon/frontend/grpc": {"daemon/store", "daemon/wire", "daemon/metrics"},
    "daemon/frontend/local": {"daemon/store", "daemon/wire", "daemon/metrics", "daemon/net",
                              "daemon/persistence"},
    "daemon/app": {"daemon/frontend/grpc", "daemon/frontend/local", "daemon/remote",
                   "command_line"},
    "command_line": {"base"},
    "cli": {"wire", "command_line"},
    "bench": {"test_support", "base", "proto", "command_line"},
    "test_support": {"base"},
}


def closure(uses):
    """Each layer with every layer it may reach, itself included."""
    reach = {}
    for layer in uses:
        seen, todo = {layer}, [layer]
        while todo:
            for next_layer in uses.get(todo.pop(), ()):
                if next_layer not in seen:
                    seen.add(next_layer)
                    todo.append(next_layer)
        reach[layer] = seen
    return reach


ALLOWED = closure(USES)
# The extension links the client library: its public API, and the pure helpers it compiles in
# (python/CMakeLists.txt) or reads inline.
ALLOWED["python"] = {"python", "api", "common/strided_copy.h", "common/tensor_layout.h",
                     "common/stats_schema.h"}
ALLOWED["tests"] = None  # tests may reach anything they test

# Libraries `base` may not use: it is the gRPC-free part of common/.
GRPC_OR_PROTOBUF = re.compile(r"^(grpc|grpcpp|grpc\+\+|google/protobuf)/")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer_of_path(path):
    for prefix, layer in LAYERS:
        if path.startswith(prefix):
            return layer
    return None


def layer_of_include(root, name):
    """The layer of an included name, or None for a library's header."""
    if name.startswith(("tensorbroker/v1/", "grpc/health/")):
        return "proto"
    if os.path.exists(os.path.join(root, "client/include", name)):
        return "api"
    if os.path.exists(os.path.join(root, name)):
        return layer_of_path(name)
    return None


def sources(root):
    try:
        listed = subprocess.run(["git", "-C", root, "ls-files", "*.cc", "*.h", "*.cu"],
                                check=True, capture_output=True, text=True).stdout.split()
        if listed:
            return listed
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if not d.startswith(("build", "."))]
        for f in files:
            if f.endswith((".cc", ".h", ".cu")):
                found.append(os.path.relpath(os.path.join(directory, f), root))
    return sorted(found)


def violations(root, path):
    layer = layer_of_path(path)
    if layer is None or ALLOWED[layer] is None:
        return
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as source:
        for number, line in enumerate(source, 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            name = match.group(2)
            target = layer_of_include(root, name)
            if target is None:
                if layer == "base" and GRPC_OR_PROTOBUF.match(name):
                    yield number, name, "base stays free of gRPC and protobuf"
                continue
            if target in ALLOWED[layer] or name in ALLOWED[layer]:
                continue
            yield number, name, f"{layer} may not depend on {target}"


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    files = sources(root)
    bad = 0
    for path in files:
        for number, name, why in violations(root, path):
            print(f"{path}:{number}: includes \"{name}\": {why}")
            bad += 1
    if bad:
        print(f"check_layers: {bad} include(s) cross the layers the wrong way "
              "(tests/style/check_layers.py says which layer may use which)", file=sys.stderr)
        return 1
    print(f"check_layers: {len(files)} files, every include within the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
