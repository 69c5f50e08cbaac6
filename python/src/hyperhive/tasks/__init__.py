"""Background shell tasks: the engine, its arguments, output tails, how tasks are shown, and the bash tools."""
