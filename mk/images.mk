# Node root images for the faithful local lanes, baked like an AMI (localcluster/images.py).
# Needs root, debootstrap, and the vendored Enroot/Pyxis release tarballs in the
# directory GPU_CLUSTER_VENDOR_DIR names (the packages they need: docs/images.md).
LANE ?= bookworm

.PHONY: image images
image:
	$(PYTHON) -m localcluster.images build --lane $(LANE) --size

images:
	$(PYTHON) -m localcluster.images build --lane bookworm --size
	$(PYTHON) -m localcluster.images build --lane trixie --size
