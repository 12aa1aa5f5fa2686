"""What passes between the kernel and its workers.

Events (`events`) through one pipe (`channel`) from the workers to the
kernel; the kernel's graceful stop request (`stop_request`) in shared memory;
the plan for the workers' environment (`environment`); and the files a run
leaves behind (`results`). Imported by both sides, it imports neither.
"""
