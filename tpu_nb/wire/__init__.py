"""What passes between the kernel and its workers, and between the notebook and a pod's hosts.

Events (`events`) through one pipe (`channel`) from the workers to the
kernel, or as JSON lines from a pod's hosts (`host_lines`), each cut to fit
one atomic write (`limits`); a local run's graceful stop request
(`shared_memory_stop`) and its reason (`stop_reason`); the plan for the workers' environment
(`environment`) and mesh (`mesh`); the results a run leaves behind
(`results`), a worker's exception (`worker_exceptions`) and the
supervisor's report (`supervisor_report`); a pod run's directory (`run_directory`, its stop file too); the
watchdog's setting and stack reports (`stacks`); the checkpoint
format (`checkpoints`); durations and sizes read and written (`units`);
and where a run's files go (`locations`). Imported by both sides, it
imports neither.
"""
