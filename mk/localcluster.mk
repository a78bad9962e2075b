# Local cluster: a real Slurm cluster from the rendered user data, nodes as namespaces
# (issue 4). Needs root and Debian's slurmctld, slurmd, slurm-client, munge.
NODES ?= 2
PYTHON ?= python3

.PHONY: local-cluster local-cluster-down local-cluster-status bench-localcluster

local-cluster: deps
	$(PYTHON) -m localcluster up --nodes $(NODES)

local-cluster-down:
	$(PYTHON) -m localcluster down

local-cluster-status:
	$(PYTHON) -m localcluster status

bench-localcluster: deps
	$(PYTHON) bench/bench_localcluster.py
