"""What passes between the kernel and its workers, and between the notebook and a pod's hosts.

Events (`events`) through one pipe (`channel`) from the workers to the
kernel, or as JSON lines from a pod's hosts (`host_lines`), each cut to fit
one atomic write (`limits`); the kernel's graceful stop request
(`stop_request`) in shared memory; the plan for the workers' environment
(`environment`) and mesh (`mesh`); the results a run leaves behind
(`results`); and a pod run's directory (`run_directory`). Imported by both
sides, it imports neither.
"""
