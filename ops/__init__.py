"""Operations CLI for gpu-cluster clusters (boto3): preflight, find-blocks, status, replace.

Run as `python3 -m ops <command>`; `docs/operations.md` describes every command.
"""
