"""A run's life in the kernel: the one life cycle (`followed_run`), a run on this machine (`local_run`), in the
`background`, the `processes` it forks (`forking`), the imports warmed for it (`warm_imports`), the private
directories runs leave (`leftovers`), and how long a graceful stop waits (`stop_wait`).
"""
