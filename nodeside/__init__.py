"""Programs that run on the nodes, shipped as they are (stdlib only, no project imports).

The renderer copies them into the node files (docstrings and comments stripped to keep
the payload small); the repository copy is the documented one and runs here too, e.g.
`python -m nodeside.verdict LOG`.
"""
