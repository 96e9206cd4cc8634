"""Teams and what they use: team rows and quotas, usage and cost."""
