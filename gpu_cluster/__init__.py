"""gpu-cluster as a library for other Pulumi Python programs: `GpuCluster`, the whole
cluster as one component (infra/gpu_cluster.py; examples/component/)."""

from infra.gpu_cluster import GpuCluster
from model.version import VERSION as __version__

__all__ = ["GpuCluster", "__version__"]
