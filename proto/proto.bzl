"""C++ protobuf + gRPC code generated with Debian's protoc and grpc_cpp_plugin (offline)."""

def cc_grpc_library(name, srcs, deps = [], grpc = True, visibility = None):
    """Generates and compiles <srcs>.pb.{h,cc} (and .grpc.pb.{h,cc} when grpc is True).

    Args:
      name: the cc_library to define.
      srcs: .proto files in this package.
      deps: other cc_grpc_library targets whose protos these import.
      grpc: whether the files define services.
      visibility: passed on.
    """
    bases = [s[:-len(".proto")] for s in srcs]
    hdrs = [b + ".pb.h" for b in bases]
    ccs = [b + ".pb.cc" for b in bases]
    if grpc:
        hdrs += [b + ".grpc.pb.h" for b in bases]
        ccs += [b + ".grpc.pb.cc" for b in bases]
    grpc_flags = " --grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin" if grpc else ""
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = hdrs + ccs,
        cmd = "/usr/bin/protoc -I. --cpp_out=$(GENDIR)" + grpc_flags + " " +
              " ".join(["$(location %s)" % s for s in srcs]),
    )
    native.filegroup(
        name = name + "_srcs",
        srcs = srcs + [d + "_srcs" for d in deps],
        visibility = visibility,
    )
    native.cc_library(
        name = name,
        srcs = ccs,
        hdrs = hdrs,
        deps = deps + [
            "@system_libs//:protobuf",
        ] + (["@system_libs//:grpc"] if grpc else []),
        visibility = visibility,
    )
