"""When a run goes quiet: every rank's stack from its process's dump, folded to the user's lines, and a verdict with its fix."""
