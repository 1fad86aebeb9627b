"""localsgd_fuzzer: a libFuzzer target and a test that replays its seed corpus."""

def localsgd_fuzzer(name, srcs, deps, corpus):
    """`name`: the libFuzzer binary (bazel build --config=fuzz; tagged manual, it needs clang).
    `name`_corpus_test: the same code run over every file in `corpus` (a folder beside the
    BUILD file) by a plain main, in the normal test suite."""
    native.cc_binary(
        name = name,
        srcs = srcs,
        deps = deps,
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual"],
        testonly = True,
    )
    native.cc_test(
        name = name + "_corpus_test",
        srcs = srcs,
        deps = deps + ["//tests/testutil:fuzz_replay_main"],
        data = native.glob([corpus + "/**"]),
        args = [native.package_name() + "/" + corpus],
    )
