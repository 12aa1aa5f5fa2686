"""The run log: a record of every run in the kernel's working directory (`log.py`), each record written and read safely (`run_record.py`), and
`%tpu_runs`'s table and curves (`view.py`).
"""
