"""What every command-line program of gpu-cluster shares: the exit-code table, the
input layer (bounded file reads, checked numbers, ids and dates), the guarded entry
point, `--version` and shell completion. docs/cli.md describes them for users."""
