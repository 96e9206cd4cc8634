"""Workloads as users and admins see and steer them: reads (lists, views, waiting reasons, start
estimates) and the admin operations on the queue."""
