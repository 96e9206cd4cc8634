"""Hub-side pieces of the embedded default: the authenticator and `gpuhub up`."""
