# Local cluster: a real Slurm cluster from the rendered user data (issues 4 and 9).
# LANE=bookworm|trixie|slurm2311 (default bookworm; slurm2311: the nodes' Slurm 23.11, built here): each node is a whole machine (systemd-nspawn,
# systemd as PID 1) that boots from the lane's baked root (localcluster/images.py, cached)
# with cloud-init running our exact user data. LANE=namespace: the fast direct-mode lane
# (network namespaces, no systemd). Needs root. Building a root needs the Enroot/Pyxis
# source tarballs in GPU_CLUSTER_VENDOR_DIR.
NODES ?= 2
LANE ?= bookworm
BENCH_SIZES ?= 2,8,32

.PHONY: local-cluster local-cluster-down local-cluster-status local-cluster-reboot \
	local-cluster-relaunch bench-localcluster

local-cluster: deps
	$(VENV_PATH) $(VENV_PYTHON) -m localcluster up --nodes $(NODES) --lane $(LANE)

local-cluster-down:
	$(VENV_PATH) $(VENV_PYTHON) -m localcluster down

local-cluster-status:
	$(VENV_PATH) $(VENV_PYTHON) -m localcluster status

# make local-cluster-reboot NODE=ip-10-77-0-12 [HARD=1]
local-cluster-reboot:
	@test -n "$(NODE)" || { echo "usage: make local-cluster-reboot NODE=<hostname> [HARD=1]" >&2; exit 2; }
	$(VENV_PATH) $(VENV_PYTHON) -m localcluster reboot $(NODE) $(if $(HARD),--hard)

local-cluster-relaunch:
	$(VENV_PATH) $(VENV_PYTHON) -m localcluster relaunch

bench-localcluster: deps
	$(VENV_PATH) $(VENV_PYTHON) bench/bench_localcluster.py --lane $(LANE) --sizes $(BENCH_SIZES)
