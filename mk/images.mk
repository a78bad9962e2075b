# Node root images for the faithful local lanes, baked like an AMI (localcluster/images.py).
# Needs root, debootstrap, and the vendored Enroot/Pyxis release tarballs in the
# directory GPU_CLUSTER_VENDOR_DIR names (the packages they need: docs/images.md).
LANE ?= bookworm

.PHONY: image images
image:
	$(VENV_PATH) $(VENV_PYTHON) -m localcluster.images build --lane $(LANE) --size

images:
	$(VENV_PATH) $(VENV_PYTHON) -m localcluster.images build --lane bookworm --size
	$(VENV_PATH) $(VENV_PYTHON) -m localcluster.images build --lane trixie --size
	$(VENV_PATH) $(VENV_PYTHON) -m localcluster.images build --lane slurm2311 --size
