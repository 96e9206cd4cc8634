"""Schedules: jobs submitted at each firing of a cron expression, their owners' membership
checks and REST handlers."""
