"""What passes between the kernel and its workers, and between the notebook and a pod's hosts.

Events (`events`) through one pipe (`channel`) from the workers to the
kernel, or as JSON lines from a pod's hosts (`host_lines`), each cut to fit
one atomic write (`limits`); the kernel's graceful stop request
(`stop_request`) in shared memory; the plan for the workers' environment
(`environment`) and mesh (`mesh`); the results a run leaves behind
(`results`), a worker's exception (`worker_exceptions`) and the
supervisor's report (`supervisor_report`), each file written whole
(`atomic_write`); a pod run's directory (`run_directory`); the checkpoint
format (`checkpoints`); durations and sizes read and written (`units`);
and where a run's files go (`locations`). Imported by both sides, it
imports neither.
"""
