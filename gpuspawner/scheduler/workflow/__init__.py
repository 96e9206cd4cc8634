"""Workflows in the core: the rules of dependencies between workloads (a job that waits for
another's success, end or failure; pipelines; cycles refused) and cron expressions and when they
fire in a time zone. Pure."""
