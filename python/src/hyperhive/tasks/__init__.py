"""Background shell tasks: the engine, its process-group plumbing, output tails, and how tasks are shown."""
