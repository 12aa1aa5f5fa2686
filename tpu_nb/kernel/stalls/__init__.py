"""When a run goes quiet: every rank's stack from its process's dump, folded to the user's lines, and a verdict with its fix.

`record` keeps what the watchdog knows of a run (each rank's process and
step, who went silent, which stall was said) and the rules of when to ask;
`watch` asks a local run's worker processes through their dump files and
`pod_stacks` a pod's hosts through their run directory; `folding` turns a
rank's stack into its cell line and the call it waits in; `verdicts` says
what it means and its fix.
"""
