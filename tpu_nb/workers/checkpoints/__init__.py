"""Checkpoints from inside the workers: saved in the background (`saving`), written to their place (`files`), read and checked."""
