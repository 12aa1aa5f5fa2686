"""A run's life in the kernel: the one life cycle (`followed_run`), a run on this machine (`local_run`), in the background, and the processes it forks."""
