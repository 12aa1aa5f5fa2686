"""When a rank stops moving: the `watchdog` in each worker, and the stack dumps it and the kernel ask for (`stack_dumps`)."""
