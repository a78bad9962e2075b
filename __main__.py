"""Pulumi program entry point; everything lives in infra/."""

from infra.stack import main

main()
