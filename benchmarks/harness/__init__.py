"""What every benchmark shares: load generators, result tables, machine facts, inputs."""
