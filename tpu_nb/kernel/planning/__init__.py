"""Before anything starts: the options as given, the checks, the workers' environment, the checkpoint plan and the deadline."""
