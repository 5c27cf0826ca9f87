"""What one backend does beyond the contract: Redis, Cluster, Sentinel, Redlock, faults."""
