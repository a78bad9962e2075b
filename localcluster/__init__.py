"""A real multi-node Slurm cluster from our own user data, on one machine.

Nodes are Linux namespaces (see nodes.py); each boots the rendered user data
unmodified, with only the three documented swaps from docs/node-contract.md.
"""
