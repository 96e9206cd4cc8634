"""The admin panel: pages of the scheduler service at /services/gpuhub/admin/."""
