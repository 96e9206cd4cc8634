"""Shared GPUs at run time: what holds each share's compute, and the memory watch."""
