"""What-if previews: history replayed under proposed settings, and their REST handlers."""
