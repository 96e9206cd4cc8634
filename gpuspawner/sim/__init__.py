"""Trace-driven simulator: replay job traces against scheduling policies and plot the outcome."""
