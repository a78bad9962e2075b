"""The node copy of verdict.py, loaded as a node runs it."""


def shipped_namespace(files, where):
    """The node copy of verdict.py, run from a lib/ directory holding what it ships with."""
    lib = where / "lib"
    lib.mkdir(exist_ok=True)
    for name in ("verdict.py", "instance_types.json"):
        (lib / name).write_text(files[f"/opt/gpu-cluster/lib/{name}"])
    ns = {"__name__": "shipped_verdict", "__file__": str(lib / "verdict.py")}
    exec(compile(files["/opt/gpu-cluster/lib/verdict.py"], "verdict.py", "exec"), ns)
    return ns
