"""cluster_test: a shell test that runs a real coordinator and workers."""

def cluster_test(name, size = "small", data = [], tags = [], src = None, env = {}, flaky = False):
    """sh_test `name` from `name`.sh, with the coordinator, localsgdctl, the worker and
    tests/testutil/test_helpers.sh in its runfiles, plus `data`; `src` (default `name`.sh)
    and `env` let one script run as several tests; `flaky` as for sh_test."""
    native.sh_test(
        name = name,
        size = size,
        srcs = [src or name + ".sh"],
        data = [
            "//tests/testutil:test_helpers_sh",
            "//coordinator",
            "//coordinator:localsgdctl",
            "//worker",
            "//tests/testutil:dumping_worker",
        ] + data,
        tags = tags,
        env = env,
        flaky = flaky,
    )
