"""A real multi-node Slurm cluster from our own user data, on one machine.

    make local-cluster [NODES=N] [LANE=bookworm|trixie|slurm2311|namespace]
                                      # python -m localcluster up --nodes N --lane L
    python -m localcluster status
    python -m localcluster replace ip-10-77-0-12
    python -m localcluster reboot ip-10-77-0-12 [--hard]     (machine lanes)
    python -m localcluster relaunch                           (new machines, kept /fsx)
    make local-cluster-down           # python -m localcluster down (safe to repeat)

Lanes (docs/node-contract.md, "Local cluster lanes"):
- bookworm (default), trixie: each node is a whole machine (machine.py): systemd-nspawn
  with systemd as PID 1, booted from the lane's baked root (images.py), with cloud-init
  running the exact rendered user data from a NoCloud seed;
- namespace: nodes are Linux namespaces (nodes.py) that boot the rendered user data
  in direct mode (profile.py parses it back from the gzip/MIME bytes, as cloud-init
  would), with `direct` services and `preinstalled` packages.
Every lane keeps the metadata swap: the IMDSv2 stand-in (imds.py) in each node's network
namespace. The instance spec is a test profile measured from this host with
`slurmd -C`, without GPUs or EFA. Needs root.
"""
