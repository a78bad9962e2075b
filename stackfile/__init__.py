"""`Pulumi.<stack>.yaml` without Pulumi: the strict reader, the `--path` grammar, the
comment-keeping edit. Pure (PyYAML and the model's config names only), so the plan
writer, `ops` and the tests read a stack file the same way and `ops` starts without the
Pulumi SDK."""
