"""LibTorch as a Bazel repository: Debian's (CPU) by default, or the one a PyTorch
installation or wheel provides (`torch/` with `include/` and `lib/`, CUDA-enabled for GPUs)
when the environment variable LOCALSGD_TORCH_DIR names it, e.g.

    LOCALSGD_TORCH_DIR=/opt/venv/lib/python3.11/site-packages/torch bazel build --config=cuda //worker

That LibTorch must use the C++11 ABI (as Debian's libraries do); LibTorch 1.13 and 2.x both
work.
"""

def _torch_repository_impl(ctx):
    root = ctx.os.environ.get("LOCALSGD_TORCH_DIR", "")
    if root:
        if not ctx.path(root + "/include/torch/csrc/api/include").exists:
            fail("LOCALSGD_TORCH_DIR=%s has no include/torch/csrc/api/include" % root)
        ctx.symlink(root + "/include", "include")
        ctx.symlink(root + "/lib", "lib")
        libs = [
            "lib/" + name
            for name in ["libc10.so", "libtorch.so", "libtorch_cpu.so", "libc10_cuda.so", "libtorch_cuda.so"]
            if ctx.path(root + "/lib/" + name).exists
        ]
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "torch",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh"]),
    includes = ["include", "include/torch/csrc/api/include"],
    srcs = {libs},
    defines = ["USE_C10D_GLOO"],
    linkopts = ["-Wl,-rpath,{root}/lib", "-lpthread"],
)
""".format(libs = repr(libs), root = root)
    else:
        ctx.symlink("/usr/include/torch/csrc/api/include", "api")
        build = """
package(default_visibility = ["//visibility:public"])
# Debian's libtorch-dev: the C++ API include root (other headers are in /usr/include).
cc_library(
    name = "torch",
    hdrs = glob(["api/**/*.h"]),
    includes = ["api"],
    # c10d's ProcessGroupGloo.hpp needs this define (Gloo's headers: libgloo-dev).
    defines = ["USE_C10D_GLOO"],
    deps = ["@system_libs//:torch_libs"],
)
"""
    ctx.file("BUILD.bazel", build)

torch_repository = repository_rule(
    implementation = _torch_repository_impl,
    environ = ["LOCALSGD_TORCH_DIR"],
    local = True,
)
