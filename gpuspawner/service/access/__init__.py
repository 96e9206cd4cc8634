"""Who may do what: the caller's identity and scopes, jobs' own tokens and what they may do, the
hub's API as the service calls it, and whether the database is exposed."""
