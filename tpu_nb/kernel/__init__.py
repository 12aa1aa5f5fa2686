"""What runs in the notebook's own process (the kernel), which never touches an XLA device.

`magics` and `launching` are the entry points; a `runs.Run` checks
(`preflight`), forks the workers (`processes`, `forking`), follows their
events and ends in an `endings.Ending`; `cells` compiles a `%%tpu_train` cell
and puts its results into the notebook; `background` follows a run while the
notebook stays free; `progress` turns the workers' reports into the
dashboard.
"""
