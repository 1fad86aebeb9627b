"""Python's headers and LibTorch's Python bindings as a Bazel repository, for the localsgd
Python package (//python). The interpreter is the one that has torch: LOCALSGD_PYTHON when
set, else Debian's python3 (python3-torch), which uses the same LibTorch as the C++ side.
"""

def _python_repository_impl(ctx):
    python = ctx.os.environ.get("LOCALSGD_PYTHON", "/usr/bin/python3")
    probe = ctx.execute([python, "-c", "\n".join([
        "import os, sysconfig",
        "print(sysconfig.get_paths()['include'])",
        "try:",
        "    import torch",
        "    print(os.path.join(os.path.dirname(torch.__file__), 'lib'))",
        "except ImportError:",
        "    print('')",
    ])])
    lines = probe.stdout.strip().split("\n") if probe.return_code == 0 else []
    if len(lines) == 2 and lines[1] and ctx.path(lines[0] + "/Python.h").exists:
        ctx.symlink(lines[0], "include")
        ctx.symlink(lines[1] + "/libtorch_python.so", "lib/libtorch_python.so")
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
)
cc_library(
    name = "torch_python",
    srcs = ["lib/libtorch_python.so"],
)
"""
    else:
        # No interpreter with torch and its headers: //python does not build (scripts/setup.sh
        # installs python3-dev and python3-torch); everything else does.
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(name = "headers", srcs = [":missing"])
cc_library(name = "torch_python", srcs = [":missing"])
genrule(
    name = "missing",
    outs = ["missing.so"],
    cmd = "echo '{python} has no torch or no Python.h (apt-get install python3-dev python3-torch)' >&2; exit 1",
)
""".format(python = python)
    ctx.file("BUILD.bazel", build)

python_repository = repository_rule(
    implementation = _python_repository_impl,
    environ = ["LOCALSGD_PYTHON"],
    local = True,
)
