"""A real multi-node Slurm cluster from our own user data, on one machine.

    make local-cluster [NODES=N]      # python -m localcluster up --nodes N
    python -m localcluster status
    python -m localcluster replace ip-10-77-0-12
    make local-cluster-down           # python -m localcluster down (safe to repeat)

Nodes are Linux namespaces (nodes.py). Each boots the rendered user data unmodified
(profile.py parses it back from the gzip/MIME bytes, as cloud-init would), with only
the three swaps of docs/node-contract.md in /etc/gpu-cluster/overrides.env: the IMDSv2
stand-in (imds.py), `direct` services and `preinstalled` packages. The instance spec is
a test profile measured from this host with `slurmd -C`, without GPUs or EFA.
Needs root and Debian's slurmctld, slurmd, slurm-client and munge.
"""
