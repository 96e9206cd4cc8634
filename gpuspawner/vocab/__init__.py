"""The vocabulary: what users and the API ask for (job, share, sweep and schedule specs), the
kinds of workload and their states. Pure: parsing and validation over plain data, one name per
meaning from the API to the launch."""
