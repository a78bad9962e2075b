"""Everything that runs on the nodes and ships as it is (no project imports on a node).

Shell: bin/, steps/, lib/ (boot entry point, steps, helpers), system/ and conf/ (units,
static configs), registries/ (only with `containers`), validation/ (the first-boot gate,
its CLI and the container benchmark). Python (stdlib only): verdict.py,
validation_report.py and cluster_status.py (what `ops status` runs on the controller).
The renderers in userdata/ copy these into the node files (Python with docstrings and
comments stripped to keep the payload small); per-cluster values reach them through
cluster.env or validation/config.json. The repository copy is the documented one and
runs here too, e.g. `python -m nodeside.verdict LOG`.
"""
