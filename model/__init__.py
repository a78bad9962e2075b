"""The pure floor: stack config schema and instance catalog.

Imports neither pulumi nor anything of this repository above it (`userdata/`,
`infra/`, `localcluster/`); everything else imports from here.
"""
